"""Benchmark 2, the late day: a day that arrives after a later one, against the in-order daily apply of a day of the
same size, after a short and a long history (LATE_HISTORY_DAYS), side by side in one run.

For each history length H the observation log (bronze's role, partitioned by `_as_of` as bronze is) holds batch 0's
unchanged list on days 0 to H-1, and the history table one version per key with a cursor at the log's last day: both
written directly (the list did not change, so that is what applying every day gives). Then, from those states:

- the daily apply: day H+1's list (DAILY_SHARE % of keys changed during it) is appended and `apply_log` applies it; the
  benchmark fails unless it took the daily path (current rows);
- the late day: day H, missing until then, arrives after day H+1 was applied, with LATE_SHARE % of keys changed
  during it. `apply_log` must take the window (the benchmark fails otherwise), reading the log from that day on.

Each is timed from its own starting state (both tables set back to the snapshots it starts from, the cursor with
them), once untimed first, then in turns, best of `repeats` (WARM_UP off: no untimed round, and the daily path's
first run, which makes the late day's starting state, is counted). At the shortest history the late day's versions are
checked against a recompute of the whole log, column by column.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from bench.common import Lake, measure, ratio
from bench.scd2_lists import BUSINESS, batch
from etr_assets.lake.evolve import ensure_table
from etr_assets.lake.feeds import FeedMode
from etr_assets.lake.scd2 import (
    ObservationLog,
    Scd2Cursor,
    Scd2Method,
    apply_log,
    apply_observations,
    read_cursor,
    write_cursor,
)
from etr_assets.tables.entities import LANDING_CUSTOMERS

LATE_HISTORY_DAYS = (2, 30)
DAILY_SHARE = 10  # percent of keys the in-order day changes
LATE_SHARE = 1  # percent of keys the late day changes
WARM_UP = True  # the late day applied once untimed first (the daily path's untimed apply makes its state)
DAY0 = dt.date(2025, 1, 1)
MICROS = dt.timedelta(microseconds=1)


def late_against_daily(lake: Lake, keys: int, batch, business: list[str], repeats: int = 1) -> tuple[list, dict]:
    """(rows, ratios) for every history length; `batch(spark, keys, share, number, changed_at, salt)` makes a
    list (scd2_lists.batch)."""
    spark = lake.spark
    unchanged = _write(lake, batch(spark, keys, 0, 0), "late_list0")
    rows, ratios, seeded = [], {}, None
    for days in LATE_HISTORY_DAYS:
        spec = dataclasses.replace(LANDING_CUSTOMERS, name=f"customers_late_{keys}_{days}")
        log = f"{lake.catalog}.landing.customers_log_late_{keys}_{days}"
        seeded = _seed(lake, spec, log, unchanged, days, business, seeded)
        daily = _write(lake, batch(spark, keys, DAILY_SHARE, 1, _noon(days + 1), "moved"), f"late_daily_{days}")
        late = _write(lake, batch(spark, keys, LATE_SHARE, 1, _noon(days), "late"), f"late_late_{days}")
        daily_rows, late_rows = _day_rows(spark, daily, business, days + 1), _day_rows(spark, late, business, days)
        daily_run, late_run = _compare(lake, spec, log, daily_rows, late_rows, repeats)
        if days == LATE_HISTORY_DAYS[0]:
            _check_against_recompute(lake, spec, log)
        common = {"keys": keys, "history_days": days}
        for label, (seconds, counters, result, times) in (
            (f"daily path: day {days + 1}, {DAILY_SHARE}% changed", daily_run),
            (f"late day: day {days} after day {days + 1}, {LATE_SHARE}% changed", late_run),
        ):
            rows.append(
                {
                    **common,
                    "method": label,
                    "path": str(result.method),
                    "seconds": round(seconds, 3),
                    "all_runs_s": times,
                    "inserted": result.inserted,
                    "updated": result.updated,
                    "deleted": result.deleted,
                    "input_bytes": counters["input_bytes"],
                    "shuffle_read_bytes": counters["shuffle_read_bytes"],
                    "reason": result.reason,
                }
            )
        ratios[f"{keys:,} keys, {days} days of history: late day / daily path (target <= 2)"] = ratio(
            late_run[0], daily_run[0]
        )
    return rows, ratios


def _noon(day: int) -> dt.datetime:
    return dt.datetime.combine(DAY0 + dt.timedelta(days=day), dt.time(12))


def _write(lake: Lake, df, name: str) -> str:
    path = str(lake.path("batches", name))
    df.write.mode("overwrite").parquet(path)
    return path


def _day_rows(spark, path: str, business: list[str], first_day: int, days: int = 1):
    """The list at `path` as bronze holds it on `days` days from `first_day`: a batch per day, the snapshot at the
    end of its `_as_of` day."""
    from pyspark.sql import functions as F

    day = spark.range(first_day, first_day + days).select(F.col("id").cast("int").alias("_day"))
    listed = spark.read.parquet(path).select(*business, F.col("_metadata.file_path").alias("_source_file"))
    as_of = F.date_add(F.lit(DAY0), F.col("_day"))
    return listed.crossJoin(day).select(
        *business,
        F.concat(F.lit("day"), F.col("_day").cast("string")).alias("_batch_id"),
        "_source_file",
        F.to_timestamp(F.date_add(as_of, 1)).alias("_snapshot_at"),
        as_of.alias("_as_of"),
    )


def load_days(rows, log: str) -> None:
    """Bronze's load of days into the log: no shuffle, each task writing its share of each day, so a day of a million
    customers is two files as bronze writes it (`bronze.ROWS_PER_WRITER`), not one file read by one task."""
    rows.writeTo(log).option("distribution-mode", "none").append()


def _records(log_rows):
    return log_rows.drop("_as_of")


def day_log(log: str) -> ObservationLog:
    """The log partitioned by day, of full snapshots, as bronze is to `build_landing`."""
    return ObservationLog(log, _records, FeedMode.FULL, snapshot_day="_as_of")


def _seed(lake: Lake, spec, log: str, unchanged: str, days: int, business: list[str], seeded) -> tuple[str, int]:
    """Days 0..days-1 of the unchanged list in the log, the one version per key it gives, and the cursor: written
    directly. `seeded`: (table, snapshot) already holding those versions, copied instead of recomputed. Returns the
    table and its snapshot after seeding."""
    spark = lake.spark
    view, rows = f"late_seed_{days}", _day_rows(spark, unchanged, business, 0, days)
    rows.createOrReplaceTempView(view)
    spark.sql(f"CREATE TABLE {log} USING iceberg PARTITIONED BY (days(_as_of)) AS SELECT * FROM {view} LIMIT 0")
    spark.catalog.dropTempView(view)
    load_days(rows, log)
    ensure_table(spark, lake.catalog, spec)
    target = spec.qualified(lake.catalog)
    if seeded is None:
        apply_observations(spark, lake.catalog, spec, _records(_day_rows(spark, unchanged, business, 0)), FeedMode.FULL)
    else:
        spark.read.format("iceberg").option("snapshot-id", seeded[1]).load(seeded[0]).writeTo(target).append()
    last_snapshot = dt.datetime.combine(DAY0 + dt.timedelta(days=days), dt.time())
    watermark = (last_snapshot - dt.datetime(1970, 1, 1)) // MICROS
    write_cursor(spark, target, Scd2Cursor(_current(spark, target), _current(spark, log), watermark))
    return target, _current(spark, target)


def _compare(lake: Lake, spec, log: str, daily_rows, late_rows, repeats: int):
    """(daily, late): each (best seconds, its counters, its result, every time) from its own starting state."""
    spark = lake.spark
    target = spec.qualified(lake.catalog)
    start = (_current(spark, target), _current(spark, log), read_cursor(spark, target))
    load_days(daily_rows, log)  # bronze loads the day (untimed)
    daily_log = _current(spark, log)
    # The state the late day starts from; with WARM_UP, a warm-up not counted, else the daily path's first run (it
    # starts from the state every daily run starts from).
    first = measure(spark, lambda: _apply(lake, spec, log, Scd2Method.CURRENT))
    after_daily = (_current(spark, target), daily_log, read_cursor(spark, target))
    load_days(late_rows, log)
    late_log = _current(spark, log)
    runs = {"daily": [] if WARM_UP else [first], "late": []}
    for attempt in range(0 if WARM_UP else 1, max(1, repeats) + 1):
        for name, (table_at, log_at, cursor), expected in (
            ("daily", (start[0], daily_log, start[2]), Scd2Method.CURRENT),
            ("late", (after_daily[0], late_log, after_daily[2]), Scd2Method.WINDOW),
        ):
            if name == "daily" and attempt == (0 if WARM_UP else 1):
                continue  # applied once above already
            _set_current(lake, target, table_at)
            _set_current(lake, log, log_at)
            write_cursor(spark, target, cursor)
            seconds, counters, result = measure(spark, lambda path=expected: _apply(lake, spec, log, path))
            if attempt:
                runs[name].append((seconds, counters, result))
    best = {}
    for name, found in runs.items():
        seconds, counters, result = min(found, key=lambda run: run[0])
        best[name] = (seconds, counters, result, [round(run[0], 3) for run in found])
    return best["daily"], best["late"]


def _apply(lake: Lake, spec, log: str, expected: Scd2Method):
    result = apply_log(lake.spark, lake.catalog, spec, day_log(log))
    if result.method != expected:
        raise AssertionError(f"expected the {expected} path, took {result.method}: {result.reason}")
    return result


def _check_against_recompute(lake: Lake, spec, log: str) -> None:
    """Fail unless the table (after the late day) holds what recomputing every observation of the log gives."""
    spark = lake.spark
    reference = dataclasses.replace(spec, name=f"{spec.name}_recomputed")
    ensure_table(spark, lake.catalog, reference)
    apply_observations(spark, lake.catalog, reference, _records(spark.table(log)), FeedMode.FULL)
    left, right = spec.qualified(lake.catalog), reference.qualified(lake.catalog)
    a, b = spark.table(left).drop("_ingested_at"), spark.table(right).drop("_ingested_at")
    differing = a.exceptAll(b).count() + b.exceptAll(a).count()
    if differing:
        raise AssertionError(f"the late day's window and the recompute disagree on {differing} version row(s)")


def _current(spark, table: str) -> int:
    return spark.sql(f"SELECT snapshot_id FROM {table}.refs WHERE name = 'main'").first()[0]


def _set_current(lake: Lake, table: str, snapshot: int) -> None:
    if _current(lake.spark, table) != snapshot:
        name = table.split(".", 1)[1]
        lake.spark.sql(f"CALL {lake.catalog}.system.set_current_snapshot('{name}', {snapshot})")


def main(argv: list[str] | None = None) -> None:
    """`python -m bench.scd2_late [KEYS] [REPEATS]`: this comparison alone (the whole benchmark runs it too, after
    every other method), its rows and ratios as JSON on stdout with the machine's load at start and end."""
    import json
    import sys
    import time

    from bench.common import machine, open_lake

    args = sys.argv[1:] if argv is None else argv
    keys, repeats = (int(args[0]) if args else 1_000_000), (int(args[1]) if len(args) > 1 else 3)
    start, started = machine(), time.perf_counter()
    with open_lake("scd2_late") as lake:
        rows, ratios = late_against_daily(lake, keys, batch, BUSINESS, repeats)
    found = {"keys": keys, "repeats": repeats, "seconds": round(time.perf_counter() - started, 1)}
    found |= {"machine_start": start, "load_average_end": machine()["load_average"], "rows": rows, "ratios": ratios}
    print(json.dumps(found, indent=1, default=str))


if __name__ == "__main__":
    main()
