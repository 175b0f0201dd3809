"""Keep an SCD2 table in line with its observation log (bronze), reading only what the log gained since last time.

`apply_observations` (scd2.py) recomputes every key from every observation. That is right whatever order batches
arrive in, but its cost grows with the whole log: every day's full snapshot is read again on every run.

`apply_log` remembers, in a table property of the SCD2 table (the *cursor*), which log snapshot it applied, the
SCD2 table's snapshot after that, and the *watermark*: the latest observation time applied (sequence values and
snapshot times). On the next run it *extends* history from the log's new rows alone, when that gives exactly what
the recompute would:

- the SCD2 table is still at the cursor's snapshot, or only compacted since (nobody erased, rolled back or wrote);
- the log only gained rows since the cursor's snapshot (appends; compactions are fine; a reloaded day is not);
- every new observation is newer than the watermark, or repeats the state its key already had at that time (a
  full snapshot re-sends every unchanged record with its old timestamp); and every new snapshot is newer than
  the watermark.

Then history up to the watermark cannot change, and each key's new versions follow from its last version and its
new observations: the classic staged MERGE, with the same NULL-safe change test (`history`), touching only keys
that changed or disappeared. Otherwise the run recomputes, and says why (`Scd2Result.reason`).
"""

from __future__ import annotations

import dataclasses
import json

from etr_assets.lake.feeds import FeedMode
from etr_assets.lake.frames import local_frame
from etr_assets.lake.incremental import changed_only_by
from etr_assets.lake.scd2 import (
    Scd2Method,
    Scd2Result,
    history,
    in_snapshot,
    merge_scd2,
    observations,
    recompute,
    with_retries,
)
from etr_assets.lake.scd2_current import apply_current
from etr_assets.lake.specs import TableSpec
from etr_assets.lake.writes import current_snapshot_id, iceberg_table

CURSOR_PROPERTY = "etr.scd2.cursor"
# The log's new rows are one day's files, small enough that Iceberg would read them all in one task; a task per file
# (or row group) lets every core hash and sort them (the daily path reads them twice).
NEW_ROWS_SPLIT_BYTES = 1 << 20


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


def read_cursor(spark, qualified: str) -> Scd2Cursor | None:
    # From the table's metadata (no Spark command): a replay is this read and two snapshot lookups.
    return Scd2Cursor.from_json(iceberg_table(spark, qualified).properties().get(CURSOR_PROPERTY))


def write_cursor(spark, qualified: str, cursor: Scd2Cursor) -> None:
    # A metadata-only commit: no snapshot, so the cursor's own table snapshot stays the current one.
    spark.sql(f"ALTER TABLE {qualified} SET TBLPROPERTIES ('{CURSOR_PROPERTY}' = '{cursor.to_json()}')")


def apply_log(
    spark,
    catalog: str,
    spec: TableSpec,
    log: str,
    to_records,
    mode: str,
    full_refresh: bool = False,
    held=None,
) -> Scd2Result:
    """Bring `spec`'s SCD2 table in line with every observation in the `log` table (qualified name).

    `to_records(log_rows)` turns log rows into SCD2 records (scd2.observations' input, with `_snapshot_at`).
    `held`: (key, `_batch_id`) of records snapshots sent that could not be read (not absences).
    A recompute covers every key of the log, whatever the mode.
    """
    from pyspark.sql import functions as F

    target = spec.qualified(catalog)
    sequence = spec.scd2.sequence

    def attempt() -> Scd2Result:
        cursor = read_cursor(spark, target)
        head, base, why = _can_extend(spark, target, log, cursor, full_refresh)
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
            new_records = to_records(appended)
            result, why, watermark = apply_current(
                spark, catalog, spec, new_records, mode, cursor.watermark_micros, base, held
            )
            if result is None:
                not_current = why
                result, why, watermark = extend(spark, catalog, spec, new_records, mode, cursor.watermark_micros, held)
                if result is not None:
                    result = dataclasses.replace(result, reason=f"{result.reason} (not by current rows: {not_current})")
            if result is not None:
                _advance(spark, target, result, head, watermark)
                return result
        records = to_records(
            spark.read.format("iceberg").option("snapshot-id", head).load(log) if head else spark.table(log)
        )
        times = [F.max(F.unix_micros(F.col(sequence)))] + (
            [F.max(F.unix_micros("_snapshot_at"))] if mode == FeedMode.FULL else []
        )
        watermark = _max(records.agg(*times).first())
        result = dataclasses.replace(
            recompute(spark, catalog, spec, records, mode, held=held), method=Scd2Method.RECOMPUTE, reason=why
        )
        if head is not None:
            _advance(spark, target, result, head, watermark)
        return result

    return with_retries(spark, target, attempt)


def _can_extend(
    spark, target: str, log: str, cursor: Scd2Cursor | None, full_refresh: bool
) -> tuple[int | None, int | None, str | None]:
    """(the log's current snapshot, the table's snapshot this checked, None if history can be extended from the
    log's new rows, else why not)."""
    head = current_snapshot_id(spark, log)
    if full_refresh:
        return head, None, "full refresh requested"
    if cursor is None:
        return head, None, f"no cursor on {target} (first build, or built before cursors)"
    if cursor.watermark_micros is None:
        return head, None, f"the cursor on {target} has no watermark"
    base = None
    if cursor.table_snapshot_id is not None:  # compaction since is fine; any other commit is someone else's write
        base, written = changed_only_by(spark, target, cursor.table_snapshot_id, ("replace",))
        if written:
            return head, base, f"{target} was written since the cursor's snapshot: {written}"
    elif current_snapshot_id(spark, target) is not None:
        return head, None, f"{target} was written since the cursor (it was empty then)"
    if head == cursor.log_snapshot_id:
        return head, base, None
    head, why = changed_only_by(spark, log, cursor.log_snapshot_id, ("append", "replace"))
    return head, base, why


def _advance(spark, target: str, result: Scd2Result, log_snapshot: int, watermark: int | None) -> None:
    table_snapshot = result.snapshot_id if result.changed else current_snapshot_id(spark, target)
    write_cursor(spark, target, Scd2Cursor(table_snapshot, log_snapshot, watermark))


def _max(row) -> int | None:
    values = [v for v in row if v is not None]
    return max(values) if values else None


def extend(
    spark, catalog: str, spec: TableSpec, records, mode: str, watermark: int, held=None
) -> tuple[Scd2Result | None, str, int]:
    """Apply only new observations onto each key's last version: (result, why, new watermark), or (None, why not,
    None) when some new observation could change history before the watermark."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    scd2 = spec.scd2
    key, target = scd2.key, spec.qualified(catalog)
    # Each is read once and kept: the new rows' latest record per key and batch, and each key's last version.
    present = observations(records, scd2, FeedMode.INCREMENTAL).cache()
    newest_first = Window.partitionBy(key).orderBy(F.col("_valid_from").desc())
    last = spark.table(target).withColumn("_rank", F.row_number().over(newest_first)).where("_rank = 1").drop("_rank")
    last = last.cache()
    # Each new observation: a repeat of its key's last version (same state, inside its interval), newer than the
    # watermark, or older (history before the watermark would change: recompute). A key the table has never
    # seen counts as older too when it is not newer: a full recompute would close it at earlier snapshots.
    seq, valid_from, valid_to = F.col("n._seq"), F.col("l._valid_from"), F.col("l._valid_to")
    same_state = F.struct(*[F.col(f"n.{c}") for c in scd2.tracked]).eqNullSafe(
        F.struct(*[F.col(f"l.{c}") for c in scd2.tracked])
    )
    known = F.col(f"l.{key}").isNotNull()
    repeat = known & same_state & (seq >= valid_from) & (valid_to.isNull() | (seq < valid_to))
    kind = F.when(repeat, "repeat").when(F.unix_micros(seq) > F.lit(watermark), "new").otherwise("older")
    classified = (
        present.alias("n")
        .join(last.alias("l"), F.col(f"n.{key}") == F.col(f"l.{key}"), "left")
        .select(F.col(f"n.{key}").alias(key), seq.alias("_seq"), kind.alias("_kind"), known.alias("_known"))
        .cache()
    )
    affected = None
    try:
        stats = classified.agg(
            F.count_if(F.col("_kind") == "new").alias("new"),
            F.count_if(F.col("_kind") == "repeat").alias("repeats"),
            F.count_if(F.col("_kind") == "older").alias("older"),
            F.min_by(F.struct(key, "_seq"), F.when(F.col("_kind") == "older", F.col("_seq"))).alias("example"),
            F.max(F.unix_micros("_seq")).alias("latest"),
        ).first()
        if stats["older"]:
            example = stats["example"]
            return (
                None,
                f"{stats['older']} new observation(s) older than the watermark, e.g. {key} "
                f"{example[0]} at {example[1]}",
                None,
            )
        batches = records.select("_batch_id", F.unix_micros("_snapshot_at").alias("_micros")).distinct().collect()
        snapshot_times = [b["_micros"] for b in batches]
        if mode == FeedMode.FULL and min(snapshot_times) <= watermark:
            return None, "a new snapshot is not newer than the watermark (a day arrived late, or again)", None

        changed = classified.where(F.col("_kind") == "new").select(key)
        absent = None
        if mode == FeedMode.FULL:
            # Deleted at a new snapshot's time: a key current in the table or seen in the new rows that the snapshot
            # lacks (a key new to the table only from its first new observation on, as `observations` does).
            snapshots = local_frame(
                spark, [(b["_batch_id"], b["_micros"]) for b in batches], "_batch_id string, _micros bigint"
            )
            snapshots = snapshots.select("_batch_id", F.timestamp_micros("_micros").alias("_seq"))
            seen = classified.groupBy(key).agg(F.min(F.when(~F.col("_known"), F.col("_seq"))).alias("_first"))
            current = last.where(F.col("_is_current")).select(key, F.lit(None).cast("timestamp").alias("_first"))
            candidates = seen.unionByName(current).groupBy(key).agg(F.min("_first").alias("_first"))
            absent = (
                candidates.crossJoin(F.broadcast(snapshots))
                .where(F.col("_first").isNull() | (F.col("_seq") > F.col("_first")))
                .join(in_snapshot(present, held, key), [key, "_batch_id"], "left_anti")
                .select(key, "_batch_id", "_seq", F.lit(True).alias("_deleted"))
            )
            changed = changed.unionByName(absent.select(key))
        affected = changed.distinct().cache()
        watermark_after = _max([watermark, stats["latest"], *(snapshot_times if mode == FeedMode.FULL else [])])
        reason = f"{stats['new']} new observation(s) after the watermark, {stats['repeats']} repeat(s) of current state"
        if affected.isEmpty():
            return Scd2Result(target, 0, 0, 0, None, Scd2Method.EXTEND, reason), "", watermark_after

        carried_rows = last.join(affected, key, "left_semi")
        lineage = [c for c in present.columns if c not in ("_seq", "_deleted")]
        events = [
            carried_rows.select(*lineage, F.col("_valid_from").alias("_seq"), F.lit(False).alias("_deleted")),
            carried_rows.where(F.col("_valid_to").isNotNull()).select(  # the last version ended by a deletion
                key, "_batch_id", F.col("_valid_to").alias("_seq"), F.lit(True).alias("_deleted")
            ),
            present.join(affected, key, "left_semi"),
        ] + ([absent] if absent is not None else [])
        union = events[0]
        for frame in events[1:]:
            union = union.unionByName(frame, allowMissingColumns=True)
        result = merge_scd2(spark, catalog, spec, history(union, spec), affected, existing=carried_rows)
        return dataclasses.replace(result, method=Scd2Method.EXTEND, reason=reason), "", watermark_after
    finally:
        for frame in (affected, classified, last, present):
            if frame is not None:
                frame.unpersist()
