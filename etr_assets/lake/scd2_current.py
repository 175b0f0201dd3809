"""The daily SCD2 case: one new batch after everything the table has seen, classified against the current rows only
(by the state hash each version stores), then written as a MERGE that closes versions and an append of new ones, on a
branch published with one fast-forward of main. Whatever it cannot place is declined, for the window or the recompute
(docs/scd2.md, "The daily path")."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from etr_assets.lake.feeds import FeedMode
from etr_assets.lake.frames import conform, local_frame
from etr_assets.lake.scd2 import Applied, Declined, Scd2Method, Scd2Result
from etr_assets.lake.specs import CURRENT_VERSIONS, STATE_HASH_COLUMN, STATE_HASH_PROPERTY, TableSpec
from etr_assets.lake.writes import current_snapshot_id, iceberg_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Closes or picks sent whole to every task: narrow rows (a key, a time or two, a hash or two), tens of MB at most.
BROADCAST_ROWS = 2_000_000
# Spark's estimate of the cached closes, rows of every classified column: what the threshold must admit.
BROADCAST_BYTES = 512 * 1024 * 1024
_BROADCAST_THRESHOLD = "spark.sql.autoBroadcastJoinThreshold"
BRANCH_PREFIX = "scd2_apply_"  # a branch per apply, dropped when published (or when the apply fails)


def apply_current(
    spark: SparkSession, catalog: str, spec: TableSpec, records, mode: str, watermark: int, base: int | None, held=None
) -> Applied | Declined:
    """Applied, or Declined (why not) when some record is not after the watermark and is not a repeat of its key's
    current state. `records` hold one batch (scd2.observations' input); `base` is
    the table's snapshot the caller checked (None: the table is still empty): the current rows are read there, and
    the writes publish only if main is still there."""
    from pyspark.sql import functions as F

    scd2 = spec.scd2
    key, target = scd2.key, spec.qualified(catalog)
    # One batch when the least and greatest (batch, snapshot time) agree: a plain aggregate, one job without a shuffle
    # (counting distinct pairs took three); the count is only for the message. It also lists the batch's files.
    micros = F.unix_micros("_snapshot_at")
    low_batch, batch_id, low_micros, snapshot_micros, latest, files = records.agg(
        F.min("_batch_id"),
        F.max("_batch_id"),
        F.min(micros),
        F.max(micros),
        F.max(F.unix_micros(scd2.sequence)),
        F.collect_set("_source_file"),
    ).first()
    if snapshot_micros is None or (low_batch, low_micros) != (batch_id, snapshot_micros):
        batches = records.select("_batch_id", "_snapshot_at").dropna().distinct().count()
        return Declined(f"{batches} new batches (this path takes one)")
    if mode == FeedMode.FULL and snapshot_micros <= watermark:
        reason = "the new snapshot is not newer than the watermark (a day arrived late, or again)"
        return Declined(reason, ((batch_id, snapshot_micros, latest),))

    # The batch's files numbered in path order (Python's `str` order is UTF-8's bytewise order, Spark's): the pick's
    # sort compares a number, not a path.
    ranks = local_frame(spark, [(f, n) for n, f in enumerate(sorted(files))], "_source_file string, _file_rank int")
    present = latest_per_key(records, spec, ranks)
    # Only the key, the start and the state's hash are read and shuffled from the current rows: the stored one when
    # the table says its rows carry this spec's hash (no tracked column read at all), else computed.
    table = (
        spark.table(target) if base is None else spark.read.format("iceberg").option("snapshot-id", base).load(target)
    )
    stored = iceberg_table(spark, target).properties().get(STATE_HASH_PROPERTY) == spec.state_hash_sql
    state = F.col(STATE_HASH_COLUMN) if stored else F.expr(spec.state_hash_sql)
    current = table.where(CURRENT_VERSIONS).select(key, "_valid_from", state.alias("_state"))
    how = "full_outer" if mode == FeedMode.FULL else "left"
    joined = present.alias("n").join(current.alias("c"), F.col(f"n.{key}") == F.col(f"c.{key}"), how)
    seen, is_current = F.col(f"n.{key}").isNotNull(), F.col(f"c.{key}").isNotNull()
    after = F.unix_micros(F.col("n._seq")) > F.lit(watermark)
    same_state = F.col("n._state") == F.col("c._state")
    # Inside the current version's interval: the same state earlier than that would split an older version.
    repeat = is_current & same_state & (F.col("n._seq") >= F.col("c._valid_from"))
    if held is not None and mode == FeedMode.FULL:
        held_here = held.where(F.col("_batch_id") == batch_id).select(F.col(key).alias("_held_key")).distinct()
        joined = joined.join(held_here, F.col(f"c.{key}") == F.col("_held_key"), "left")
        vanished = ~seen & F.col("_held_key").isNull()
    else:
        vanished = ~seen & F.lit(mode == FeedMode.FULL)
    kind = (
        F.when(is_current & F.col("c._state").isNull(), "unhashed")  # written without one: cannot compare
        .when(seen & repeat, "repeat")
        .when(seen & after, "new")
        .when(seen, "older")
        .when(vanished, "vanished")
        .otherwise("kept")
    )
    snapshot_at = F.timestamp_micros(F.lit(snapshot_micros))
    classified = joined.select(
        F.coalesce(F.col(f"n.{key}"), F.col(f"c.{key}")).alias(key),
        kind.alias("_kind"),
        F.col("c._valid_from").alias("_current_from"),
        F.when(kind == "new", F.col("n._seq")).when(kind == "vanished", snapshot_at).alias(_CLOSE),
        *[F.col(f"n.{c}").alias(c) for c in _PICKED],
        F.col("n._alone").alias("_alone"),
        F.col("n._tied").alias("_tied"),
    ).where(F.col("_kind").isin("new", "vanished", "older", "unhashed"))
    classified = classified.cache()
    try:
        stats = classified.agg(
            F.count_if(F.col("_kind") == "new").alias("new"),
            F.count_if((F.col("_kind") == "new") & F.col("_current_from").isNotNull()).alias("changed"),
            F.count_if(F.col("_kind") == "vanished").alias("vanished"),
            F.count_if(F.col("_kind") == "older").alias("older"),
            F.count_if(F.col("_kind") == "unhashed").alias("unhashed"),
            F.min_by(F.struct(key, "_seq"), F.when(F.col("_kind") == "older", F.col("_seq"))).alias("example"),
            F.max(F.unix_micros("_seq")).alias("latest"),
            F.count_if((F.col("_kind") == "new") & ~F.col("_alone")).alias("shared"),
            F.count_if((F.col("_kind") == "new") & F.col("_tied")).alias("tied"),
            F.count_if(F.unix_micros("_current_from") > F.lit(watermark)).alias("late_current"),
        ).first()
        if stats["unhashed"]:
            return Declined(f"{stats['unhashed']} current row(s) without a {STATE_HASH_COLUMN}")
        if stats["late_current"]:  # a record before such a version's start would close it before it began
            return Declined(f"{stats['late_current']} current version(s) starting after the watermark")
        if stats["older"]:
            example = stats["example"]
            return Declined(
                f"{stats['older']} record(s) at or before the watermark that change their key's current state, e.g. "
                f"{key} {example[0]} at {example[1]}"
            )
        seen_until = (watermark, stats["latest"], snapshot_micros if mode == FeedMode.FULL else None)
        watermark_after = max(v for v in seen_until if v is not None)
        reason = (
            f"one new batch after the watermark, compared with current rows: {stats['new'] - stats['changed']} new "
            f"key(s), {stats['changed']} changed, {stats['vanished']} vanished"
        )
        closes, opens = stats["changed"] + stats["vanished"], stats["new"]
        if not (closes or opens):
            return Applied(Scd2Result(target, 0, 0, 0, None, Scd2Method.CURRENT, reason), watermark_after)
        versions = _new_versions(records, spec, classified, opens, stats["shared"] > 0, stats["tied"] > 0)
        _write(spark, spec, target, base, classified, closes, versions if opens else None)
        result = Scd2Result(target, opens, closes, 0, current_snapshot_id(spark, target), Scd2Method.CURRENT, reason)
        return Applied(result, watermark_after)
    finally:
        classified.unpersist()


# What a classified key needs: its current version closed (at this time), a new version opened, or both.
_CLOSE = "_close_at"
# The order `scd2.observations` picks a key's latest record by, and what identifies the record picked (the file by a
# hash: a path is long, and the picks may be sent to every task).
_ORDER = ("_seq", "_file_rank", "_tie")
_PICKED = ("_seq", "_file_hash", "_tie")


def latest_per_key(records: DataFrame, spec: TableSpec, ranks: DataFrame) -> DataFrame:
    """Each key's latest record in a one-batch `records`, picked as `scd2.observations` picks it (newest sequence,
    then source file, then state): narrow rows of the key, `_PICKED`, the state's fingerprint `_state`, `_alone`
    (the key's only record) and `_tied`: whether another record equals it in `_ORDER` (and may differ in others).
    Partitioned by the key alone (one batch), so the join with the current rows reuses this shuffle."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    scd2 = spec.scd2
    ranked_files = _with_pick(records, spec).join(F.broadcast(ranks), "_source_file", "left")
    narrow = ranked_files.select(scd2.key, *_ORDER, "_file_hash", F.expr(spec.state_hash_sql).alias("_state"))
    newest = Window.partitionBy(scd2.key).orderBy(*[F.col(c).desc() for c in _ORDER])
    order = F.struct(*_ORDER)
    after = F.lead(order).over(newest)  # the key's next record in that order, if any
    ranked = narrow.select(
        "*",
        F.row_number().over(newest).alias("_rank"),
        after.eqNullSafe(order).alias("_tied"),
        after.isNull().alias("_alone"),
    )
    return ranked.where("_rank = 1").drop("_rank", "_file_rank")


def _with_pick(records: DataFrame, spec: TableSpec) -> DataFrame:
    """`records` with the columns `_ORDER` and `_PICKED` name."""
    from pyspark.sql import functions as F

    return (
        records.withColumn("_seq", F.col(spec.scd2.sequence))
        .withColumn("_tie", F.xxhash64(*spec.scd2.tracked))
        .withColumn("_file_hash", F.xxhash64("_source_file"))
    )


def _new_versions(records, spec: TableSpec, classified, opens: int, shared: bool, tied: bool):
    """The records that open new versions, as table rows: the batch joined with the picks of the keys that open
    one (NULL-safe on every part, as the window compared them), by the key alone unless such a key had several
    records (`shared`); one per key where records tied on the pick."""
    from pyspark.sql import functions as F

    scd2 = spec.scd2
    picks = classified.where(F.col("_kind") == "new").select(
        F.col(scd2.key).alias("_p_key"), *[F.col(c).alias(f"_p{c}") for c in _PICKED]
    )
    if opens <= BROADCAST_ROWS:
        picks = F.broadcast(picks)
    batch = _with_pick(records, spec) if shared else records
    on = F.col(scd2.key).eqNullSafe(F.col("_p_key"))
    for column in _PICKED if shared else ():
        on = on & F.col(column).eqNullSafe(F.col(f"_p{column}"))
    picked = batch.join(picks, on, "left_semi")
    if tied:  # the window kept one of the tied records; keep one too (which one is arbitrary in both)
        picked = picked.dropDuplicates([scd2.key])
    versions = picked.select(
        "*",
        F.col(scd2.sequence).alias("_valid_from"),
        F.lit(None).cast("timestamp").alias("_valid_to"),
        F.lit(True).alias("_is_current"),
        F.current_timestamp().alias("_ingested_at"),
        F.expr(spec.state_hash_sql).alias(STATE_HASH_COLUMN),
    )
    return conform(versions, spec)


def _write(
    spark: SparkSession,
    spec: TableSpec,
    target: str,
    base: int | None,
    classified: DataFrame,
    closes: int,
    versions: DataFrame,
) -> None:
    """Close versions (a MERGE of matched rows) and append new ones on a branch made at `base`, then fast-forward
    main to it: both at once, and only if nobody committed to main since `base`, which the classification read."""
    if base is None:  # the table's first rows: nothing to close, and no snapshot to branch from
        versions.writeTo(target).append()
        return
    branch = f"{BRANCH_PREFIX}{uuid.uuid4().hex[:12]}"
    on_branch = f"{target}.branch_{branch}"
    iceberg_table(spark, target).manageSnapshots().createBranch(branch, base).commit()
    try:
        if closes:
            _close(spark, spec, on_branch, classified, closes)
        if versions is not None:
            versions.writeTo(on_branch).append()
        # Fails if main moved since `base` (a commit conflict: the attempt reruns on fresh state).
        iceberg_table(spark, target).manageSnapshots().fastForwardBranch("main", branch).removeBranch(branch).commit()
    finally:
        table = iceberg_table(spark, target)
        if table.refs().get(branch) is not None:
            table.manageSnapshots().removeBranch(branch).commit()


def _close(spark: SparkSession, spec: TableSpec, target: str, classified: DataFrame, closes: int) -> None:
    from pyspark.sql import functions as F

    key = spec.scd2.key
    staged = classified.where(F.col("_current_from").isNotNull() & F.col(_CLOSE).isNotNull()).select(
        key, F.col("_current_from").alias("_valid_from"), _CLOSE
    )
    view = f"scd2_closes_{uuid.uuid4().hex[:12]}"
    threshold = spark.conf.get(_BROADCAST_THRESHOLD) if closes <= BROADCAST_ROWS else None
    staged.createOrReplaceTempView(view)
    try:
        # With the closes broadcast the MERGE reads the table once and shuffles none of it. MERGE ignores broadcast
        # hints (apache/iceberg#10891), but Spark broadcasts a side estimated under this threshold (never the target).
        if threshold is not None:
            spark.conf.set(_BROADCAST_THRESHOLD, str(BROADCAST_BYTES))
        # `_valid_to IS NULL` keeps the scan to the current versions' partition.
        spark.sql(
            f"""
            MERGE INTO {target} t
            USING {view} s
            ON t.{key} = s.{key} AND t._valid_from = s._valid_from AND t.{CURRENT_VERSIONS}
            WHEN MATCHED THEN UPDATE SET t._valid_to = s.{_CLOSE}, t._is_current = false,
                t._ingested_at = current_timestamp()
            """
        )
    finally:
        if threshold is not None:  # the session's own value back
            spark.conf.set(_BROADCAST_THRESHOLD, threshold)
        spark.catalog.dropTempView(view)
