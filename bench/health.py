"""Benchmark 4: the metadata-only health check (`etr_assets.lake.health.table_health`, pyiceberg, no JVM)
against the same figures read through Spark's metadata tables, as a table grows in rows and in snapshots."""

from __future__ import annotations

import dataclasses
import datetime as dt
import time

from bench import data
from bench.common import Lake, ratio
from etr_assets.lake.evolve import ensure_table
from etr_assets.lake.health import table_health
from etr_assets.lake.metadata import load_table
from etr_assets.tables.transactions import SILVER_TRANSACTIONS

TITLE = "Benchmark 4 — health checks: pyiceberg metadata against Spark metadata tables"
ROW_STEPS = (100_000, 1_000_000, 10_000_000)  # at scale 1
SNAPSHOT_STEPS = (10, 100, 1_000)
DAYS = 30


def spark_figures(spark, table: str) -> dict:
    """The health check's figures through Spark: files, bytes, small files, delete files, snapshots, manifests."""
    files = spark.sql(
        f"SELECT count(*) n, sum(file_size_in_bytes) b, sum(CASE WHEN file_size_in_bytes < 100663296 THEN 1 END) s,"
        f" count(DISTINCT partition) p FROM {table}.data_files"
    ).first()
    deletes = spark.sql(f"SELECT count(*) FROM {table}.delete_files").first()[0]
    snapshots = spark.sql(f"SELECT count(*), min(committed_at) FROM {table}.snapshots").first()
    manifests = spark.sql(f"SELECT count(*) FROM {table}.manifests").first()[0]
    return {
        "data_files": files["n"],
        "bytes": files["b"],
        "delete_files": deletes,
        "snapshots": snapshots[0],
        "manifests": manifests,
    }


def best_seconds(repeats: int, action) -> tuple[float, object]:
    best, value = None, None
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        value = action()
        seconds = time.perf_counter() - start
        best = seconds if best is None else min(best, seconds)
    return best, value


def run(lake: Lake, scale: float, repeats: int = 3) -> dict:
    from pyspark.sql import functions as F

    spark = lake.spark
    spec = dataclasses.replace(SILVER_TRANSACTIONS, name="bnpl_transactions_health")
    ensure_table(spark, lake.catalog, spec)
    table = spec.qualified(lake.catalog)
    # Tiny scales (the smoke test) still grow at every step.
    row_steps = [max(least, int(n * scale)) for least, n in zip((1_000, 5_000, 20_000), ROW_STEPS)]
    snapshot_steps = [max(least, int(n * scale)) for least, n in zip((3, 6, 12), SNAPSHOT_STEPS)]
    rows_now, snapshots_now, points = 0, 0, []

    def checkpoint(growing: str):
        health_s, health = best_seconds(repeats, lambda: table_health(lake.settings, spec))
        load_s, _ = best_seconds(repeats, lambda: load_table(lake.settings, spec))  # metadata.json alone
        spark_s, figures = best_seconds(repeats, lambda: spark_figures(spark, table))
        if figures["data_files"] != health.data_files or figures["snapshots"] != health.snapshots:
            raise AssertionError(f"health and Spark disagree on {table}: {health} vs {figures}")
        points.append(
            {
                "growing": growing,
                "rows": rows_now,
                "snapshots": health.snapshots,
                "data_files": health.data_files,
                "manifests": health.manifests,
                "metadata_file_bytes": health.metadata_file_bytes,
                "health_check_ms": round(health_s * 1000, 1),
                "of_which_metadata_json_ms": round(load_s * 1000, 1),
                "spark_metadata_tables_ms": round(spark_s * 1000, 1),
                "spark_over_health": ratio(spark_s, health_s),
            }
        )

    def append(n: int, one_day: bool = False):
        nonlocal rows_now, snapshots_now
        # A tiny append lands in one day, like a micro-batch writer's: one data file and one manifest per snapshot.
        days, first_day = (
            (1, data.FIRST_DAY + dt.timedelta(days=snapshots_now % DAYS)) if one_day else (DAYS, data.FIRST_DAY)
        )
        batch = data.transactions(spark, n, days, max(100, n // 20), seed=7 + snapshots_now, first_day=first_day)
        batch.withColumn("transaction_id", F.col("transaction_id") + rows_now).writeTo(table).append()
        rows_now, snapshots_now = rows_now + n, snapshots_now + 1

    # Rows: the first step in as many appends as the first snapshot step, then one big append per step.
    for _ in range(snapshot_steps[0]):
        append(row_steps[0] // snapshot_steps[0])
    checkpoint("rows")
    for target in row_steps[1:]:
        append(target - rows_now)
        checkpoint("rows")
    # Snapshots: tiny appends of 100 rows until each step.
    for target in snapshot_steps[1:]:
        while snapshots_now < target:
            append(100, one_day=True)
        checkpoint("snapshots")

    ratios = {
        f"{p['rows']:,} rows, {p['snapshots']} snapshots: Spark metadata tables / health check": p["spark_over_health"]
        for p in points
    }
    return {
        "title": TITLE,
        "data": {"row_steps": row_steps, "snapshot_steps": snapshot_steps, "days": DAYS},
        "data_description": (
            f"A copy of the silver table grown to {', '.join(f'{n:,}' for n in row_steps)} rows (one append per "
            f"step after {snapshot_steps[0]} first ones), then by tiny appends of 100 rows, each into one day, to "
            f"{', '.join(str(n) for n in snapshot_steps[1:])} snapshots; {DAYS} days."
        ),
        "counters_description": (
            "health_check_ms: `table_health(settings, spec)` (pyiceberg reads metadata.json, the manifest list and "
            "the live manifests; no JVM); of_which_metadata_json_ms: pyiceberg loading the table (reading and parsing "
            "metadata.json) alone; spark_metadata_tables_ms: the same figures through `<table>.data_files`, "
            "`.delete_files`, `.snapshots`, `.manifests` in the running Spark session (its JVM already warm). Best "
            "of runs; both must agree on files and snapshots or the benchmark fails."
        ),
        "tables": [{"title": "Latency as the table grows", "rows": points}],
        "ratios": ratios,
        "charts": [
            {
                "file": "health.png",
                "title": "Health figures: milliseconds",
                "xlabel": "milliseconds",
                "log": True,
                "labels": [f"{p['rows']:,} rows, {p['snapshots']} snapshots" for p in points],
                "series": {
                    "health check (pyiceberg)": [p["health_check_ms"] for p in points],
                    "of which metadata.json": [p["of_which_metadata_json_ms"] for p in points],
                    "Spark metadata tables": [p["spark_metadata_tables_ms"] for p in points],
                },
            }
        ],
        "notes": [
            (
                "The Spark figures assume a warm session; a sensor or check without one would first pay a JVM start "
                "(2-4 s) and the first Iceberg statement (3-4.5 s, docs/stack.md)."
            ),
        ],
    }
