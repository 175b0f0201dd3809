"""Benchmark 3: hundreds of tiny appends, then the project's maintenance (`etr_assets/lake/maintenance.py`).

A copy of the silver table (same spec) receives many small appends (each a slice of one day), as a table fed
by frequent micro-batches does. Scan time, planning time and the health figures are measured before and after
compaction (`compact`), manifest rewrite (`rewrite_manifests`) and snapshot expiry (`expire_snapshots`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from bench import data
from bench.common import Lake, best_of, measure, ratio, run_scan
from etr_assets.lake.evolve import ensure_table
from etr_assets.lake.health import table_health
from etr_assets.lake.maintenance import compact, expire_snapshots, rewrite_manifests
from etr_assets.tables.transactions import SILVER_TRANSACTIONS

TITLE = "Benchmark 3 — small files: scans and planning before and after maintenance"
APPENDS_PER_SCALE = 300
ROWS_PER_APPEND = 200
DAYS = 10  # every append writes one tiny file in each day


def state(lake: Lake, spec, label: str, repeats: int) -> dict:
    table = spec.qualified(lake.catalog)
    day = (data.FIRST_DAY + dt.timedelta(days=DAYS // 2)).isoformat()
    full_s, full, _ = best_of(repeats, lambda: run_scan(lake.spark, f"SELECT * FROM {table}"))
    day_s, one_day, _ = best_of(
        repeats, lambda: run_scan(lake.spark, f"SELECT * FROM {table} WHERE transaction_date = DATE'{day}'")
    )
    health = table_health(lake.settings, spec)
    return {
        "state": label,
        "full_scan_s": round(full_s, 3),
        "full_scan_planning_ms": full.get("planning_ms"),
        "one_day_s": round(day_s, 3),
        "one_day_planning_ms": one_day.get("planning_ms"),
        "files_read_full_scan": full.get("files_read"),
        "manifests_scanned": full.get("manifests_scanned"),
        "data_files": health.data_files,
        "small_files": health.small_files,
        "manifests": health.manifests,
        "snapshots": health.snapshots,
        "metadata_file_bytes": health.metadata_file_bytes,
        "health": health.status,
        "rows": full.get("rows"),
    }


def _summary(result) -> str:
    figures = {k: v for k, v in dataclasses.asdict(result).items() if isinstance(v, int)}
    if hasattr(result, "expired_snapshots"):
        figures["expired_snapshots"] = result.expired_snapshots
    return ", ".join(f"{k}={v}" for k, v in figures.items())


def run(lake: Lake, scale: float, repeats: int = 3) -> dict:
    from pyspark.sql import functions as F

    spark = lake.spark
    appends = max(5, int(APPENDS_PER_SCALE * scale))
    spec = dataclasses.replace(SILVER_TRANSACTIONS, name="bnpl_transactions_small_files")
    ensure_table(spark, lake.catalog, spec)
    table = spec.qualified(lake.catalog)
    rows = (
        data.transactions(spark, appends * ROWS_PER_APPEND, DAYS, 5_000)
        .withColumn("_slice", (F.abs(F.xxhash64("transaction_id")) % appends).cast("int"))
        .cache()
    )
    rows.count()
    load_s, _, _ = measure(
        spark, lambda: [rows.where(F.col("_slice") == i).drop("_slice").writeTo(table).append() for i in range(appends)]
    )
    before = state(lake, spec, f"after {appends} appends", repeats)
    rows.unpersist()

    steps = []
    for name, step in (
        ("compact (rewrite_data_files)", lambda: compact(spark, lake.catalog, spec, has_delete_files=False)),
        ("rewrite_manifests", lambda: rewrite_manifests(spark, lake.catalog, spec)),
        (
            "expire_snapshots (keep 1)",
            lambda: expire_snapshots(spark, lake.catalog, spec, older_than=dt.datetime.now(dt.UTC), retain_last=1),
        ),
    ):
        seconds, counters, result = measure(spark, step)
        steps.append(
            {
                "step": name,
                "seconds": round(seconds, 3),
                "input_bytes": counters["input_bytes"],
                "result": _summary(result),
            }
        )
    after = state(lake, spec, "after maintenance", repeats)
    ratios = {
        "full scan time, before / after maintenance": ratio(before["full_scan_s"], after["full_scan_s"]),
        "full scan planning time, before / after": ratio(
            before["full_scan_planning_ms"], after["full_scan_planning_ms"]
        ),
        "one-day query time, before / after": ratio(before["one_day_s"], after["one_day_s"]),
        "data files, before / after": ratio(before["data_files"], after["data_files"]),
        "manifests, before / after": ratio(before["manifests"], after["manifests"]),
        "snapshots, before / after": ratio(before["snapshots"], after["snapshots"]),
    }
    return {
        "title": TITLE,
        "data": {
            "appends": appends,
            "rows_per_append": ROWS_PER_APPEND,
            "days": DAYS,
            "load_seconds": round(load_s, 1),
        },
        "data_description": (
            f"{appends} appends of {ROWS_PER_APPEND} synthetic transactions each (one slice of {DAYS} days each) "
            f"into a copy of the silver table (same spec: days(transaction_date), 128 MiB target files)."
        ),
        "counters_description": (
            "Scans: best-of-runs time, Iceberg BatchScan metrics (`totalPlanningDuration` as planning_ms, "
            "`resultDataFiles`, `scannedDataManifests`); table figures: `etr_assets.lake.health.table_health` "
            "(pyiceberg metadata); maintenance steps: `etr_assets.lake.maintenance` results and task input bytes."
        ),
        "tables": [
            {"title": "Before and after", "rows": [before, after]},
            {"title": "Maintenance steps", "rows": steps},
        ],
        "ratios": ratios,
        "charts": [
            {
                "file": "small_files.png",
                "title": "Small files: before and after maintenance",
                "xlabel": "seconds",
                "labels": ["full scan", "one day"],
                "series": {s["state"]: [s["full_scan_s"], s["one_day_s"]] for s in (before, after)},
            }
        ],
    }
