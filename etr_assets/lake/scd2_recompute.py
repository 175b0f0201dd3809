"""SCD2 history recomputed from observations (each batch's latest record per key, and a full snapshot's absences):
for every key (`recompute`), or for the keys new log rows change, from each one's first change (`_lo`) on
(`rewrite`: the window). History depends only on the set of observations, so batches out of order, replayed or
re-fetched give the in-order history; only its difference from the table is written, in one MERGE (docs/scd2.md).
`scd2` is the apply path that calls it."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from enum import StrEnum
from typing import TYPE_CHECKING, NamedTuple

from etr_assets.lake.feeds import FeedMode
from etr_assets.lake.frames import conform, local_frame, temp_view
from etr_assets.lake.session import java_class
from etr_assets.lake.specs import SCD2_COLUMNS, STATE_HASH_COLUMN, STATE_HASH_PROPERTY, Scd2, TableSpec
from etr_assets.lake.writes import iceberg_table

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame, SparkSession

# Narrow rows (a key and a few numbers: affected keys, closes, picks) sent whole to every task instead of shuffling
# the rows they are joined with, up to this many per GiB of heap: the driver builds each broadcast and every executor
# keeps it, and one write may build two at once (docs/scd2.md, "Broadcast or shuffle").
BROADCAST_ROWS_PER_GIB = 1_250_000
_LINEAGE = ("_batch_id", "_source_file")
# The order `observations` picks a key's latest record by, and what identifies the record picked (the file by a hash:
# a path is long, and the picks may be sent to every task).
_ORDER = ("_seq", "_file_rank", "_tie")
PICKED = ("_seq", "_file_hash", "_tie")
_VERSION_COLUMNS = {c.name for c in SCD2_COLUMNS}


class Action(StrEnum):
    """What a row of a difference does to the table (its `_action`)."""

    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"


@dataclasses.dataclass(frozen=True)
class ObservationLog:
    """The options of an apply: the log and how to read it."""

    table: str  # qualified
    to_records: Callable[[DataFrame], DataFrame]  # log rows -> SCD2 records (`observations`' input)
    mode: FeedMode
    held: DataFrame | None = None  # (key, `_batch_id`) of records full snapshots sent unreadable: not absences
    # The log's date column (its partition), no row's `_snapshot_at` after the next day's start: a window reads only
    # the days since its change.
    snapshot_day: str | None = None


@dataclasses.dataclass(frozen=True)
class Gained:
    """What the log gained since the last apply, as SCD2 records."""

    records: DataFrame  # with every row of a day it replaced
    head: int  # the log snapshot read
    base: int | None  # the table's snapshot checked (None: still empty)
    watermark: int  # the latest observation time applied before (microseconds)
    removed: DataFrame | None = None  # the replaced days' rows as they were (None: it only gained)
    still_sent: DataFrame | None = None  # the rows of the days beside them, which may send a removed record again


class Batch(NamedTuple):  # a batch of log rows (times in microseconds)
    id: str
    snapshot: int  # when its snapshot was taken
    latest: int | None = None  # its latest sequence


@dataclasses.dataclass(frozen=True)
class Rewrite:
    versions: DataFrame  # what the affected keys should have from each one's anchor on
    existing: DataFrame  # the rows those replace
    keys: DataFrame  # the affected keys: key, `_lo`
    reason: str
    cached: tuple  # frames cached for them (unpersist after the write)


def observations(records: DataFrame, scd2: Scd2, mode: FeedMode, held: DataFrame | None = None) -> DataFrame:
    """Per (key, batch) the latest record, plus absence markers of full snapshots. `records` has the key, the
    sequence, the tracked and carried columns, `_batch_id`, `_source_file` and `_snapshot_at` (when the batch's
    snapshot was taken). `held`: (key, `_batch_id`) of records a snapshot sent that could not be read: no absences."""
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
        return present.drop("_snapshot_at")

    # Absent from a full snapshot = deleted at the snapshot's time, once an earlier snapshot had sent the key. A key
    # first sent late, with an older sequence (a suppression lifted, a source catching up), is not deleted by the
    # snapshots before it: in order, those found no version of it to close.
    first_sent = present.groupBy(scd2.key).agg(F.min("_snapshot_at").alias("_first_sent"))
    snapshots = records.select("_batch_id", F.col("_snapshot_at").alias("_seq")).distinct()
    absent = (
        first_sent.crossJoin(snapshots)
        .where(F.col("_seq") > F.col("_first_sent"))
        .join(in_snapshot(present, held, scd2.key), [scd2.key, "_batch_id"], "left_anti")
        .withColumn("_deleted", F.lit(True))
        .drop("_first_sent")
    )
    return present.drop("_snapshot_at").unionByName(absent, allowMissingColumns=True)


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


def recompute(
    spark: SparkSession, catalog: str, spec: TableSpec, records, mode: FeedMode, keys=None, held=None
) -> dict[str, int]:
    """History of `keys` (default: every key of `records`) recomputed from every observation in `records`, and the
    table's rows for them made equal to it by one MERGE of only what differs: how many rows of each `Action`."""
    scd2 = _scd2_of(spec)
    events = observations(records, scd2, mode, held)
    chosen = (records if keys is None else keys).select(scd2.key).distinct()
    if keys is not None:
        events = events.join(chosen, scd2.key, "left_semi")
    target = spec.qualified(catalog)
    delta, counts = difference(spark, spec, target, history(events, spec), chosen)
    try:
        if counts:
            write_difference(spark, spec, target, delta)
    finally:
        delta.unpersist()
    return counts


def difference(spark: SparkSession, spec: TableSpec, target: str, versions, keys, existing=None):
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
        F.when(new_present & ~old_present, Action.INSERT)
        .when(~new_present & old_present, Action.DELETE)
        .when(new_present & old_present & ~same, Action.UPDATE)
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


def write_difference(spark: SparkSession, spec: TableSpec, target: str, delta, inserts: bool = True) -> None:
    """One MERGE of `difference`'s rows into `target` (a table or a branch). `inserts=False`: updates and deletes only
    (the caller appends the inserts): with no NOT MATCHED clause Spark may broadcast the rows into an inner join."""
    from pyspark.sql import functions as F

    key = _scd2_of(spec).key
    rows = delta if inserts else delta.where(F.col("_action") != Action.INSERT)
    columns = spec.column_names
    updates = ", ".join(f"t.{c} = s.{c}" for c in columns if c not in (key, "_valid_from"))
    insert = (
        f"WHEN NOT MATCHED AND s._action = '{Action.INSERT}' THEN INSERT ({', '.join(columns)}) "
        f"VALUES ({', '.join('s.' + c for c in columns)})"
    )
    with temp_view(spark, rows, "scd2_delta") as view:
        spark.sql(
            f"""
            MERGE INTO {target} t
            USING {view} s
            ON t.{key} = s.{key} AND t._valid_from = s._valid_from
            WHEN MATCHED AND s._action = '{Action.DELETE}' THEN DELETE
            WHEN MATCHED AND s._action = '{Action.UPDATE}' THEN UPDATE SET {updates}
            {insert if inserts else ""}
            """
        )


def rewrite(spec: TableSpec, log: ObservationLog, gained: Gained, table, state, present, batches) -> Rewrite | None:
    """What the new rows (`gained.records`; `present`, their latest record per key and batch) change in `table`'s
    versions (`state`: their state hash), or None when they change nothing."""
    from pyspark.sql import functions as F

    spark, key = table.sparkSession, spec.scd2.key
    # Materialized without lineage, as the rebuild's inputs are (`_rebuild`).
    changes = affected_keys(spec, log, gained, table, state, present, batches).localCheckpoint()
    stats = changes.agg(F.count("*").alias("keys"), F.min(F.unix_micros("_lo")).alias("lo")).first()
    if not stats["keys"]:
        changes.unpersist()
        return None
    lo = stats["lo"]
    affected = F.broadcast(changes) if stats["keys"] <= broadcast_rows(spark) else changes
    if lo > gained.watermark:  # every observation at or after `lo` arrived in the new rows
        records, snapshots, source = gained.records, batches, "the new rows only"
    else:
        records = _window_records(spark, spec, log, gained.head, lo)
        snapshots, micros = [], F.unix_micros("_snapshot_at")
        if log.mode == FeedMode.FULL:  # every snapshot taken since `lo`
            found = records.where(micros >= lo).select("_batch_id", micros).distinct().collect()
            snapshots = [Batch(row[0], row[1]) for row in found]
        source = f"the log since {when(lo)}" + (f" ({len(snapshots)} snapshot(s))" if snapshots else "")
    records = records.join(affected, key, "left_semi")
    versions, existing, cached = _rebuild(spec, log, table, records, affected, snapshots)
    reason = f"change {stats['keys']} key(s) from {when(lo)} on; read {source}"
    return Rewrite(versions, existing, changes, reason, (*cached, changes))


def affected_keys(spec: TableSpec, log: ObservationLog, gained: Gained, table, state, present, batches) -> DataFrame:
    """(key, `_lo`): each key some new or removed observation changes, and the earliest time one does."""
    from pyspark.sql import functions as F

    spark, key = present.sparkSession, spec.scd2.key
    versions = table.select(key, "_valid_from", "_valid_to", state.alias("_state"), others_hash(spec).alias("_others"))
    p, v = present.alias("p"), versions.alias("v")
    covers = (F.col(f"p.{key}") == F.col(f"v.{key}")) & (F.col("v._valid_from") <= F.col("p._seq"))
    covers = covers & (F.col("v._valid_to").isNull() | (F.col("p._seq") < F.col("v._valid_to")))
    # At the version's very start the two records tie: implied only if they agree on every compared column.
    implied = (F.col("v._state") == F.col("p._state")) & (
        (F.col("p._seq") > F.col("v._valid_from")) | (F.col("v._others") == F.col("p._others"))
    )
    records = (
        p.join(v, covers, "left")
        .where(~F.coalesce(implied, F.lit(False)))  # no covering version, another state, or a version without hash
        .select(F.col(f"p.{key}").alias(key), F.col("p._seq").alias("_at"))
    )
    changed = [records]
    if gained.removed is not None:
        # A removed record changes nothing while the same record (time, state, other columns) is still some batch's
        # latest: the reloaded day's or one beside it. (A record of another content at that very time in another
        # batch would win the tie by batch id; sources send one record per key and time.)
        same = [key, "_seq", "_state", "_others"]
        sent = present.select(*same)
        if gained.still_sent is not None:
            sent = sent.unionByName(latest_records(spec, gained.still_sent).select(*same))
        removed = latest_records(spec, gained.removed).join(sent, same, "left_anti")
        changed.append(removed.select(key, F.col("_seq").alias("_at")))
    if log.mode == FeedMode.FULL:
        # A key alive across a new snapshot's time that the snapshot neither contains nor holds: deleted there.
        spanning = versions.crossJoin(F.broadcast(_snapshots(spark, batches))).where(
            (F.col("_valid_from") < F.col("_at")) & (F.col("_valid_to").isNull() | (F.col("_at") < F.col("_valid_to")))
        )
        changed.append(
            spanning.join(in_snapshot(present, log.held, key), [key, "_batch_id"], "left_anti").select(key, "_at")
        )
        if gained.removed is not None:
            changed.append(_removed_absences(spec, log, versions, present, gained.removed, batches))
    return functools.reduce(lambda a, b: a.unionByName(b), changed).groupBy(key).agg(F.min("_at").alias("_lo"))


def broadcast_rows(spark: SparkSession) -> int:
    """How many narrow rows a join sends whole to every task: `BROADCAST_ROWS_PER_GIB` of the smallest heap that
    holds them, the driver's (which is the executor's in local mode) or else each executor's."""
    heap = java_class(spark, "java.lang.Runtime").getRuntime().maxMemory()
    if not spark.sparkContext.master.startswith("local"):
        executor = spark.sparkContext.getConf().get("spark.executor.memory", "1g")
        heap = min(heap, java_class(spark, "org.apache.spark.network.util.JavaUtils").byteStringAsBytes(executor))
    return int(BROADCAST_ROWS_PER_GIB * heap / (1 << 30))


def file_ranks(spark: SparkSession, files: list[str]) -> DataFrame:
    """(`_file_hash`, `_file_rank`): each file's number in path order, by the hash records carry of their file (a
    join by a number: by the path, every record's lookup hashed and compared a path twice over)."""
    from pyspark.sql import functions as F

    ranked = local_frame(spark, [(f, n) for n, f in enumerate(sorted(files))], "_source_file string, _file_rank int")
    return ranked.select(F.xxhash64("_source_file").alias("_file_hash"), "_file_rank")


def latest_records(spec: TableSpec, records: DataFrame, ranks: DataFrame | None = None, by_batch=True) -> DataFrame:
    """Each batch's latest record per key, picked as `observations` picks it, in narrow columns (`_alone`: the key's
    only record there, so no tie). `ranks` (`file_ranks`) lets the sort compare a number, not a path; `by_batch=False`
    for one batch: partitioned by the key alone, so a join by the key reuses the shuffle."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    scd2 = spec.scd2
    picked = records.select(
        "*",
        F.col(scd2.sequence).alias("_seq"),
        F.xxhash64(*scd2.tracked).alias("_tie"),
        F.xxhash64("_source_file").alias("_file_hash"),
    )
    if ranks is None:
        picked = picked.withColumn("_file_rank", F.col("_source_file"))
    else:
        picked = picked.join(F.broadcast(ranks), "_file_hash", "left")
    group = Window.partitionBy(scd2.key, *(["_batch_id"] if by_batch else []))
    ordered = group.orderBy(*[F.col(c).desc() for c in _ORDER])
    whole = ordered.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    # A count over the group, not the next record's order compared with this one's: Spark's window frames cost per
    # group, and most keys have one record. Over the ordered window's whole frame: one window operator does both.
    ranked = picked.select(
        scd2.key,
        "_batch_id",
        *PICKED,
        F.expr(spec.state_hash_sql).alias("_state"),
        others_hash(spec).alias("_others"),
        F.row_number().over(ordered).alias("_rank"),
        (F.count("*").over(whole) == 1).alias("_alone"),
    )
    return ranked.where("_rank = 1").drop("_rank")


def _removed_absences(spec: TableSpec, log: ObservationLog, versions, present, removed, batches) -> DataFrame:
    """(key, `_at`) of each deletion that starts at a removed snapshot's time (a version ends there and none starts:
    its absence made it) unless a new snapshot taken then still neither contains nor holds the key."""
    from pyspark.sql import functions as F

    spark, key = versions.sparkSession, spec.scd2.key
    times = removed.select(F.col("_snapshot_at").alias("_at")).distinct()
    starts = versions.select(key, F.col("_valid_from").alias("_at"))
    deletions = (
        versions.select(key, F.col("_valid_to").alias("_at"))
        .join(F.broadcast(times), "_at")
        .join(starts, [key, "_at"], "left_anti")
    )
    still_absent = (
        deletions.join(F.broadcast(_snapshots(spark, batches)), "_at")
        .join(in_snapshot(present, log.held, key), [key, "_batch_id"], "left_anti")
        .select(key, "_at")
    )
    return deletions.join(still_absent, [key, "_at"], "left_anti")


def _rebuild(spec: TableSpec, log: ObservationLog, table, records, affected, snapshots: list[Batch]):
    """(versions, the rows they replace, frames cached for them) of the affected keys from each one's anchor on, from
    their log rows that may hold observations since their `_lo` and every snapshot since the earliest `_lo`."""
    from pyspark.sql import functions as F

    spark, scd2, key = table.sparkSession, spec.scd2, spec.scd2.key
    carried = [c.name for c in spec.columns if c.name not in _VERSION_COLUMNS] + list(_LINEAGE)
    # Both are read several times below and hold the affected keys only: materialized once, without the lineage a
    # cached frame would carry into every plan below (Spark plans each of them again for every job).
    kept = table.join(affected, key).localCheckpoint()
    anchors = kept.groupBy(key).agg(
        F.max(F.when(F.col("_valid_from") < F.col("_lo"), F.col("_valid_from"))).alias("_anchor_from"),
        F.min("_valid_from").alias("_first"),
    )
    rows = kept.join(anchors, key)
    anchor = rows.where(F.col("_valid_from") == F.col("_anchor_from"))
    existing = rows.where(F.col("_anchor_from").isNull() | (F.col("_valid_from") >= F.col("_anchor_from")))
    existing = existing.select(*spec.column_names)

    sent = records.groupBy(key).agg(F.min("_snapshot_at").alias("_first")) if log.mode == FeedMode.FULL else None
    present = observations(records, scd2, FeedMode.INCREMENTAL).join(affected, key).localCheckpoint()
    events = [
        anchor.select(*carried, F.col("_valid_from").alias("_seq"), F.lit(False).alias("_deleted")),
        anchor.where(F.col("_valid_to") < F.col("_lo")).select(  # deleted before the window: still deleted at it
            key, "_batch_id", F.col("_valid_to").alias("_seq"), F.lit(True).alias("_deleted")
        ),
        present.where(F.col("_seq") >= F.col("_lo")).select(*carried, "_seq", "_deleted"),
    ]
    if log.mode == FeedMode.FULL:
        # Absent from a snapshot taken since `_lo`: deleted then, once an earlier snapshot had sent the key (as
        # observations does). A key with versions was sent by the time its first version began, as far as the window
        # can tell; one without is first sent by the window's own snapshots.
        firsts = sent.unionByName(anchors.select(key, "_first")).groupBy(key).agg(F.min("_first").alias("_first"))
        events.append(
            affected.join(firsts, key)
            .crossJoin(F.broadcast(_snapshots(spark, snapshots)))
            .where((F.col("_at") >= F.col("_lo")) & (F.col("_at") > F.col("_first")))
            .join(in_snapshot(present, log.held, key), [key, "_batch_id"], "left_anti")
            .select(key, "_batch_id", F.col("_at").alias("_seq"), F.lit(True).alias("_deleted"))
        )
    union = functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), events)
    return history(union, spec), existing, (kept, present)


def _window_records(spark: SparkSession, spec: TableSpec, log: ObservationLog, head: int, since_micros: int):
    """The log's records (at snapshot `head`) that may hold an observation at or after `since_micros`, pruned before
    `to_records` by the snapshot's day and the sequence when the log has them."""
    from pyspark.sql import functions as F

    sequence = spec.scd2.sequence
    since = F.timestamp_micros(F.lit(since_micros))
    rows = spark.read.format("iceberg").option("snapshot-id", head).load(log.table)
    # The log's own sequence column (when it has the records' type) bounds which files may hold later records.
    later = F.col(sequence) >= since if dict(rows.dtypes).get(sequence) == "timestamp" else None
    if log.mode == FeedMode.FULL:
        # A snapshot's time is at most the start of the day after its day, so one taken since `since` has a day
        # from the one holding the microsecond before `since` on; without the day, every row is read.
        first_day = F.to_date(F.timestamp_micros(F.lit(since_micros - 1)))
        taken = F.col(log.snapshot_day) >= first_day if log.snapshot_day else None
        pruned = None if taken is None or later is None else taken | later
        exact = (F.col("_snapshot_at") >= since) | (F.col(sequence) >= since)
    else:
        pruned, exact = later, F.col(sequence) >= since
    return log.to_records(rows if pruned is None else rows.where(pruned)).where(exact)


def _snapshots(spark: SparkSession, batches: list[Batch]) -> DataFrame:
    """(`_batch_id`, `_at`): each batch's snapshot time."""
    from pyspark.sql import functions as F

    frame = local_frame(spark, [(b.id, b.snapshot) for b in batches] or [("", 0)], "_batch_id string, _micros bigint")
    frame = frame if batches else frame.limit(0)
    return frame.select("_batch_id", F.timestamp_micros("_micros").alias("_at"))


def state_of(spark: SparkSession, spec: TableSpec, target: str):
    """The versions' state hash: the stored one when the table says its rows carry this spec's, else computed."""
    from pyspark.sql import functions as F

    stored = iceberg_table(spark, target).properties().get(STATE_HASH_PROPERTY)
    return F.col(STATE_HASH_COLUMN) if stored == spec.state_hash_sql else F.expr(spec.state_hash_sql)


def others_hash(spec: TableSpec):
    """NULL-safe hash of the columns a version compares besides its state and times (e.g. `created_at`): two
    records at one time and of one state start the same version only if these agree."""
    from pyspark.sql import functions as F

    scd2 = spec.scd2
    skipped = {*_VERSION_COLUMNS, scd2.key, scd2.sequence, *scd2.tracked}
    values = [f"CAST(`{c.name}` AS {c.type})" for c in spec.columns if c.name not in skipped]
    return F.expr(f"xxhash64({', '.join(f'{v} IS NULL, {v}' for v in values)})") if values else F.lit(0).cast("bigint")


def when(micros: int) -> str:
    return (dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=micros)).isoformat(sep=" ")


def _scd2_of(spec: TableSpec) -> Scd2:
    if spec.scd2 is None:
        raise ValueError(f"table spec {spec.identifier} declares no SCD2 history")
    return spec.scd2
