"""Benchmark 5: one daily partition through Dagster against calling the library directly.

Both paths do the same work on the same Spark session: start the synthetic API, fetch the day's transactions
into the raw zone, load bronze, build silver and gold through write-audit-publish. Dagster: `materialize` of the
four transaction assets with the project's definitions and resources (`build_definitions`), on an ephemeral
instance. Library: `fetch_day`, `load_bronze`, `build_silver`, `build_gold` from `etr_assets.pipeline.transactions`.
Each run takes a new day; the first run of each path is a warm-up and is not counted.
"""

from __future__ import annotations

import datetime as dt
import uuid

from bench.common import Lake, measure, ratio
from etr_assets.settings import Settings

TITLE = "Benchmark 5 — orchestration overhead: one partition through Dagster against the library"
WARM_UP_ROUNDS = 1  # rounds not counted: the first run of each path loads classes and plans
TRANSACTION_ASSETS = (
    "raw/bnpl_transactions",
    "bronze/bnpl_transactions_raw",
    "silver/bnpl_transactions_clean",
    "gold/bnpl_daily_summary",
)


def through_dagster(defs, day: dt.date) -> int:
    from dagster import DagsterInstance, materialize

    assets = [a for a in defs.assets if any(k.to_user_string() in TRANSACTION_ASSETS for k in a.keys)]
    resources = defs.get_repository_def().get_top_level_resources()
    result = materialize(
        assets,
        resources=resources,
        partition_key=day.isoformat(),
        instance=DagsterInstance.ephemeral(),
        raise_on_error=True,
    )
    return len(result.get_asset_materialization_events())


def through_library(spark, settings: Settings, day: dt.date) -> int:
    from etr_assets.lake.wap import branch_name
    from etr_assets.pipeline import transactions as pipeline
    from etr_assets.sources.fetch import fetch_day
    from etr_assets.sources.http_fetch import connect
    from etr_assets.sources.raw_zone import local_raw_zone
    from etr_assets.sources.synthetic_api import ApiConfig, serve
    from etr_assets.tables.declared import source

    raw = local_raw_zone(settings.raw_root)
    with serve(ApiConfig(seed=settings.api_seed, transactions_per_day=settings.api_transactions_per_day)) as api:
        # the declared BNPL source's client (its declared 30 s timeout)
        client = connect(
            source("bnpl").declaration,
            {},
            base_url=api.url,
            secrets={"token": "etr-local-token"},
            page_size=settings.api_page_size,
        )
        fetch_day(client, raw, "transactions", day)
    days = [day]
    pipeline.load_bronze(spark, settings.catalog, raw, days, max_reject_rate=settings.max_reject_rate)
    pipeline.build_silver(spark, settings.catalog, days, audit_branch=branch_name(uuid.uuid4().hex))
    pipeline.build_gold(spark, settings.catalog, days, audit_branch=branch_name(uuid.uuid4().hex))
    return 4


def run(lake: Lake, scale: float, repeats: int = 3) -> dict:
    import dataclasses

    from etr_assets.definitions import build_definitions
    from etr_assets.lake.session import attach_catalog

    per_day = max(20, int(2_000 * scale))
    settings = dataclasses.replace(lake.settings, api_transactions_per_day=per_day)
    spark = attach_catalog(lake.spark, settings)
    defs = build_definitions(settings)
    day = settings.start_date
    rows = []
    for number in range(max(1, repeats) + WARM_UP_ROUNDS):
        for path, call in (
            ("Dagster materialize", lambda d: through_dagster(defs, d)),
            ("library calls", lambda d: through_library(spark, settings, d)),
        ):
            seconds, counters, _ = measure(spark, lambda c=call, d=day: c(d))
            rows.append(
                {
                    "round": number,
                    "path": path,
                    "day": day.isoformat(),
                    "seconds": round(seconds, 3),
                    "spark_tasks": counters["tasks"],
                    "counted": number >= WARM_UP_ROUNDS,
                }
            )
            day += dt.timedelta(days=1)
    counted = [r for r in rows if r["counted"]]
    best = {p: min(r["seconds"] for r in counted if r["path"] == p) for p in ("Dagster materialize", "library calls")}
    overhead = best["Dagster materialize"] - best["library calls"]
    return {
        "title": TITLE,
        "data": {"transactions_per_day": per_day, "assets": list(TRANSACTION_ASSETS)},
        "data_description": (
            f"One daily partition of {per_day:,} synthetic transactions (the synthetic API over loopback) through "
            f"raw, bronze, silver and gold, in the same process and Spark session for both paths."
        ),
        "counters_description": (
            "Wall time of each run (best of the counted rounds) and the Spark tasks it ran (task metrics by job "
            "group): equal task counts show both paths did the same Spark work."
        ),
        "tables": [{"title": "Runs", "rows": rows}],
        "ratios": {
            "Dagster / library, time for one partition": ratio(best["Dagster materialize"], best["library calls"]),
            "Dagster overhead, seconds per partition": round(overhead, 3),
        },
        "charts": [
            {
                "file": "orchestration.png",
                "title": "One partition: seconds (best of counted rounds)",
                "xlabel": "seconds",
                "labels": ["one partition"],
                "series": {p: [s] for p, s in best.items()},
            }
        ],
        "notes": [
            (
                "Both paths reuse a warm JVM. A real Dagster run is a new process: add the JVM start and first Iceberg "
                "statement (5-8 s, docs/stack.md) and `import dagster` with the definitions (about 2 s)."
            ),
        ],
    }
