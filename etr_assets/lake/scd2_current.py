"""The daily SCD2 case: one new batch, every record of it after everything the table has seen, compared with the
table's *current rows only* and applied in one MERGE.

`scd2_log.apply_log` tries this first when the observation log gained exactly one batch since its cursor. One join
of the batch's latest record per key with the current rows (only the key, `_valid_from` and the tracked columns are
read) classifies every key, NULL-safely:

- same state as its current version: a repeat (a full snapshot re-sends unchanged records), nothing to do;
- a different state, or a key without a current row, with a sequence after the watermark: its current version (if
  any) closes at the record's time and a new version opens;
- in a full snapshot, a current key the snapshot neither contains nor holds (sent but refused): closed at the
  snapshot's time (deleted);
- anything else (a changed or unknown key at or before the watermark): this path cannot place it; the caller falls
  back to the general extend or the recompute, which give the order-independent history.

Those are exactly the versions the recompute (`scd2.history`) gives for this batch, lineage included: a closed version
keeps the batch that started it. The close and the insert are one MERGE over a staged union (a close row matches its
current version, an insert row matches nothing), so a reader sees both or neither.
"""

from __future__ import annotations

import uuid

from etr_assets.lake.feeds import FeedMode
from etr_assets.lake.frames import conform, spark_type
from etr_assets.lake.scd2 import Scd2Method, Scd2Result
from etr_assets.lake.specs import TableSpec
from etr_assets.lake.writes import current_snapshot_id

# What a classified key needs: its current version closed, a new version opened, or both.
_CLOSE, _OPEN = "_close_at", "_open"
BROADCAST_ROWS = 200_000  # staged closes and new versions sent whole to every task of the MERGE (tens of MB at most)


def apply_current(
    spark, catalog: str, spec: TableSpec, records, mode: str, watermark: int, held=None
) -> tuple[Scd2Result | None, str, int | None]:
    """(result, why this path, new watermark), or (None, why not, None) when some record is not after the watermark
    and is not a repeat of its key's current state. `records` hold one batch (scd2.observations' input)."""
    from pyspark.sql import functions as F

    scd2 = spec.scd2
    key, target = scd2.key, spec.qualified(catalog)
    batches = records.agg(
        F.count_distinct("_batch_id", "_snapshot_at").alias("batches"),
        F.max("_batch_id").alias("batch_id"),
        F.max(F.unix_micros("_snapshot_at")).alias("micros"),
    ).first()
    if batches["batches"] != 1:
        return None, f"{batches['batches']} new batches (this path takes one)", None
    batch_id, snapshot_micros = batches["batch_id"], batches["micros"]
    if mode == FeedMode.FULL and snapshot_micros <= watermark:
        return None, "the new snapshot is not newer than the watermark (a day arrived late, or again)", None

    present = latest_per_key(records, spec)
    # Only the key, the start and a fingerprint of the state are read and shuffled from the current rows.
    current = (
        spark.table(target)
        .where("_is_current")
        .select(key, "_valid_from", state_fingerprint(spec, F.col).alias("_state"))
    )
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
        F.when(seen & repeat, "repeat")
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
        *[F.col(f"n.{c}").alias(c) for c in present.columns if c not in (key, "_state")],
    ).where(F.col("_kind").isin("new", "vanished", "older"))
    classified = classified.cache()
    try:
        stats = classified.agg(
            F.count_if(F.col("_kind") == "new").alias("new"),
            F.count_if((F.col("_kind") == "new") & F.col("_current_from").isNotNull()).alias("changed"),
            F.count_if(F.col("_kind") == "vanished").alias("vanished"),
            F.count_if(F.col("_kind") == "older").alias("older"),
            F.min_by(F.struct(key, "_seq"), F.when(F.col("_kind") == "older", F.col("_seq"))).alias("example"),
            F.max(F.unix_micros("_seq")).alias("latest"),
        ).first()
        if stats["older"]:
            example = stats["example"]
            return (
                None,
                f"{stats['older']} record(s) at or before the watermark that change their key's current state, e.g. "
                f"{key} {example[0]} at {example[1]}",
                None,
            )
        watermark_after = max(v for v in (watermark, stats["latest"], snapshot_micros) if v is not None)
        if mode != FeedMode.FULL:
            watermark_after = max(v for v in (watermark, stats["latest"]) if v is not None)
        reason = (
            f"one new batch after the watermark, compared with current rows: {stats['new'] - stats['changed']} new "
            f"key(s), {stats['changed']} changed, {stats['vanished']} vanished"
        )
        closes, opens = stats["changed"] + stats["vanished"], stats["new"]
        if not (closes or opens):
            return Scd2Result(target, 0, 0, 0, None, Scd2Method.CURRENT, reason), reason, watermark_after
        _merge(spark, spec, target, classified, closes + opens)
        result = Scd2Result(target, opens, closes, 0, current_snapshot_id(spark, target), Scd2Method.CURRENT, reason)
        return result, reason, watermark_after
    finally:
        classified.unpersist()


def latest_per_key(records, spec: TableSpec):
    """Each key's latest record in a one-batch `records`, picked as `scd2.observations` picks it (newest sequence,
    then source file, then state), with `_seq` and the state's fingerprint `_state`. Partitioned by the key alone
    (one batch), so the join with the current rows reuses this shuffle; a max_by aggregate instead of the window
    measured twice as slow."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    scd2 = spec.scd2
    newest = Window.partitionBy(scd2.key).orderBy(
        F.col(scd2.sequence).desc(), F.col("_source_file").desc(), F.xxhash64(*scd2.tracked).desc()
    )
    latest = records.withColumn("_rank", F.row_number().over(newest)).where("_rank = 1").drop("_rank", "_snapshot_at")
    return latest.withColumn("_seq", F.col(scd2.sequence)).withColumn("_state", state_fingerprint(spec, F.col))


def state_fingerprint(spec: TableSpec, column):
    """Two independent 64- and 32-bit hashes of the tracked columns, typed as the table types them, NULL-safe: each
    value is preceded by whether it is NULL (Spark's hashes skip NULLs, which would make (x, NULL) and (NULL, x)
    equal). Equal states give equal fingerprints; different ones collide with a chance of about 2^-96."""
    from pyspark.sql import functions as F

    types = {c.name: spark_type(c.type) for c in spec.columns}
    marked = []
    for name in spec.scd2.tracked:
        value = column(name).cast(types[name])
        marked += [value.isNull(), value]
    return F.struct(F.xxhash64(*marked).alias("h64"), F.hash(*marked).alias("h32"))


def _merge(spark, spec: TableSpec, target: str, classified, staged_rows: int) -> None:
    """Close and open versions in one MERGE: a close row matches its key's current version, an open row nothing."""
    from pyspark.sql import functions as F

    key = spec.scd2.key
    now = F.current_timestamp()
    closes = classified.where(F.col("_current_from").isNotNull() & F.col(_CLOSE).isNotNull()).select(
        F.col(key), F.col("_current_from").alias("_valid_from"), F.col(_CLOSE), F.lit(False).alias(_OPEN)
    )
    versions = classified.where(F.col("_kind") == "new").select(
        "*",
        F.col("_seq").alias("_valid_from"),
        F.lit(None).cast("timestamp").alias("_valid_to"),
        F.lit(True).alias("_is_current"),
        now.alias("_ingested_at"),
    )
    opens = conform(versions.drop(_CLOSE), spec).select(
        "*", F.lit(None).cast("timestamp").alias(_CLOSE), F.lit(True).alias(_OPEN)
    )
    columns = spec.column_names
    staged = opens.unionByName(closes, allowMissingColumns=True)
    if staged_rows <= BROADCAST_ROWS:  # the MERGE then reads the table once, with no shuffle of its rows
        staged = F.broadcast(staged)
    view = f"scd2_staged_{uuid.uuid4().hex[:12]}"
    staged.createOrReplaceTempView(view)
    try:
        spark.sql(
            f"""
            MERGE INTO {target} t
            USING {view} s
            ON t.{key} = s.{key} AND t._valid_from = s._valid_from AND NOT s.{_OPEN}
            WHEN MATCHED THEN UPDATE SET t._valid_to = s.{_CLOSE}, t._is_current = false,
                t._ingested_at = current_timestamp()
            WHEN NOT MATCHED AND s.{_OPEN} THEN INSERT ({", ".join(columns)})
                VALUES ({", ".join("s." + c for c in columns)})
            """
        )
    finally:
        spark.catalog.dropTempView(view)
