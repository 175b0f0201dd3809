"""What a day costs on S3: every S3 request of a daily run, by kind and by layer, and the bytes the lake keeps.

    python -m bench.s3_costs [DAYS [PER_DAY [SMALL_PER_DAY [WEEKLY [TABLES]]]]]
    (defaults: 30 days of 50,000 transactions, a second lake of 5,000, every table of the first maintained every 7 days;
    TABLES, comma-separated, limits the weekly maintenance to those tables: a smoke test's, each table's is alike)

The `s3` profile as a deployment runs it: Spark through S3A on moto's S3 server on loopback, the Iceberg JDBC catalog
on a private PostgreSQL, the raw zone on the same bucket through boto3. The server counts every request it answers
(etr_assets_tests.infra.counting_moto_server), labelled with the layer that was running: raw fetch, bronze, landing,
silver, gold (each table layer's build), checks (what follows each build: checks, metric rows, figures), maintenance
(the health sensor's reading of every table, and table_maintenance on each table that WARNs; every table on day 7,
14, 21 and 28, the weekly schedule). Beside the server's counts, what the project itself reports (S3A's counters in
the JVM, the raw zone client's): the materialization metadata's figures, checked against the server's.

Snapshot expiry follows a simulated calendar: the run's days pass in minutes, so on day d maintenance expires the
snapshots committed before the end of day d-7 (the spec's 7-day retention), not those older than 7 real days.

Stored bytes: every object under warehouse/ (listed with boto3, unlabelled); live bytes: the data and delete files
the tables' current snapshots reference (their metadata). Amplification = stored / live, after each day's layers and
after its maintenance. Targets: day DAYS's requests <= 1.2x day 1's for every layer; amplification <= 1.5x right
after maintenance. A second lake of SMALL_PER_DAY a day gives a second size: requests(n) = a + b n per layer, from
both lakes' day 2, extrapolated to 1,000,000 transactions a day and priced with etr_assets.lake.s3_costs.PRICES.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

from bench.common import RESULTS_DIR, machine, revision

OUT = Path(os.environ.get("ETR_BENCH_RESULTS", RESULTS_DIR))  # where s3_costs*.json go (a smoke test: its tmp dir)

LAYER_GROUPS = ("raw fetch", "bronze", "landing", "silver", "gold", "checks", "maintenance")
REQUEST_TARGET = 1.2
AMPLIFICATION_TARGET = 1.5
MILLION = 1_000_000
FIRST_DAY = dt.date(2025, 1, 1)


def say(text: str) -> None:
    print(f"bench s3_costs: {text}", file=sys.stderr, flush=True)


class Lake:
    """One s3-profile lake on the counting server: its settings, session, raw zone and source."""

    def __init__(self, spark, settings, raw, api, counted, s3):
        self.spark, self.settings, self.raw, self.api, self.counted, self.s3 = spark, settings, raw, api, counted, s3
        self.weekly = 7  # every table maintained every this many days (the weekly schedule)
        self.weekly_tables: list[str] = []  # the tables it maintains, if not every table
        self.day_ends: list[float] = []  # the wall-clock end of each simulated day (the expiry calendar)

    def client(self):
        from etr_assets.sources.http_fetch import SourceClient
        from etr_assets.tables.declared import source

        declaration = source("bnpl").declaration
        return SourceClient(declaration, self.api.url, {"token": self.api.config.token}, page_size=1000, timeout=120)

    @contextlib.contextmanager
    def labelled(self, label: str):
        """The server's requests while the block runs are `label`'s; those outside any block are `measurement`'s."""
        self.counted.label = label
        try:
            yield
        finally:
            self.counted.label = "measurement"

    def run_day(self, number: int) -> dict:
        """One daily run (raw fetch, each table layer, its checks), then maintenance as a deployment's would run."""
        from etr_assets.lake.wap import branch_name
        from etr_assets.pipeline.layers import LAYERS, finish_layer
        from etr_assets.sources.fetch import fetch_day

        day, run_id = FIRST_DAY + dt.timedelta(days=number - 1), f"bench-s3-{uuid.uuid4().hex[:8]}"
        reported: Counter = Counter()  # what the project reports: S3A's counters and the raw zone client's
        raw_before = +self.raw.storage.requests
        client = self.client()
        with self.labelled("raw fetch"):
            for endpoint in client.declaration.names:
                fetch_day(client, self.raw, endpoint, day)
        for kind, n in (self.raw.storage.requests - raw_before).items():
            reported[("raw fetch", kind)] += n
        for name, layer in LAYERS.items():
            group = name.split("/")[0]
            request = layer.request([day.isoformat()], branch_name(run_id))
            before = self.reported_counts()
            with self.labelled(group):
                result = layer.build(self.spark, self.settings.catalog, lambda: self.raw, request)
            built = self.reported_counts()
            with self.labelled("checks"):
                finish_layer(self.spark, self.settings.catalog, request, result, run_id)
            for label, counts in ((group, built - before), ("checks", self.reported_counts() - built)):
                for kind, n in counts.items():
                    reported[(label, kind)] += n
        self.day_ends.append(time.time())
        before_maintenance = self.storage()
        with self.labelled("maintenance"):
            maintained = self.maintain(number)
        return {
            "day": number,
            "reported": {f"{label}|{kind}": n for (label, kind), n in reported.items()},
            "storage_before_maintenance": before_maintenance,
            "storage_after_maintenance": self.storage(),
            "maintained": maintained,
        }

    def run_layer_figures(self, number: int) -> dict:
        """`run_layer` (what an asset step calls) of the daily summary for day `number` again: the S3 figures it
        puts in the materialization's metadata, and what the server answered meanwhile."""
        from etr_assets.pipeline.layers import LAYERS, run_layer
        from etr_assets.tables.transactions import GOLD_DAILY_SUMMARY

        layer = next(name for name, each in LAYERS.items() if each.spec is GOLD_DAILY_SUMMARY)
        day = (FIRST_DAY + dt.timedelta(days=number - 1)).isoformat()
        self.counted.counts.clear()
        with self.labelled("run_layer"):
            finished = run_layer(self.spark, self.settings.catalog, lambda: self.raw, LAYERS[layer].request([day]), "x")
        figures = {k: v for k, v in finished.figures.items() if k.startswith("s3_request")}
        return {"figures": figures, "server": dict(self.counted.of("run_layer"))}

    def reported_counts(self) -> Counter:
        """What the project counts itself: S3A's counters in the JVM and the raw zone client's."""
        from etr_assets.lake.s3_costs import s3a_request_counts

        return s3a_request_counts(self.spark, self.settings.catalog) + self.raw.storage.requests

    def maintain(self, number: int) -> list[str]:
        """The health sensor's choice (every table that WARNs) and, every seventh day, the weekly schedule's (all, or
        `weekly_tables`)."""
        from etr_assets.lake.health import table_health
        from etr_assets.lake.maintenance import maintain_table
        from etr_assets.tables import ALL_SPECS

        weekly = number % self.weekly == 0
        covered = self.weekly_tables or [s.identifier for s in ALL_SPECS]
        due = [
            s
            for s in ALL_SPECS
            if (h := table_health(self.settings, s)).exists
            and (weekly and s.identifier in covered or h.needs_maintenance)
        ]
        week_back = number - 7  # the day whose end is the retention's cutoff on the simulated calendar
        cutoff = dt.datetime.fromtimestamp(self.day_ends[week_back - 1] if week_back >= 1 else 0, dt.UTC)
        for spec in due:
            maintain_table(
                self.spark, self.settings, spec, run_id=f"bench-maintenance-{number}", snapshots_older_than=cutoff
            )
        return [s.identifier for s in due]

    def storage(self) -> dict:
        """Bytes under warehouse/ against the bytes the current snapshots reference."""
        from etr_assets.lake.metadata import table_stats
        from etr_assets.tables import ALL_SPECS

        stored = 0
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.settings.bucket, Prefix="warehouse/"):
            stored += sum(obj["Size"] for obj in page.get("Contents", []))
        tables = [s for s in (table_stats(self.settings, spec) for spec in ALL_SPECS) if s.exists]
        live = sum(s.bytes for s in tables)
        return {
            "stored_bytes": stored,
            "live_bytes": live,
            "amplification": round(stored / live, 3) if live else None,
            "by_table": {s.table: {"stored_bytes": s.stored_bytes, "live_bytes": s.bytes} for s in tables},
        }


def run_lake(
    spark,
    jdbc_url: str,
    endpoint: str,
    counted,
    home: Path,
    days: int,
    per_day: int,
    name: str,
    weekly: int = 7,
    weekly_tables: list[str] | None = None,
) -> list[dict]:
    """A fresh lake (bucket, catalog) of `per_day` transactions a day, run for `days` days; each day's figures."""
    import dataclasses

    from etr_assets.lake.bootstrap import bootstrap_with_spark
    from etr_assets.lake.session import attach_catalog
    from etr_assets.sources.s3_storage import s3_raw_zone
    from etr_assets.sources.synthetic_api import ApiConfig, serve
    from etr_assets.tables import ALL_SPECS
    from etr_assets_tests.infra import create_bucket, s3_client

    bucket = f"etr-{name}-{uuid.uuid4().hex[:6]}"
    s3 = s3_client(endpoint, spark.conf.get("spark.hadoop.fs.s3a.endpoint.region"))
    create_bucket(s3, bucket)
    settings = s3_settings(home / name, bucket, endpoint, jdbc_url, f"c_{name}")
    settings = dataclasses.replace(settings, api_transactions_per_day=per_day)
    attach_catalog(spark, settings)
    counted.label = "bootstrap"
    bootstrap_with_spark(spark, settings.catalog, ALL_SPECS)
    rows = []
    with serve(ApiConfig(transactions_per_day=per_day, seed=settings.api_seed)) as api:
        lake = Lake(spark, settings, s3_raw_zone(s3_client(endpoint, settings.region), bucket), api, counted, s3)
        lake.weekly, lake.weekly_tables = weekly, weekly_tables or []
        for number in range(1, days + 1):
            counted.counts.clear()
            counted.mark = str(number)
            started = time.perf_counter()
            row = lake.run_day(number)
            row |= {"per_day": per_day, "seconds": round(time.perf_counter() - started, 1)}
            row["server"] = {f"{label}|{kind}": n for (label, kind), n in counted.counts.items()}
            rows.append(row)
            total = sum(n for key, n in row["server"].items() if not key.startswith("measurement"))
            after = row["storage_after_maintenance"]["amplification"]
            OUT.mkdir(exist_ok=True)  # each day as it ends: a run stopped midway keeps its days
            (OUT / f"s3_costs_{name}_days.json").write_text(json.dumps(rows, indent=1, default=str))
            say(
                f"{name} day {number}: {total:,} requests, amplification {after}x after maintenance, {row['seconds']} s"
            )
        if name == "small":  # what a materialization reports, against the server: one more gold build, run_layer's
            rows[-1]["run_layer_figures"] = lake.run_layer_figures(days)
    return rows


def s3_settings(home: Path, bucket: str, endpoint: str, jdbc_url: str, catalog: str):
    from etr_assets.settings import Settings

    return Settings(
        profile="s3", bucket=bucket, s3_endpoint=endpoint, jdbc_url=jdbc_url, jdbc_user="postgres", home=home,
        catalog=catalog, driver_memory="4g", manifest_cache=Settings.from_env().manifest_cache,
    )  # fmt: skip


def by_layer(row: dict, source: str = "server") -> Counter:
    found: Counter = Counter()
    for key, n in row[source].items():
        label, _ = key.split("|")
        if label in LAYER_GROUPS:
            found[label] += n
    return found


def by_kind(row: dict, layer: str | None = None) -> Counter:
    found: Counter = Counter()
    for key, n in row["server"].items():
        label, kind = key.split("|")
        if label in LAYER_GROUPS and layer in (None, label):
            found[kind] += n
    return found


def summarise(big: list[dict], small: list[dict], per_day: int, small_per_day: int) -> dict:
    from etr_assets.lake.s3_costs import PRICES, request_cost, storage_cost

    first, second, last = big[0], big[1], big[-1]
    growth = []
    for layer in LAYER_GROUPS:
        # Maintenance's day is the health sensor's reading and what it sent, as any layer's; the days tables were
        # maintained are listed apart (maintenance_requests).
        one, two, n = by_layer(first)[layer], by_layer(second)[layer], by_layer(last)[layer]
        ratio = round(n / one, 3) if one else None
        verdict = "met" if ratio is not None and ratio <= REQUEST_TARGET else ("MISSED" if ratio else "n/a")
        # Day 1 writes into empty tables: day 2 is the first day that reads a day before's files and snapshots.
        to_two = round(n / two, 3) if two else None
        growth.append(
            {"layer": layer, "day 1": one, "day 2": two, f"day {last['day']}": n, "ratio": ratio, "verdict": verdict}
            | {"ratio to day 2": to_two}
        )
    mismatched = [
        (r["day"], layer, by_layer(r)[layer], by_layer(r, "reported")[layer])
        for r in big + small
        for layer in LAYER_GROUPS
        if layer != "maintenance" and by_layer(r)[layer] != by_layer(r, "reported")[layer]
    ]
    after = [r["storage_after_maintenance"]["amplification"] for r in big if r["maintained"]]
    # requests(n) = a + b n per layer, from day 2 of both lakes (day 1 creates what later days reuse)
    fit = {}
    for layer in LAYER_GROUPS:
        y_big, y_small = by_layer(big[1])[layer], by_layer(small[1])[layer]
        slope = (y_big - y_small) / (per_day - small_per_day)
        fit[layer] = {"a": round(y_small - slope * small_per_day, 1), "b_per_1000": round(slope * 1000, 3)}
    kinds_big, kinds_small = by_kind(big[1]), by_kind(small[1])
    at_million = Counter()
    for kind in set(kinds_big) | set(kinds_small):
        slope = (kinds_big[kind] - kinds_small[kind]) / (per_day - small_per_day)
        at_million[kind] = max(0, round(kinds_small[kind] + slope * (MILLION - small_per_day)))
    live_per_transaction = last["storage_after_maintenance"]["live_bytes"] / (per_day * last["day"])
    stored_month = live_per_transaction * MILLION * 30 * max(after or [1.0])
    return {
        "requests_day_1_against_day_n": growth,
        "reported_against_server": mismatched,
        "maintenance_requests": {r["day"]: by_layer(r)["maintenance"] for r in big if r["maintained"]},
        "amplification_after_maintenance": after,
        "amplification_before_maintenance": [r["storage_before_maintenance"]["amplification"] for r in big],
        "fit_requests_a_plus_b_n": fit,
        "at_a_million_a_day": {
            "requests_by_kind": dict(at_million),
            "requests_usd_per_day": round(request_cost(at_million), 4),
            "requests_usd_per_month": round(30 * request_cost(at_million), 2),
            "stored_gb_after_a_month": round(stored_month / 1e9, 2),
            "storage_usd_per_month_after_a_month": round(storage_cost(stored_month), 2),
        },
        "at_measured_size": {
            "requests_usd_per_day": round(request_cost(by_kind(last)), 5),
            "stored_bytes": last["storage_after_maintenance"]["stored_bytes"],
            "storage_usd_per_month": round(storage_cost(last["storage_after_maintenance"]["stored_bytes"]), 5),
        },
        "prices": {"per_1000": {str(k): v for k, v in PRICES.per_1000}, "storage_gb_month": PRICES.storage_gb_month},
    }


def main(argv: list[str]) -> dict:
    import tempfile

    from etr_assets.lake.session import get_spark
    from etr_assets.settings import Settings
    from etr_assets_tests.infra import aws_test_env, counting_moto_server, postgres_server

    if argv[:1] == ["--summarise"]:  # again from the days a run saved (a run stopped midway too)
        big, small = (json.loads((OUT / f"s3_costs_{n}_days.json").read_text()) for n in ("big", "small"))
        summary = summarise(big, small, big[0]["per_day"], small[0]["per_day"])
        print(json.dumps(summary, indent=1))
        return summary
    days = int(argv[0]) if argv else 30
    per_day = int(argv[1]) if len(argv) > 1 else 50_000
    small_per_day = int(argv[2]) if len(argv) > 2 else per_day // 10
    weekly = int(argv[3]) if len(argv) > 3 else 7  # the big lake's; a smoke test maintains sooner
    weekly_tables = argv[4].split(",") if len(argv) > 4 else []  # a smoke test's: fewer tables, each as any other
    if days < 2 or not 0 < small_per_day < per_day:
        raise SystemExit("bench s3_costs: DAYS >= 2, and 0 < SMALL_PER_DAY < PER_DAY")

    region = Settings().region  # not the suite's conftest: importing it declares the suite's extra source
    os.environ.update(aws_test_env(region))  # moto's dummy keys: never real ones
    started_machine = machine()
    with tempfile.TemporaryDirectory(prefix="etr-bench-s3-") as home, counting_moto_server() as (endpoint, counted):
        with postgres_server() as jdbc_url:
            first = s3_settings(Path(home) / "session", "unused", endpoint, jdbc_url, "etr")
            spark = get_spark(first, extra={"spark.hadoop.fs.s3a.endpoint.region": region})
            # The second size's two days are the fit's, never a weekly maintenance day (as in a 7-day week)
            small = run_lake(spark, jdbc_url, endpoint, counted, Path(home), 2, small_per_day, "small")
            big = run_lake(spark, jdbc_url, endpoint, counted, Path(home), days, per_day, "big", weekly, weekly_tables)
            spark.stop()
    result = {
        "title": "What a day costs on S3",
        "command": " ".join(map(str, ("python -m bench.s3_costs", days, per_day, small_per_day, weekly, *argv[4:5]))),
        "machine": {"start": started_machine, "end": machine()},
        "revision": revision(),
        "summary": summarise(big, small, per_day, small_per_day),
        "days": big,
        "small_days": small,
        "run_layer_figures": small[-1]["run_layer_figures"],
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "s3_costs.json").write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps(result["summary"], indent=1))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
