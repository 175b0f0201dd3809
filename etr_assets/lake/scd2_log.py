"""Keep an SCD2 table in line with its observation log (bronze), reading only what the log gained since the cursor
(a table property: the log snapshot applied, the table's snapshot after it, the watermark): what the log gained or
replaced is applied incrementally (`scd2_incremental`); an erasure, a rollback or an expired cursor snapshot
recomputes, and says why (docs/scd2.md, "Applying only what the log gained")."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import TYPE_CHECKING

from etr_assets.lake.feeds import FeedMode
from etr_assets.lake.incremental import changed_only_by, days_changed_by, lineage_since, snapshot_in_metadata
from etr_assets.lake.scd2 import Scd2Method, Scd2Result, recompute, with_retries
from etr_assets.lake.scd2_incremental import apply_incremental, refuse_keyless
from etr_assets.lake.scd2_window import LogWindow
from etr_assets.lake.specs import TableSpec
from etr_assets.lake.writes import current_snapshot_id, iceberg_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CURSOR_PROPERTY = "etr.scd2.cursor"
# The log's new rows are one day's files, small enough that Iceberg would read them all in one task; a task per file
# (or row group) lets every core hash and sort them (the daily path reads them twice).
NEW_ROWS_SPLIT_BYTES = 1 << 20
ONE_DAY = dt.timedelta(days=1)


@dataclasses.dataclass(frozen=True)
class Scd2Cursor:
    table_snapshot_id: int | None  # the SCD2 table's current snapshot after the apply (None: still empty)
    log_snapshot_id: int  # the log snapshot that apply read
    watermark_micros: int | None  # latest observation time applied, microseconds since the epoch (UTC)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> Scd2Cursor | None:
        try:
            return cls(**json.loads(text)) if text else None
        except (TypeError, ValueError):
            return None  # unreadable: recompute, and write a good one


def read_cursor(spark: SparkSession, qualified: str) -> Scd2Cursor | None:
    # From the table's metadata (no Spark command): a replay is this read and two snapshot lookups.
    return Scd2Cursor.from_json(iceberg_table(spark, qualified).properties().get(CURSOR_PROPERTY))


def write_cursor(spark: SparkSession, qualified: str, cursor: Scd2Cursor) -> None:
    # A metadata-only commit: no snapshot, so the cursor's own table snapshot stays the current one.
    spark.sql(f"ALTER TABLE {qualified} SET TBLPROPERTIES ('{CURSOR_PROPERTY}' = '{cursor.to_json()}')")


def apply_log(
    spark: SparkSession,
    catalog: str,
    spec: TableSpec,
    log: str,
    to_records,
    mode: str,
    full_refresh: bool = False,
    held: DataFrame | None = None,
    snapshot_day: str | None = None,
) -> Scd2Result:
    """Bring `spec`'s SCD2 table in line with every observation in the `log` table (qualified name).

    `to_records(log_rows)` turns log rows into SCD2 records (scd2.observations' input, with `_snapshot_at`).
    `held`: (key, `_batch_id`) of records snapshots sent that could not be read (not absences).
    `snapshot_day`: the log's date column (its partition) such that no row's `_snapshot_at` is after the start of
    the next day: a late day then reads only the days since its changes (`scd2_window`), not the whole log.
    A recompute covers every key of the log and of the table, whatever the mode.
    """
    from pyspark.sql import functions as F

    target = spec.qualified(catalog)
    sequence, key = spec.scd2.sequence, spec.scd2.key

    def attempt() -> Scd2Result:
        cursor = read_cursor(spark, target)
        head, base, reloaded, why = _can_extend(spark, target, log, cursor, full_refresh, snapshot_day)
        if why is None and head == cursor.log_snapshot_id:
            return Scd2Result(target, 0, 0, 0, None, Scd2Method.UNCHANGED, f"log {log} unchanged since snapshot {head}")
        if why is None:
            appended = (
                spark.read.format("iceberg")
                .option("start-snapshot-id", cursor.log_snapshot_id)
                .option("end-snapshot-id", head)
                .option("split-size", str(NEW_ROWS_SPLIT_BYTES))
                .load(log)
            )
            removed = still_sent = None
            if reloaded:
                # Rows of the replaced days: removed ones from the cursor's snapshot, added ones from the head.
                # Appends to other days are still read by the append scan (the overwrites deleted none of theirs).
                in_days = F.col(snapshot_day).isin(sorted(reloaded))
                at_head = spark.read.format("iceberg").option("snapshot-id", head).load(log)
                new_records = to_records(appended.where(~in_days).unionByName(at_head.where(in_days)))
                removed = to_records(
                    spark.read.format("iceberg").option("snapshot-id", cursor.log_snapshot_id).load(log).where(in_days)
                )
                # The days beside a reloaded one re-send most of its records (a full snapshot's unchanged keys):
                # a removed record they still send changes nothing.
                beside = sorted({d + offset for d in reloaded for offset in (-ONE_DAY, ONE_DAY)} - reloaded)
                still_sent = to_records(at_head.where(F.col(snapshot_day).isin(beside)))
            else:
                new_records = to_records(appended)
            window = LogWindow(log, head, to_records, snapshot_day)
            args = (mode, cursor.watermark_micros, base, window, held, removed, still_sent)
            applied = apply_incremental(spark, catalog, spec, new_records, *args, published=_cursor_at(head))
            if reloaded:
                days = ", ".join(str(day) for day in sorted(reloaded))
                result = dataclasses.replace(
                    applied.result, reason=f"{applied.result.reason} (reloaded day(s): {days})"
                )
                applied = dataclasses.replace(applied, result=result)
            if not applied.properties_set:
                _advance(spark, target, applied.result, head, applied.watermark)
            return applied.result
        records = to_records(
            spark.read.format("iceberg").option("snapshot-id", head).load(log) if head else spark.table(log)
        )
        times = [F.max(F.unix_micros(F.col(sequence)))] + (
            [F.max(F.unix_micros("_snapshot_at"))] if mode == FeedMode.FULL else []
        )
        keyless = F.col(key).isNull()
        *found, count, files = records.agg(
            *times, F.count_if(keyless), F.collect_set(F.when(keyless, F.col("_source_file")))
        ).first()
        refuse_keyless(spec, target, count, files)
        watermark = max((v for v in found if v is not None), default=None)
        # The table's keys too: a key whose every observation the log lost (a reloaded day, an erasure) has none.
        keys = records.select(key).unionByName(spark.table(target).select(key)).distinct()
        result = dataclasses.replace(
            recompute(spark, catalog, spec, records, mode, keys, held), method=Scd2Method.RECOMPUTE, reason=why
        )
        if head is not None:
            _advance(spark, target, result, head, watermark)
        return result

    return with_retries(spark, target, attempt)


def _can_extend(
    spark, target: str, log: str, cursor: Scd2Cursor | None, full_refresh: bool, snapshot_day: str | None = None
) -> tuple[int | None, int | None, frozenset, str | None]:
    """(the log's current snapshot, the table's snapshot this checked, the `snapshot_day` days the log replaced since
    the cursor, None if history can be extended from the log's new and replaced rows, else why not)."""
    head = current_snapshot_id(spark, log)
    none = frozenset()
    if full_refresh:
        return head, None, none, "full refresh requested"
    if cursor is None:
        return head, None, none, f"no cursor on {target} (first build, or built before cursors)"
    if cursor.watermark_micros is None:
        return head, None, none, f"the cursor on {target} has no watermark"
    base = None
    if cursor.table_snapshot_id is not None:  # compaction since is fine; any other commit is someone else's write
        base, written = changed_only_by(spark, target, cursor.table_snapshot_id, ("replace",))
        if written:
            return head, base, none, f"{target} was written since the cursor's snapshot: {written}"
    elif current_snapshot_id(spark, target) is not None:
        return head, None, none, f"{target} was written since the cursor (it was empty then)"
    if head == cursor.log_snapshot_id:
        return head, base, none, None
    reloaded, why = _replaced_days(spark, log, head, cursor.log_snapshot_id, snapshot_day)
    return head, base, reloaded, why


def _replaced_days(spark, log: str, head: int, since: int, snapshot_day: str | None) -> tuple[frozenset, str | None]:
    """(the days whose rows overwrites since `since` replaced, None) when every snapshot since is an append, a
    compaction or an overwrite of whole known days that `since` can still be read at; else (empty, why not)."""
    table = iceberg_table(spark, log)
    chain = lineage_since(snapshot_in_metadata(table), head, since)
    if chain is None:
        return frozenset(), f"snapshot {since} of {log} is not an ancestor of its current one (rolled back, or expired)"
    others = [(sid, op) for sid, op in chain if op not in ("append", "replace", "overwrite")]
    if others:  # a delete snapshot is an erasure: it must reach every version, which only the recompute rewrites
        sid, op = others[-1]
        return frozenset(), f"snapshot {sid} ({op}) of {log} changed rows in place (an erasure, or a rewrite)"
    overwrites = [sid for sid, op in chain if op == "overwrite"]
    if not overwrites:
        return frozenset(), None
    if table.snapshot(since) is None:  # expired: the replaced rows can no longer be read by time travel
        return frozenset(), f"snapshot {since} of {log} expired, so the rows its overwrites replaced are gone"
    if snapshot_day is None:
        return frozenset(), (
            f"snapshot {overwrites[-1]} (overwrite) of {log} changed rows in place, and the log has no day column "
            "to read the replaced rows by"
        )
    days = set().union(*days_changed_by(spark, log, overwrites, snapshot_day).values())
    if None in days or not days:
        return frozenset(), (
            f"snapshot {overwrites[-1]} (overwrite) of {log} changed rows in place outside known "
            f"{snapshot_day} partitions"
        )
    return frozenset(days), None


def _cursor_at(log_snapshot: int):
    """The cursor property, as the commit that publishes an apply sets it (the table's snapshot it publishes, and the
    watermark after it): the cursor then moves with main or not at all."""
    return lambda table_snapshot, watermark: {
        CURSOR_PROPERTY: Scd2Cursor(table_snapshot, log_snapshot, watermark).to_json()
    }


def _advance(spark: SparkSession, target: str, result: Scd2Result, log_snapshot: int, watermark: int | None) -> None:
    table_snapshot = result.snapshot_id if result.changed else current_snapshot_id(spark, target)
    write_cursor(spark, target, Scd2Cursor(table_snapshot, log_snapshot, watermark))
