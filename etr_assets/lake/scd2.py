"""SCD2 history as a pure function of what the source sent (its *observations*: each batch's latest record per key,
and a full snapshot's absences), applied as the difference from the table in one MERGE. Because history depends only
on the set of observations, batches out of order, replayed or re-fetched give the in-order history (docs/scd2.md)."""

from __future__ import annotations

import dataclasses
import uuid
from enum import StrEnum
from typing import TYPE_CHECKING

from etr_assets.lake.feeds import FeedMode
from etr_assets.lake.frames import conform
from etr_assets.lake.retry import run_with_retries
from etr_assets.lake.specs import STATE_HASH_COLUMN, Scd2, TableSpec
from etr_assets.lake.writes import current_snapshot_id

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class Scd2Method(StrEnum):
    """How an SCD2 apply was done: every observation recomputed; incrementally (scd2_incremental.py), with some keys
    rewritten from their first change on (the window), or every key settled by the current versions; or nothing
    to do."""

    RECOMPUTE = "recompute"
    WINDOW = "window"
    CURRENT = "current-rows"
    UNCHANGED = "unchanged"


@dataclasses.dataclass(frozen=True)
class Scd2Result:
    table: str
    inserted: int
    updated: int
    deleted: int
    snapshot_id: int | None  # None when nothing changed (no commit)
    method: Scd2Method = Scd2Method.RECOMPUTE
    reason: str = ""  # why that method

    @property
    def changed(self) -> bool:
        return bool(self.inserted or self.updated or self.deleted)


@dataclasses.dataclass(frozen=True)
class Applied:
    """An incremental apply done: its result, the watermark (latest observation time, micros) after it, and whether
    the commit that published it also set the properties the caller asked for (`apply_incremental`'s `published`)."""

    result: Scd2Result
    watermark: int | None
    properties_set: bool = False


def observations(records: DataFrame, scd2: Scd2, mode: str, snapshot_time_column: str = "_snapshot_at", held=None):
    """Per (key, batch) the latest record, plus absence markers of full snapshots.

    `records` has the key, the sequence, the tracked columns, any other columns to carry, and `_batch_id`,
    `_source_file` and `snapshot_time_column` (when the batch's snapshot was taken). `held`: (key, `_batch_id`)
    of records a snapshot sent that could not be read; they are not absences.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if mode not in (FeedMode.FULL, FeedMode.INCREMENTAL):
        raise ValueError(f"SCD2 mode must be {FeedMode.FULL!r} or {FeedMode.INCREMENTAL!r}, not {mode!r}")
    newest_in_batch = Window.partitionBy(scd2.key, "_batch_id").orderBy(
        F.col(scd2.sequence).desc(), F.col("_source_file").desc(), F.xxhash64(*scd2.tracked).desc()
    )
    latest = records.withColumn("_rank", F.row_number().over(newest_in_batch)).where("_rank = 1").drop("_rank")
    present = latest.withColumn("_seq", F.col(scd2.sequence)).withColumn("_deleted", F.lit(False))
    if mode == FeedMode.INCREMENTAL:
        return present.drop(snapshot_time_column)

    # Absent from a full snapshot = deleted at the snapshot's time, once an earlier snapshot had sent the key. A key
    # first sent late, with an older sequence (a suppression lifted, a source catching up), is not deleted by the
    # snapshots before it: in order, those found no version of it to close.
    first_sent = present.groupBy(scd2.key).agg(F.min(snapshot_time_column).alias("_first_sent"))
    snapshots = records.select("_batch_id", F.col(snapshot_time_column).alias("_seq")).distinct()
    absent = (
        first_sent.crossJoin(snapshots)
        .where(F.col("_seq") > F.col("_first_sent"))
        .join(in_snapshot(present, held, scd2.key), [scd2.key, "_batch_id"], "left_anti")
        .withColumn("_deleted", F.lit(True))
        .drop("_first_sent")
    )
    return present.drop(snapshot_time_column).unionByName(absent, allowMissingColumns=True)


def in_snapshot(present: DataFrame, held: DataFrame | None, key: str) -> DataFrame:
    """(key, `_batch_id`) of every key a snapshot contained: read (`present`) or sent but unreadable (`held`)."""
    keys = present.select(key, "_batch_id")
    return keys if held is None else keys.unionByName(held.select(key, "_batch_id"))


def history(events: DataFrame, spec: TableSpec) -> DataFrame:
    """Versions from observations: the SCD2 rows the table should hold for these keys."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    scd2 = _scd2_of(spec)
    # One observation per (key, time): a record beats an absence; among records, the first delivery.
    same_time = Window.partitionBy(scd2.key, "_seq").orderBy(F.col("_deleted").asc(), F.col("_batch_id").asc())
    unique = events.withColumn("_rank", F.row_number().over(same_time)).where("_rank = 1").drop("_rank")

    by_time = Window.partitionBy(scd2.key).orderBy("_seq")
    state = F.struct(F.col("_deleted"), *[F.col(c) for c in scd2.tracked])
    changes = unique.withColumn("_state", state).withColumn("_previous", F.lag("_state").over(by_time))
    # NULL-safe: <=> treats NULL and NULL as equal, and NULL and a value as different, inside the struct too.
    changes = changes.where(F.col("_previous").isNull() | ~F.col("_state").eqNullSafe(F.col("_previous")))
    versions = (
        changes.withColumn("_valid_to", F.lead("_seq").over(by_time))
        .where(~F.col("_deleted"))
        .withColumn("_valid_from", F.col("_seq"))
        .withColumn("_is_current", F.col("_valid_to").isNull())
        .withColumn("_ingested_at", F.current_timestamp())
        .withColumn(STATE_HASH_COLUMN, F.expr(spec.state_hash_sql))
    )
    return conform(versions, spec)


def merge_scd2(spark: SparkSession, catalog: str, spec: TableSpec, versions, keys, existing=None) -> Scd2Result:
    """Make the table's rows for `keys` (or the `existing` rows given) equal `versions`, in one MERGE of only
    what differs."""
    target = spec.qualified(catalog)
    delta, counts = scd2_delta(spark, spec, target, versions, keys, existing)
    try:
        if not counts:
            return Scd2Result(target, 0, 0, 0, None)
        write_delta(spark, spec, target, delta)
    finally:
        delta.unpersist()
    inserted, updated, deleted = (counts.get(action, 0) for action in ("insert", "update", "delete"))
    return Scd2Result(target, inserted, updated, deleted, current_snapshot_id(spark, target))


def scd2_delta(spark: SparkSession, spec: TableSpec, target: str, versions, keys, existing=None):
    """(the rows to insert, update and delete, cached, with their `_action`; how many of each) that make `target`'s
    rows for `keys` (or the `existing` rows given) equal `versions`."""
    from pyspark.sql import functions as F

    scd2 = _scd2_of(spec)
    # Lineage is not compared: a re-download of the same data under a new batch id changes no history, so it
    # must not rewrite rows (it keeps pointing at the batch that first delivered the version).
    compared = [c for c in spec.column_names if c not in ("_ingested_at", "_source_file", "_batch_id")]
    if existing is None:
        existing = spark.table(target).join(keys.select(scd2.key).distinct(), scd2.key, "left_semi")
    joined = versions.alias("n").join(existing.alias("e"), [scd2.key, "_valid_from"], "full_outer")
    new_present, old_present = F.col("n._is_current").isNotNull(), F.col("e._is_current").isNotNull()
    same = F.lit(True)
    for column in compared:
        if column not in (scd2.key, "_valid_from"):
            same = same & F.col(f"n.{column}").eqNullSafe(F.col(f"e.{column}"))
    action = (
        F.when(new_present & ~old_present, "insert")
        .when(~new_present & old_present, "delete")
        .when(new_present & old_present & ~same, "update")
    )
    carried = [
        F.col(c)
        if c in (scd2.key, "_valid_from")
        else F.coalesce(F.col(f"n.{c}"), F.col(f"e.{c}")).alias(c)
        if c in ("_is_current", "_ingested_at", "_source_file", "_batch_id")
        else F.col(f"n.{c}").alias(c)
        for c in spec.column_names
    ]
    delta = joined.select(*carried, action.alias("_action")).where(F.col("_action").isNotNull()).cache()
    return delta, {row["_action"]: row["count"] for row in delta.groupBy("_action").count().collect()}


def write_delta(spark: SparkSession, spec: TableSpec, target: str, delta, inserts: bool = True) -> None:
    """One MERGE of `scd2_delta`'s rows into `target` (a table, or a branch of one). `inserts=False`: its updates
    and deletes only (the caller appends the inserts): with no NOT MATCHED clause the MERGE is an inner join, which
    Spark may broadcast the rows into instead of shuffling the table's."""
    from pyspark.sql import functions as F

    key = _scd2_of(spec).key
    view = f"scd2_delta_{uuid.uuid4().hex[:12]}"
    (delta if inserts else delta.where(F.col("_action") != "insert")).createOrReplaceTempView(view)
    columns = spec.column_names
    updates = ", ".join(f"t.{c} = s.{c}" for c in columns if c not in (key, "_valid_from"))
    insert = (
        f"WHEN NOT MATCHED AND s._action = 'insert' THEN INSERT ({', '.join(columns)}) "
        f"VALUES ({', '.join('s.' + c for c in columns)})"
    )
    try:
        spark.sql(
            f"""
            MERGE INTO {target} t
            USING {view} s
            ON t.{key} = s.{key} AND t._valid_from = s._valid_from
            WHEN MATCHED AND s._action = 'delete' THEN DELETE
            WHEN MATCHED AND s._action = 'update' THEN UPDATE SET {updates}
            {insert if inserts else ""}
            """
        )
    finally:
        spark.catalog.dropTempView(view)


def apply_observations(
    spark: SparkSession, catalog: str, spec: TableSpec, records, mode: str, keys=None, held=None
) -> Scd2Result:
    """The whole step: observations -> history -> one MERGE. `keys`: which keys to recompute (default: all);
    `held`: keys full snapshots sent but could not be read (`observations`).

    A MERGE that loses to a concurrent commit on the same files is recomputed from fresh data and re-run.
    """
    attempt = lambda: recompute(spark, catalog, spec, records, mode, keys, held)  # noqa: E731
    return with_retries(spark, spec.qualified(catalog), attempt)


def recompute(
    spark: SparkSession, catalog: str, spec: TableSpec, records, mode: str, keys=None, held=None
) -> Scd2Result:
    """One attempt of `apply_observations` (no retry)."""
    scd2 = _scd2_of(spec)
    events = observations(records, scd2, mode, held=held)
    chosen = records.select(scd2.key).distinct() if keys is None else keys.select(scd2.key).distinct()
    if keys is not None:
        events = events.join(chosen, scd2.key, "left_semi")
    return merge_scd2(spark, catalog, spec, history(events, spec), chosen)


def with_retries(spark: SparkSession, target: str, attempt):
    """Re-run an SCD2 attempt that lost its commit to a concurrent writer, on fresh table state."""
    # Any other commit to the table conflicts with a keyed MERGE, so allow several rounds of waiting; the Dagster
    # layer also gives each SCD2 table a pool so its writers queue instead of racing.
    return run_with_retries(
        attempt,
        f"SCD2 merge into {target}",
        attempts=8,
        max_delay=30.0,
        on_retry=lambda attempt, error: spark.sql(f"REFRESH TABLE {target}"),
    )


def _scd2_of(spec: TableSpec) -> Scd2:
    if spec.scd2 is None:
        raise ValueError(f"table spec {spec.identifier} declares no SCD2 history")
    return spec.scd2
