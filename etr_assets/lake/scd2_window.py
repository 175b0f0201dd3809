"""SCD2 history rewritten only where new log rows change it: the keys they affect, from each key's first change
(`_lo`) on, rebuilt from its *anchor* (the last version starting before `_lo`) and every raw observation since, read
from the log days that can hold them: what `scd2_incremental` does with the keys the current versions cannot settle
(docs/scd2.md, "The window")."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import TYPE_CHECKING

from etr_assets.lake.feeds import FeedMode
from etr_assets.lake.frames import local_frame
from etr_assets.lake.scd2 import history, in_snapshot, observations
from etr_assets.lake.session import java_class
from etr_assets.lake.specs import SCD2_COLUMNS, STATE_HASH_COLUMN, STATE_HASH_PROPERTY, TableSpec
from etr_assets.lake.writes import iceberg_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Narrow rows (a key and a few numbers: affected keys, closes, picks) sent whole to every task instead of shuffling
# the rows they are joined with, up to this many per GiB of heap: the driver builds each broadcast and every executor
# keeps it, and one write may build two at once (docs/scd2.md, "Broadcast or shuffle").
BROADCAST_ROWS_PER_GIB = 1_250_000
_LINEAGE = ("_batch_id", "_source_file")
# The order `scd2.observations` picks a key's latest record by, and what identifies the record picked (the file by a
# hash: a path is long, and the picks may be sent to every task).
_ORDER = ("_seq", "_file_rank", "_tie")
PICKED = ("_seq", "_file_hash", "_tie")
_VERSION_COLUMNS = {c.name for c in SCD2_COLUMNS}


@dataclasses.dataclass(frozen=True)
class LogWindow:
    """How to read the log rows that may hold observations at or after a time: the log at `snapshot_id` through
    `to_records`. `snapshot_day`: the log's date column whose day bounds each row's snapshot time (at most the start
    of the next day, as `build_landing` makes it), which prunes the log to the days since that time."""

    log: str
    snapshot_id: int
    to_records: object
    snapshot_day: str | None = None


@dataclasses.dataclass(frozen=True)
class Rewrite:
    """The versions the affected keys (`keys`: key, `_lo`) should have from each one's anchor on, the rows they
    replace (`existing`), why (`reason`), and the frames cached for them (unpersist after the write)."""

    versions: DataFrame
    existing: DataFrame
    keys: DataFrame
    count: int
    reason: str
    cached: tuple


def rewrite(
    spark: SparkSession,
    spec: TableSpec,
    table: DataFrame,
    state,
    present: DataFrame,
    new_records: DataFrame,
    mode: str,
    watermark: int,
    window: LogWindow,
    batches: list[tuple],
    held: DataFrame | None = None,
    removed_records: DataFrame | None = None,
    still_sent: DataFrame | None = None,
) -> Rewrite | None:
    """What the new rows (`new_records`; `present`, their latest record per key and batch) change in `table`'s
    versions (those of the keys to look at), or None when they change nothing. `removed_records`: the rows the log no
    longer holds (days it replaced); `new_records` then holds every row of those days; `still_sent`: other rows the
    log holds that may send the removed records again (the days beside); `batches`: (`_batch_id`, snapshot micros,
    latest sequence micros) of `new_records`; `watermark`: the latest observation time applied before (micros)."""
    from pyspark.sql import functions as F

    key = spec.scd2.key
    # Materialized without lineage, as the rebuild's inputs are (`_rebuild`).
    changes = affected_keys(spec, table, state, present, mode, batches, held, removed_records, still_sent)
    changes = changes.localCheckpoint()
    stats = changes.agg(F.count("*").alias("keys"), F.min(F.unix_micros("_lo")).alias("lo")).first()
    if not stats["keys"]:
        changes.unpersist()
        return None
    lo = stats["lo"]
    affected = F.broadcast(changes) if stats["keys"] <= broadcast_rows(spark) else changes
    if lo > watermark:  # every observation at or after `lo` arrived in the new rows
        records, snapshots, source = new_records, batches, "the new rows only"
    else:
        records = _window_records(spark, spec, window, mode, lo)
        snapshots = _snapshots_since(records, lo) if mode == FeedMode.FULL else []
        source = f"the log since {when(lo)}" + (f" ({len(snapshots)} snapshot(s))" if snapshots else "")
    records = records.join(affected, key, "left_semi")
    versions, existing, cached = _rebuild(spark, spec, table, records, affected, mode, snapshots, held)
    reason = f"change {stats['keys']} key(s) from {when(lo)} on; read {source}"
    return Rewrite(versions, existing, changes, stats["keys"], reason, (*cached, changes))


def affected_keys(
    spec: TableSpec,
    table: DataFrame,
    state,
    present: DataFrame,
    mode: str,
    batches: list[tuple],
    held: DataFrame | None = None,
    removed_records: DataFrame | None = None,
    still_sent: DataFrame | None = None,
) -> DataFrame:
    """(key, `_lo`): each key some new or removed observation changes, and the earliest time one does (module
    docstring). `table`: the SCD2 table's rows to compare with, `state` their state hash; `present`: the new rows'
    latest record per key and batch (`latest_records`); `batches`: (`_batch_id`,
    snapshot micros, ...) of the new rows; `removed_records`: rows the log no longer holds (None: it only gained);
    `still_sent`: other rows it still holds, which may send removed records again."""
    from pyspark.sql import functions as F

    spark, scd2 = present.sparkSession, spec.scd2
    key = scd2.key
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
    if removed_records is not None:
        # A removed record changes nothing while the same record (time, state, other columns) is still some batch's
        # latest: the reloaded day's or one beside it. (A record of another content at that very time in another
        # batch would win the tie by batch id; sources send one record per key and time.)
        same = [key, "_seq", "_state", "_others"]
        sent = present.select(*same)
        if still_sent is not None:
            sent = sent.unionByName(latest_records(spec, still_sent).select(*same))
        removed = latest_records(spec, removed_records).join(sent, same, "left_anti")
        changed.append(removed.select(key, F.col("_seq").alias("_at")))
    if mode == FeedMode.FULL:
        # A key alive across a new snapshot's time that the snapshot neither contains nor holds: deleted there.
        spanning = versions.crossJoin(F.broadcast(_snapshots(spark, batches))).where(
            (F.col("_valid_from") < F.col("_at")) & (F.col("_valid_to").isNull() | (F.col("_at") < F.col("_valid_to")))
        )
        changed.append(
            spanning.join(in_snapshot(present, held, key), [key, "_batch_id"], "left_anti").select(key, "_at")
        )
    if mode == FeedMode.FULL and removed_records is not None:
        changed.append(_removed_absences(spark, spec, versions, present, removed_records, batches, held))
    union = changed[0]
    for frame in changed[1:]:
        union = union.unionByName(frame)
    return union.groupBy(key).agg(F.min("_at").alias("_lo"))


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
    """Each batch's latest record per key, picked as `scd2.observations` picks it (newest sequence, then source file,
    then state), in narrow columns: the key, `_batch_id`, `_PICKED`, the state's fingerprint `_state`, `others_hash`
    as `_others`, and `_alone` (the key's only record there; a record tied with it in that order can only be among
    the others). `ranks` (`file_ranks`) lets the sort compare a number, not a path; `by_batch=False` for one batch:
    partitioned by the key alone, so a join by the key reuses the shuffle."""
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


def _removed_absences(spark, spec: TableSpec, versions, present, removed_records, batches: list[tuple], held=None):
    """(key, `_at`) of each deletion that starts at a removed snapshot's time (a version ends there and none starts:
    its absence made it) unless a new snapshot taken then still neither contains nor holds the key."""
    from pyspark.sql import functions as F

    key = spec.scd2.key
    times = removed_records.select(F.col("_snapshot_at").alias("_at")).distinct()
    starts = versions.select(key, F.col("_valid_from").alias("_at"))
    deletions = (
        versions.select(key, F.col("_valid_to").alias("_at"))
        .join(F.broadcast(times), "_at")
        .join(starts, [key, "_at"], "left_anti")
    )
    still_absent = (
        deletions.join(F.broadcast(_snapshots(spark, batches)), "_at")
        .join(in_snapshot(present, held, key), [key, "_batch_id"], "left_anti")
        .select(key, "_at")
    )
    return deletions.join(still_absent, [key, "_at"], "left_anti")


def _rebuild(spark, spec: TableSpec, table, records, affected, mode: str, snapshots: list[tuple], held=None):
    """(versions, the rows they replace, frames cached for them) of the affected keys from each one's anchor on.
    `records`: the affected keys' log rows that may hold observations at or after their `_lo`; `snapshots`:
    (`_batch_id`, micros) of every snapshot taken at or after the earliest `_lo`."""
    from pyspark.sql import functions as F

    scd2 = spec.scd2
    key = scd2.key
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

    sent = records.groupBy(key).agg(F.min("_snapshot_at").alias("_first")) if mode == FeedMode.FULL else None
    present = observations(records, scd2, FeedMode.INCREMENTAL).join(affected, key).localCheckpoint()
    events = [
        anchor.select(*carried, F.col("_valid_from").alias("_seq"), F.lit(False).alias("_deleted")),
        anchor.where(F.col("_valid_to") < F.col("_lo")).select(  # deleted before the window: still deleted at it
            key, "_batch_id", F.col("_valid_to").alias("_seq"), F.lit(True).alias("_deleted")
        ),
        present.where(F.col("_seq") >= F.col("_lo")).select(*carried, "_seq", "_deleted"),
    ]
    if mode == FeedMode.FULL:
        # Absent from a snapshot taken since `_lo`: deleted then, once an earlier snapshot had sent the key (as
        # observations does). A key with versions was sent by the time its first version began, as far as the window
        # can tell; one without is first sent by the window's own snapshots.
        firsts = sent.unionByName(anchors.select(key, "_first")).groupBy(key).agg(F.min("_first").alias("_first"))
        events.append(
            affected.join(firsts, key)
            .crossJoin(F.broadcast(_snapshots(spark, snapshots)))
            .where((F.col("_at") >= F.col("_lo")) & (F.col("_at") > F.col("_first")))
            .join(in_snapshot(present, held, key), [key, "_batch_id"], "left_anti")
            .select(key, "_batch_id", F.col("_at").alias("_seq"), F.lit(True).alias("_deleted"))
        )
    union = events[0]
    for frame in events[1:]:
        union = union.unionByName(frame, allowMissingColumns=True)
    return history(union, spec), existing, (kept, present)


def _window_records(spark: SparkSession, spec: TableSpec, window: LogWindow, mode: str, since_micros: int) -> DataFrame:
    """The log's records that may hold an observation at or after `since_micros`: a snapshot taken since, or a
    sequence since. Pruned before `to_records` by the snapshot's day and the sequence, when the log has them."""
    from pyspark.sql import functions as F

    sequence = spec.scd2.sequence
    since = F.timestamp_micros(F.lit(since_micros))
    rows = spark.read.format("iceberg").option("snapshot-id", window.snapshot_id).load(window.log)
    # The log's own sequence column (when it has the records' type) bounds which files may hold later records.
    later = F.col(sequence) >= since if dict(rows.dtypes).get(sequence) == "timestamp" else None
    if mode == FeedMode.FULL:
        # A snapshot's time is at most the start of the day after its day, so one taken since `since` has a day
        # from the one holding the microsecond before `since` on; without the day, every row is read.
        first_day = F.to_date(F.timestamp_micros(F.lit(since_micros - 1)))
        taken = F.col(window.snapshot_day) >= first_day if window.snapshot_day else None
        pruned = None if taken is None or later is None else taken | later
        exact = (F.col("_snapshot_at") >= since) | (F.col(sequence) >= since)
    else:
        pruned, exact = later, F.col(sequence) >= since
    return window.to_records(rows if pruned is None else rows.where(pruned)).where(exact)


def _snapshots_since(records: DataFrame, since_micros: int) -> list[tuple]:
    """(`_batch_id`, micros) of every snapshot in `records` taken at or after `since_micros`."""
    from pyspark.sql import functions as F

    micros = F.unix_micros("_snapshot_at")
    return [tuple(r) for r in records.where(micros >= since_micros).select("_batch_id", micros).distinct().collect()]


def _snapshots(spark: SparkSession, snapshots: list[tuple]) -> DataFrame:
    """(`_batch_id`, `_at`) of (batch id, snapshot micros, ...) tuples."""
    from pyspark.sql import functions as F

    frame = local_frame(spark, [(s[0], s[1]) for s in snapshots] or [("", 0)], "_batch_id string, _micros bigint")
    frame = frame if snapshots else frame.limit(0)
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
    parts = []
    for column in spec.columns:
        if column.name not in skipped:
            value = f"CAST(`{column.name}` AS {column.type})"
            parts += [f"{value} IS NULL", value]
    return F.expr(f"xxhash64({', '.join(parts)})") if parts else F.lit(0).cast("bigint")


def when(micros: int) -> str:
    return (dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=micros)).isoformat(sep=" ")
