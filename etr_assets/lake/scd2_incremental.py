"""SCD2 history extended by what the log gained, rewriting only what that changes. One new batch is first compared
with the current versions (by the state hash each stores): in the daily case that settles every key, closing versions
and opening new ones. The keys the current versions cannot settle (a record older than its key's current version, an
absence inside history, several batches or a reloaded day at once) are rewritten from their first change on
(`scd2_window`). All of it is written on a branch that one fast-forward of main publishes (docs/scd2.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from typing import TYPE_CHECKING

from etr_assets.lake.feeds import FeedMode
from etr_assets.lake.frames import conform
from etr_assets.lake.scd2 import Applied, Scd2Method, Scd2Result, scd2_delta, write_delta
from etr_assets.lake.scd2_window import (
    PICKED,
    LogWindow,
    broadcast_rows,
    file_ranks,
    latest_records,
    others_hash,
    rewrite,
    state_of,
)
from etr_assets.lake.session import session_conf
from etr_assets.lake.specs import CURRENT_VERSIONS, STATE_HASH_COLUMN, TableSpec
from etr_assets.lake.writes import current_snapshot_id, iceberg_table

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame, SparkSession

# Spark's estimate of the cached closes, rows of every classified column: what the threshold must admit.
BROADCAST_BYTES = 512 * 1024 * 1024
# Spark's estimate of a rewrite's rows (cached, every column), under which its MERGE broadcasts them: a late day's
# rewrite at a million keys is tens of thousands of rows.
DELTA_BROADCAST_BYTES = 64 * 1024 * 1024
_BROADCAST_THRESHOLD = "spark.sql.autoBroadcastJoinThreshold"
BRANCH_PREFIX = "scd2_apply_"  # a branch per apply, dropped when published (or when the apply fails)
# The classification runs without adaptive execution: its join is sized by the code, and re-planning after each of its
# stages cost about 5% of a daily apply. The writes keep it (docs/scd2.md, "Planned whole").
ADAPTIVE = "spark.sql.adaptive.enabled"
_CLOSE = "_close_at"  # when a settled key's current version closes (a new record's time, or its absence's)


def apply_incremental(
    spark: SparkSession,
    catalog: str,
    spec: TableSpec,
    new_records: DataFrame,
    mode: str,
    watermark: int,
    base: int | None,
    window: LogWindow,
    held: DataFrame | None = None,
    removed_records: DataFrame | None = None,
    still_sent: DataFrame | None = None,
    published: Callable[[int, int], dict[str, str]] | None = None,
) -> Applied:
    """Apply the log's new rows (`new_records`, scd2.observations' input). `base`: the table's snapshot the caller
    checked (None: still empty), whose versions are compared and rewritten; the writes publish only if main is still
    there. `watermark`: the latest observation time applied before, in microseconds. `held`: (key, `_batch_id`) of
    records snapshots sent that could not be read. `removed_records`, `still_sent`: for days the log replaced
    (`scd2_window.rewrite`). `published(snapshot id, watermark)`: table properties to set in the commit that
    publishes the apply (the caller's cursor), so they move with main or not at all."""
    from pyspark.sql import functions as F

    key, target = spec.scd2.key, spec.qualified(catalog)
    batches, files = _batches(spec, target, new_records)
    times = [b[2] for b in batches] + ([b[1] for b in batches] if mode == FeedMode.FULL else [])
    watermark_after = max(t for t in (watermark, *times) if t is not None)
    table = (
        spark.table(target) if base is None else spark.read.format("iceberg").option("snapshot-id", base).load(target)
    )
    ranks = file_ranks(spark, files)
    one_batch = len(batches) == 1 and removed_records is None
    present = latest_records(spec, new_records, ranks, by_batch=not one_batch)
    state = state_of(spark, spec, target)
    broadcast_up_to = broadcast_rows(spark)
    cached, notes = [], []
    settled, settled_counts, scope = None, _Settled(), None
    try:
        if one_batch:
            with session_conf(spark, ADAPTIVE, "false"):
                settled = _settle(spec, table, state, present, mode, watermark, batches[0], held).cache()
                cached.append(settled)
                settled_counts = _Settled.of(settled)
            notes.append(settled_counts.note())
            in_scope = settled_counts.deep
            if in_scope:
                # Materialized without its lineage: every plan below joins it, and a cached frame would carry its
                # whole plan (the classification's) into each of them, for Spark to plan again and again.
                scope = settled.where(F.col("_kind") == "deep").select(key).localCheckpoint()
                scope = F.broadcast(scope) if in_scope <= broadcast_up_to else scope
        else:
            in_scope = None  # every key the new rows name
        rewritten = None
        if in_scope != 0:
            looked_at, seen = table, present
            if scope is not None:  # the keys' versions, and their latest records picked again from their rows only
                looked_at = table.join(scope, key, "left_semi")
                seen = latest_records(spec, new_records.join(scope, key, "left_semi"), ranks)
            args = (mode, watermark, window, batches, held, removed_records, still_sent)
            rewritten = rewrite(spark, spec, looked_at, state, seen, new_records, *args)
            gained = f"{len(batches)} new batch(es)" if not one_batch else "the rest"
            if removed_records is not None:
                gone = removed_records.select("_batch_id").distinct().count()
                gained = f"{gained} replacing {gone} removed one(s)"
            if rewritten is None:
                notes.append(f"{gained}: every observation already implied by the versions")
            else:
                cached.extend(rewritten.cached)
                notes.append(f"{gained}: {rewritten.reason}")
        method = Scd2Method.CURRENT if in_scope == 0 else Scd2Method.WINDOW
        delta, counts = (None, {}) if rewritten is None else _delta(spark, spec, target, rewritten)
        if delta is not None:
            cached.append(delta)
        opens, closes = settled_counts.new, settled_counts.changed + settled_counts.vanished
        reason = "; ".join(notes)
        if not (opens or closes or counts):
            return Applied(Scd2Result(target, 0, 0, 0, None, method, reason), watermark_after)
        versions = _new_versions(new_records, spec, settled, settled_counts, broadcast_up_to) if opens else None
        staged = None
        if closes:  # the MERGE only deletes the versions it closes: their ended copies are appended with the new ones
            current = F.col("_current_from")
            # By the key alone: a key has at most one current version, and a join by one number (Spark hashes it
            # into an array when keys are dense) is what the MERGE and the copies' join spend their time in.
            staged = settled.where(current.isNotNull() & F.col(_CLOSE).isNotNull()).select(key, _CLOSE)
            closed = _closed_copies(spec, table, staged, closes <= broadcast_up_to)
            versions = closed if versions is None else versions.unionByName(closed)
        inserted, updated, deleted = (counts.get(action, 0) for action in ("insert", "update", "delete"))
        if inserted:  # appended with the other new rows, so the rewrite's MERGE only matches (`write_delta`)
            added = delta.where(F.col("_action") == "insert").select(*spec.column_names)
            versions = added if versions is None else versions.unionByName(added)
        properties = None if published is None else lambda snapshot: published(snapshot, watermark_after)
        rewritten_rows = delta if updated or deleted else None
        properties_set = _publish(
            spark, spec, target, base, staged, closes <= broadcast_up_to, versions, rewritten_rows, properties
        )
        result = Scd2Result(
            target, opens + inserted, closes + updated, deleted, current_snapshot_id(spark, target), method, reason
        )
        return Applied(result, watermark_after, properties_set)
    finally:
        for frame in cached:
            frame.unpersist()


def _batches(spec: TableSpec, target: str, records: DataFrame) -> tuple[list[tuple], list[str]]:
    """((`_batch_id`, snapshot micros, latest sequence micros) of each batch in `records`, their files): one job,
    which also refuses records without a key (`refuse_keyless`)."""
    from pyspark.sql import functions as F

    # Grouped by file too, not collecting a set of them: a hash aggregate, where a set of paths per batch hashed
    # every record's path into a Java set.
    rows = (
        records.groupBy("_batch_id", F.unix_micros("_snapshot_at").alias("_snapshot"), "_source_file")
        .agg(
            F.max(F.unix_micros(spec.scd2.sequence)).alias("_latest"),
            F.count_if(F.col(spec.scd2.key).isNull()).alias("_keyless"),
        )
        .collect()
    )
    refuse_keyless(spec, target, sum(r["_keyless"] for r in rows), [r["_source_file"] for r in rows if r["_keyless"]])
    latest: dict[tuple, int | None] = {}
    for r in rows:
        batch = (r["_batch_id"], r["_snapshot"])
        latest[batch] = max((t for t in (latest.get(batch), r["_latest"]) if t is not None), default=None)
    return [(*batch, at) for batch, at in latest.items()], sorted({r["_source_file"] for r in rows})


def refuse_keyless(spec: TableSpec, target: str, keyless: int, files: list[str]) -> None:
    """Stop before writing when records have no key: every join here matches keys by plain equality, which never
    matches NULL, so they would vanish from the history unseen. `files`: where they came from."""
    if keyless:
        shown = sorted(set(files))
        where = ", ".join(shown[:3]) + (f" and {len(shown) - 3} more file(s)" if len(shown) > 3 else "")
        raise ValueError(
            f"{keyless} record(s) new in the log have no {spec.scd2.key} (from {where}): {target} needs one per record"
        )


@dataclasses.dataclass(frozen=True)
class _Settled:
    """How many keys of one batch the current versions settled: `new` open a version (`changed` of them close one
    too), `vanished` close one; `deep` need the window; `shared`: keys that open one and had several records."""

    new: int = 0
    changed: int = 0
    vanished: int = 0
    deep: int = 0
    shared: int = 0

    @classmethod
    def of(cls, settled: DataFrame) -> _Settled:
        from pyspark.sql import functions as F

        kind = F.col("_kind")
        row = settled.agg(
            F.count_if(kind == "new").alias("new"),
            F.count_if((kind == "new") & F.col("_current_from").isNotNull()).alias("changed"),
            F.count_if(kind == "vanished").alias("vanished"),
            F.count_if(kind == "deep").alias("deep"),
            F.count_if((kind == "new") & ~F.col("_alone")).alias("shared"),
        ).first()
        return cls(**row.asDict())

    def note(self) -> str:
        return (
            f"one new batch, compared with the current versions: {self.new - self.changed} new key(s), "
            f"{self.changed} changed, {self.vanished} vanished"
            + (f", {self.deep} they cannot settle" if self.deep else "")
        )


def _settle(spec: TableSpec, table, state, present, mode: str, watermark: int, batch: tuple, held=None):
    """Each key of one batch (`present`: its latest record per key) against its version alive at the batch's time
    (a full snapshot's; a change list's latest record's), by the state hash: `new` (a record after the watermark
    that changes the key), `vanished` (absent from a snapshot after the watermark), `deep` (what only the key's
    other versions can place), or nothing to do (dropped). Every record has a key (`refuse_keyless`)."""
    from pyspark.sql import functions as F

    key = spec.scd2.key
    batch_id, at_micros = batch[0], batch[1] if mode == FeedMode.FULL else batch[2]
    at = F.timestamp_micros(F.lit(at_micros))
    # The versions alive at that time (the current ones, and for a late day those closed since), read from the
    # current partition and the months since; and any current one starting after everything applied (another
    # writer's), which no record may close. Only the key, the interval, the state's hash and the other compared
    # columns are read.
    if at_micros > watermark:  # every closed version ended by the watermark: the current ones are all alive
        alive = table.where(CURRENT_VERSIONS)
    else:  # literals, not functions of the columns: Spark hands Iceberg only plain comparisons to prune files by
        starts, ends = F.col("_valid_from"), F.col("_valid_to")
        others_start = ends.isNull() & (starts > F.timestamp_micros(F.lit(watermark)))
        alive = table.where(((ends.isNull() | (ends > at)) & (starts <= at)) | others_start)
    alive = alive.select(key, "_valid_from", "_valid_to", state.alias("_state"), others_hash(spec).alias("_others"))
    how = "full_outer" if mode == FeedMode.FULL else "left"
    joined = present.alias("n").join(alive.alias("c"), F.col(f"n.{key}") == F.col(f"c.{key}"), how)
    seen, is_alive, is_current = (
        F.col(f"n.{key}").isNotNull(),
        F.col(f"c.{key}").isNotNull(),
        F.col(f"c.{key}").isNotNull() & F.col("c._valid_to").isNull(),
    )
    if held is not None and mode == FeedMode.FULL:
        held_here = held.where(F.col("_batch_id") == batch_id).select(F.col(key).alias("_held_key")).distinct()
        joined = joined.join(held_here, F.col(f"c.{key}") == F.col("_held_key"), "left")
        vanished = ~seen & F.col("_held_key").isNull()
    else:
        vanished = ~seen & F.lit(mode == FeedMode.FULL)
    seq, since = F.col("n._seq"), F.col("c._valid_from")
    covered = (seq >= since) & (F.col("c._valid_to").isNull() | (seq < F.col("c._valid_to")))
    # At the version's very start the record ties with the one that started it: a repeat only if the two agree on
    # every compared column (else either may start it, as the window decides).
    inside = (seq > since) | (F.col("n._others") == F.col("c._others"))
    after = F.unix_micros(seq) > watermark
    kind = (
        # No hash to compare, or a start after everything applied (another writer's): for the versions to place.
        F.when(is_alive & (F.col("c._state").isNull() | (F.unix_micros(since) > watermark)), "deep")
        .when(seen & covered & (F.col("n._state") == F.col("c._state")) & inside, "repeat")
        .when(seen & after & (is_current | ~is_alive), "new")
        .when(seen, "deep")  # at or before the watermark: it may split or precede a version
        .when(vanished & is_current & F.lit(at_micros > watermark), "vanished")
        .when(vanished & (since < at), "deep")  # a late snapshot's absence inside a version
    )
    return joined.select(
        F.coalesce(F.col(f"n.{key}"), F.col(f"c.{key}")).alias(key),
        kind.alias("_kind"),
        F.when(is_current, since).alias("_current_from"),
        F.when(kind == "new", seq).when(kind == "vanished", at).alias(_CLOSE),
        *[F.col(f"n.{c}").alias(c) for c in PICKED],
        F.col("n._alone").alias("_alone"),
    ).where(F.col("_kind").isin("new", "vanished", "deep"))


def _delta(spark: SparkSession, spec: TableSpec, target: str, rewritten):
    """The rewrite's rows to insert, update and delete (cached, None when none) and how many of each."""
    delta, counts = scd2_delta(spark, spec, target, rewritten.versions, rewritten.keys, rewritten.existing)
    if counts:
        return delta, counts
    delta.unpersist()
    return None, {}


def _new_versions(records, spec: TableSpec, settled, counts: _Settled, broadcast_up_to: int):
    """The records that open new versions, as table rows: the batch joined with the picks of the keys that open
    one, by the key alone unless such a key had several records (then NULL-safe on every part of the pick, as the
    window compares them, and one per key: records may tie on the pick)."""
    from pyspark.sql import functions as F

    scd2 = spec.scd2
    picks = settled.where(F.col("_kind") == "new").select(
        F.col(scd2.key).alias("_p_key"), *[F.col(c).alias(f"_p{c}") for c in PICKED]
    )
    if counts.new <= broadcast_up_to:
        picks = F.broadcast(picks)
    batch = records
    on = F.col(scd2.key) == F.col("_p_key")
    if counts.shared:
        batch = (
            records.withColumn("_seq", F.col(scd2.sequence))
            .withColumn("_tie", F.xxhash64(*scd2.tracked))
            .withColumn("_file_hash", F.xxhash64("_source_file"))
        )
        for column in PICKED:
            on = on & F.col(column).eqNullSafe(F.col(f"_p{column}"))
    picked = batch.join(picks, on, "left_semi")
    if counts.shared:  # the recompute keeps one of records tied on the pick; keep one too (either, in both)
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


def _closed_copies(spec: TableSpec, table: DataFrame, staged: DataFrame, broadcast: bool) -> DataFrame:
    """The current versions `staged` closes, as they read at the checked snapshot, ended at their `_close_at`."""
    from pyspark.sql import functions as F

    staged = F.broadcast(staged) if broadcast else staged
    ended = {"_valid_to": F.col(_CLOSE), "_is_current": F.lit(False), "_ingested_at": F.current_timestamp()}
    return (
        table.where(CURRENT_VERSIONS)
        .join(staged, spec.scd2.key)
        .select(*[ended.get(c, F.col(c)).alias(c) for c in spec.column_names])
    )


def _publish(
    spark, spec: TableSpec, target: str, base: int | None, staged, broadcast: bool, rows, delta, properties=None
) -> bool:
    """Delete the versions `staged` closes (None: none; a MERGE of matched rows, which may `broadcast` them),
    update and delete the rewritten keys' rows (`delta`'s, a MERGE of matched rows too) and append `rows` (the
    closed copies, the new versions and the rewrite's inserts), on a branch made at `base`, then fast-forward main
    to it: all at once, and only if nobody committed to main since `base`, which the classification read;
    `properties(snapshot id)` are set in that same commit. Returns whether they were. (An empty table has no
    snapshot to branch from: written in place, the cursor not yet moved, so a failure between the writes is
    recomputed.)"""

    def write(into: str) -> None:
        if staged is not None:
            _delete_closed(spark, spec, into, staged, broadcast)
        if delta is not None:
            with _broadcasting(spark, DELTA_BROADCAST_BYTES):
                write_delta(spark, spec, into, delta, inserts=False)
        if rows is not None:
            rows.writeTo(into).append()

    if base is None:
        write(target)
        return False
    branch = f"{BRANCH_PREFIX}{uuid.uuid4().hex[:12]}"
    iceberg_table(spark, target).manageSnapshots().createBranch(branch, base).commit()
    try:
        write(f"{target}.branch_{branch}")
        table = iceberg_table(spark, target)
        transaction = table.newTransaction()
        # Fails if main moved since `base` (a commit conflict: the attempt reruns on fresh state).
        transaction.manageSnapshots().fastForwardBranch("main", branch).removeBranch(branch).commit()
        if properties is not None:
            update = transaction.updateProperties()
            for name, value in properties(table.refs().get(branch).snapshotId()).items():
                update.set(name, value)
            update.commit()
        transaction.commitTransaction()
        return properties is not None
    finally:
        table = iceberg_table(spark, target)
        if table.refs().get(branch) is not None:
            table.manageSnapshots().removeBranch(branch).commit()


def _delete_closed(spark: SparkSession, spec: TableSpec, target: str, staged: DataFrame, broadcast: bool) -> None:
    key = spec.scd2.key
    view = f"scd2_closes_{uuid.uuid4().hex[:12]}"
    staged.createOrReplaceTempView(view)
    try:
        # `_valid_to IS NULL` keeps the scan to the current versions' partition; deleting only, the MERGE reads the
        # key and interval and writes deletion vectors, no rows.
        with _broadcasting(spark, BROADCAST_BYTES if broadcast else 0):
            spark.sql(
                f"""
                MERGE INTO {target} t
                USING {view} s
                ON t.{key} = s.{key} AND t.{CURRENT_VERSIONS}
                WHEN MATCHED THEN DELETE
                """
            )
    finally:
        spark.catalog.dropTempView(view)


def _broadcasting(spark: SparkSession, up_to_bytes: int):
    """Spark broadcasts a MERGE's source estimated under `up_to_bytes` (0: the session's threshold decides): the
    MERGE then reads the table once and shuffles none of it. MERGE ignores broadcast hints (apache/iceberg#10891),
    but Spark broadcasts a side estimated under the threshold (never the target)."""
    if not up_to_bytes:
        return contextlib.nullcontext()
    return session_conf(spark, _BROADCAST_THRESHOLD, str(up_to_bytes))
