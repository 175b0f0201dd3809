"""SCD2 history kept in line with its observation log (bronze), by one apply path: only what the log gained since the
cursor (a table property: the log snapshot applied, the table's snapshot after it, the watermark) is read; the
current versions settle each key of one new batch, the window rewrites the rest from their first change on
(`scd2_recompute.rewrite`), and one fast-forward of main publishes it all with the cursor. An erasure, a rollback or an
expired cursor snapshot recomputes every key instead, and says why (docs/scd2.md)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from enum import StrEnum
from typing import TYPE_CHECKING

from etr_assets.lake.feeds import FeedMode
from etr_assets.lake.frames import conform, temp_view
from etr_assets.lake.incremental import changed_only_by, days_changed_by, lineage_since, snapshot_in_metadata
from etr_assets.lake.retry import run_with_retries
from etr_assets.lake.scd2_recompute import (
    PICKED,
    Action,
    Batch,
    Gained,
    ObservationLog,
    broadcast_rows,
    difference,
    file_ranks,
    latest_records,
    others_hash,
    recompute,
    rewrite,
    state_of,
    write_difference,
)
from etr_assets.lake.specs import CURRENT_VERSIONS, CURSOR_PROPERTY, STATE_HASH_COLUMN, TableSpec
from etr_assets.lake.writes import current_snapshot_id, iceberg_table

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame, SparkSession

BRANCH_PREFIX = "scd2_apply_"  # a branch per apply, dropped when published (or when the apply fails)
# The log's new rows are one day's files, small enough that Iceberg would read them all in one task; a task per file
# (or row group) lets every core hash and sort them (the daily path reads them twice).
NEW_ROWS_SPLIT_BYTES = 1 << 20
ONE_DAY = dt.timedelta(days=1)
# The classification is planned whole, in a session of its own: its join is sized by the code, and adaptive execution
# re-planning after each of its stages cost about 5% of a daily apply (docs/scd2.md, "Planned whole").
ADAPTIVE = "spark.sql.adaptive.enabled"
# The rewrite's MERGE (it updates, so Spark drops broadcast hints) broadcasts its rows estimated under this, in a
# session of its own: a late day's rewrite at a million keys is tens of thousands of rows.
BROADCAST_THRESHOLD, DELTA_BROADCAST_BYTES = "spark.sql.autoBroadcastJoinThreshold", 64 * 1024 * 1024
_CLOSE = "_close_at"  # when a settled key's current version closes (a new record's time, or its absence's)


class Scd2Method(StrEnum):
    """How an SCD2 apply was done: every observation recomputed; incrementally, with some keys rewritten from their
    first change on (the window), or every key settled by the current versions; or nothing to do."""

    RECOMPUTE = "recompute"
    WINDOW = "window"
    CURRENT = "current-rows"
    UNCHANGED = "unchanged"


class Kind(StrEnum):
    """What the current versions make of a key of one new batch (its `_kind`): a version it opens, a version its
    absence closes, a record they already hold, or one only the key's other versions can place (the window's)."""

    NEW = "new"
    VANISHED = "vanished"
    REPEAT = "repeat"
    DEEP = "deep"


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
class Applied:  # an incremental apply done
    result: Scd2Result
    watermark: int | None  # after it
    cursor_set: bool = False  # whether the commit that published it set the cursor too


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


def apply_observations(
    spark: SparkSession, catalog: str, spec: TableSpec, records, mode: FeedMode, keys=None, held=None
) -> Scd2Result:
    """The whole step, without a log: observations -> history -> one MERGE (`scd2_recompute.recompute`), recomputed
    from fresh data if it loses to a concurrent commit. `keys`: which keys to recompute (default: all); `held`: keys
    full snapshots sent but could not be read."""
    target = spec.qualified(catalog)
    attempt = lambda: _result(spark, target, recompute(spark, catalog, spec, records, mode, keys, held))
    return _with_retries(spark, target, attempt)


def apply_log(
    spark: SparkSession, catalog: str, spec: TableSpec, log: ObservationLog, full_refresh: bool = False
) -> Scd2Result:
    """Bring `spec`'s SCD2 table in line with every observation in `log` (module docstring). A recompute covers every
    key of the log and of the table, whatever the mode."""
    target = spec.qualified(catalog)

    def attempt() -> Scd2Result:
        cursor = read_cursor(spark, target)
        head, base, reloaded, why = _can_extend(spark, target, log, cursor, full_refresh)
        if why is not None:
            return _recompute_log(spark, catalog, spec, log, head, why)
        if head == cursor.log_snapshot_id:
            unchanged = f"log {log.table} unchanged since snapshot {head}"
            return Scd2Result(target, 0, 0, 0, None, Scd2Method.UNCHANGED, unchanged)
        applied = apply_incremental(spark, catalog, spec, log, _gained(spark, log, cursor, head, base, reloaded))
        result = applied.result
        if reloaded:
            days = ", ".join(str(day) for day in sorted(reloaded))
            result = dataclasses.replace(result, reason=f"{result.reason} (reloaded day(s): {days})")
        if not applied.cursor_set:
            _advance(spark, target, result, head, applied.watermark)
        return result

    return _with_retries(spark, target, attempt)


def _recompute_log(spark, catalog: str, spec: TableSpec, log: ObservationLog, head: int | None, why: str):
    """Every key of the log (at `head`) and of the table recomputed from every observation, the cursor after it."""
    from pyspark.sql import functions as F

    target, scd2 = spec.qualified(catalog), spec.scd2
    rows = spark.read.format("iceberg").option("snapshot-id", head).load(log.table) if head else spark.table(log.table)
    records = log.to_records(rows)
    full = log.mode == FeedMode.FULL
    times = [F.max(F.unix_micros(F.col(scd2.sequence)))] + ([F.max(F.unix_micros("_snapshot_at"))] if full else [])
    keyless = F.col(scd2.key).isNull()
    *found, count, files = records.agg(
        *times, F.count_if(keyless), F.collect_set(F.when(keyless, F.col("_source_file")))
    ).first()
    refuse_keyless(spec, target, count, files)
    watermark = max((v for v in found if v is not None), default=None)
    # The table's keys too: a key whose every observation the log lost (a reloaded day, an erasure) has none.
    keys = records.select(scd2.key).unionByName(spark.table(target).select(scd2.key)).distinct()
    counts = recompute(spark, catalog, spec, records, log.mode, keys, log.held)
    result = _result(spark, target, counts, Scd2Method.RECOMPUTE, why)
    if head is not None:
        _advance(spark, target, result, head, watermark)
    return result


def _can_extend(
    spark, target: str, log: ObservationLog, cursor: Scd2Cursor | None, full_refresh: bool
) -> tuple[int | None, int | None, frozenset, str | None]:
    """(the log's current snapshot, the table's snapshot this checked, the days the log replaced since the cursor,
    None if history can be extended from the log's new and replaced rows, else why not)."""
    from pyiceberg.table.snapshots import Operation  # here: pyiceberg.table costs the definitions' load a second

    head = current_snapshot_id(spark, log.table)
    none = frozenset()
    if full_refresh:
        return head, None, none, "full refresh requested"
    if cursor is None:
        return head, None, none, f"no cursor on {target} (first build, or built before cursors)"
    if cursor.watermark_micros is None:
        return head, None, none, f"the cursor on {target} has no watermark"
    base = None
    if cursor.table_snapshot_id is not None:  # compaction since is fine; any other commit is someone else's write
        base, written = changed_only_by(spark, target, cursor.table_snapshot_id, (Operation.REPLACE,))
        if written:
            return head, base, none, f"{target} was written since the cursor's snapshot: {written}"
    elif current_snapshot_id(spark, target) is not None:
        return head, None, none, f"{target} was written since the cursor (it was empty then)"
    if head == cursor.log_snapshot_id:
        return head, base, none, None
    return head, base, *_replaced_days(spark, log, head, cursor.log_snapshot_id)


def _replaced_days(spark, log: ObservationLog, head: int, since: int) -> tuple[frozenset, str | None]:
    """(the days whose rows overwrites since `since` replaced, None) when every snapshot since is an append, a
    compaction or an overwrite of whole known days that `since` can still be read at; else (empty, why not)."""
    from pyiceberg.table.snapshots import Operation

    table, name, day = iceberg_table(spark, log.table), log.table, log.snapshot_day
    if (chain := lineage_since(snapshot_in_metadata(table), head, since)) is None:
        return frozenset(), (
            f"snapshot {since} of {name} is not an ancestor of its current one (rolled back, or expired)"
        )
    others = [(sid, op) for sid, op in chain if op not in (Operation.APPEND, Operation.REPLACE, Operation.OVERWRITE)]
    if others:  # a delete snapshot is an erasure: it must reach every version, which only the recompute rewrites
        sid, op = others[-1]
        return frozenset(), f"snapshot {sid} ({op.value}) of {name} changed rows in place (an erasure, or a rewrite)"
    if not (overwrites := [sid for sid, op in chain if op == Operation.OVERWRITE]):
        return frozenset(), None
    if table.snapshot(since) is None:  # expired: the replaced rows can no longer be read by time travel
        return frozenset(), f"snapshot {since} of {name} expired, so the rows its overwrites replaced are gone"
    if day is None:
        return frozenset(), (
            f"snapshot {overwrites[-1]} (overwrite) of {name} changed rows in place, and the log has no day column "
            "to read the replaced rows by"
        )
    days = set().union(*days_changed_by(spark, name, overwrites, day).values())
    if None in days or not days:
        return frozenset(), (
            f"snapshot {overwrites[-1]} (overwrite) of {name} changed rows in place outside known {day} partitions"
        )
    return frozenset(days), None


def _gained(spark, log: ObservationLog, cursor: Scd2Cursor, head: int, base: int | None, reloaded) -> Gained:
    """The log's rows since the cursor's snapshot, as SCD2 records; for the `reloaded` days, their rows at the head
    (the new ones) and at the cursor's snapshot (the removed ones), and the rows of the days beside them."""
    from pyspark.sql import functions as F

    appended = (
        spark.read.format("iceberg")
        .option("start-snapshot-id", cursor.log_snapshot_id)
        .option("end-snapshot-id", head)
        .option("split-size", str(NEW_ROWS_SPLIT_BYTES))
        .load(log.table)
    )
    if not reloaded:
        return Gained(log.to_records(appended), head, base, cursor.watermark_micros)
    # Appends to other days are still read by the append scan (the overwrites deleted none of theirs).
    in_days = F.col(log.snapshot_day).isin(sorted(reloaded))
    at_head = spark.read.format("iceberg").option("snapshot-id", head).load(log.table)
    at_cursor = spark.read.format("iceberg").option("snapshot-id", cursor.log_snapshot_id).load(log.table)

    # The days beside a reloaded one re-send most of its records (a full snapshot's unchanged keys): a removed record
    # they still send changes nothing.
    beside = sorted({d + offset for d in reloaded for offset in (-ONE_DAY, ONE_DAY)} - reloaded)
    return Gained(
        log.to_records(appended.where(~in_days).unionByName(at_head.where(in_days))),
        head,
        base,
        cursor.watermark_micros,
        removed=log.to_records(at_cursor.where(in_days)),
        still_sent=log.to_records(at_head.where(F.col(log.snapshot_day).isin(beside))),
    )


def apply_incremental(spark: SparkSession, catalog: str, spec: TableSpec, log: ObservationLog, gained: Gained):
    """Apply what the log gained (module docstring). The current versions cannot settle a record older than its key's
    current version, an absence inside history, or several batches or a reloaded day at once: the window does."""
    from pyspark.sql import functions as F

    key, target = spec.scd2.key, spec.qualified(catalog)
    batches, files = _batches(spec, target, gained.records)
    times = [b.latest for b in batches] + ([b.snapshot for b in batches] if log.mode == FeedMode.FULL else [])
    watermark_after = max(t for t in (gained.watermark, *times) if t is not None)
    table = (
        spark.table(target)
        if gained.base is None
        else spark.read.format("iceberg").option("snapshot-id", gained.base).load(target)
    )
    ranks = file_ranks(spark, files)
    one_batch = len(batches) == 1 and gained.removed is None
    present = latest_records(spec, gained.records, ranks, by_batch=not one_batch)
    state = state_of(spark, spec, target)
    broadcast_up_to = broadcast_rows(spark)
    cached, notes = [], []
    settled, counts, scope = None, _Settled(), None
    try:
        if one_batch:
            settled = _settle(spec, log, table, state, present, gained.watermark, batches[0])
            planned = _planned_with(spark, ADAPTIVE, "false", settled)  # cached for `settled` too
            cached.append(planned.cache())
            counts = _Settled.of(planned)
            notes.append(counts.note())
            if in_scope := counts.deep:
                # Materialized without its lineage: every plan below joins it, and a cached frame would carry its
                # whole plan (the classification's) into each of them, for Spark to plan again and again.
                scope = settled.where(F.col("_kind") == Kind.DEEP).select(key).localCheckpoint()
                scope = F.broadcast(scope) if in_scope <= broadcast_up_to else scope
        else:
            in_scope = None  # every key the new rows name
        rewritten = None
        if in_scope != 0:
            looked_at, seen = table, present
            if scope is not None:  # the keys' versions, and their latest records picked again from their rows only
                looked_at = table.join(scope, key, "left_semi")
                seen = latest_records(spec, gained.records.join(scope, key, "left_semi"), ranks)
            rewritten = rewrite(spec, log, gained, looked_at, state, seen, batches)
            what = f"{len(batches)} new batch(es)" if not one_batch else "the rest"
            if gained.removed is not None:
                what = f"{what} replacing {gained.removed.select('_batch_id').distinct().count()} removed one(s)"
            if rewritten is None:
                notes.append(f"{what}: every observation already implied by the versions")
            else:
                cached.extend(rewritten.cached)
                notes.append(f"{what}: {rewritten.reason}")
        method = Scd2Method.CURRENT if in_scope == 0 else Scd2Method.WINDOW
        delta, delta_counts = None, {}
        if rewritten is not None:
            delta, delta_counts = difference(
                spark, spec, target, rewritten.versions, rewritten.keys, rewritten.existing
            )
            cached.append(delta)
        opens, closes = counts.new, counts.changed + counts.vanished
        reason = "; ".join(notes)
        if not (opens or closes or delta_counts):
            return Applied(Scd2Result(target, 0, 0, 0, None, method, reason), watermark_after)
        versions = _new_versions(gained.records, spec, settled, counts, broadcast_up_to) if opens else None
        staged = None
        if closes:  # the MERGE only deletes the versions it closes: their ended copies are appended with the new ones
            # By the key alone: a key has at most one current version, and a join by one number (Spark hashes it
            # into an array when keys are dense) is what the MERGE and the copies' join spend their time in.
            staged = settled.where(F.col("_current_from").isNotNull() & F.col(_CLOSE).isNotNull()).select(key, _CLOSE)
            # Their ended copies, as the current versions read at the checked snapshot.
            ended = {"_valid_to": F.col(_CLOSE), "_is_current": F.lit(False), "_ingested_at": F.current_timestamp()}
            closed = (
                table.where(CURRENT_VERSIONS)
                .join(F.broadcast(staged) if closes <= broadcast_up_to else staged, key)
                .select(*[ended.get(c, F.col(c)).alias(c) for c in spec.column_names])
            )
            versions = closed if versions is None else versions.unionByName(closed)
        inserted, updated, deleted = (delta_counts.get(a, 0) for a in (Action.INSERT, Action.UPDATE, Action.DELETE))
        if inserted:  # appended with the other new rows, so the rewrite's MERGE only matches
            added = delta.where(F.col("_action") == Action.INSERT).select(*spec.column_names)
            versions = added if versions is None else versions.unionByName(added)

        def write(into: str) -> None:
            if staged is not None:
                _delete_closed(spark, spec, into, staged, closes <= broadcast_up_to)
            if updated or deleted:
                merging = _planned_with(spark, BROADCAST_THRESHOLD, str(DELTA_BROADCAST_BYTES), delta)
                write_difference(merging.sparkSession, spec, into, merging, inserts=False)
            if versions is not None:
                versions.writeTo(into).append()

        cursor_set = _publish(spark, target, gained, write, watermark_after)
        snapshot = current_snapshot_id(spark, target)
        result = Scd2Result(target, opens + inserted, closes + updated, deleted, snapshot, method, reason)
        return Applied(result, watermark_after, cursor_set)
    finally:
        for frame in cached:
            frame.unpersist()


def _batches(spec: TableSpec, target: str, records: DataFrame) -> tuple[list[Batch], list[str]]:
    """(each batch in `records`, their files): one job, which also refuses records without a key
    (`refuse_keyless`)."""
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
    files = sorted({r["_source_file"] for r in rows})
    return [Batch(batch_id, at, last) for (batch_id, at), last in latest.items()], files


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
            F.count_if(kind == Kind.NEW).alias("new"),
            F.count_if((kind == Kind.NEW) & F.col("_current_from").isNotNull()).alias("changed"),
            F.count_if(kind == Kind.VANISHED).alias("vanished"),
            F.count_if(kind == Kind.DEEP).alias("deep"),
            F.count_if((kind == Kind.NEW) & ~F.col("_alone")).alias("shared"),
        ).first()
        return cls(**row.asDict())

    def note(self) -> str:
        return (
            f"one new batch, compared with the current versions: {self.new - self.changed} new key(s), "
            f"{self.changed} changed, {self.vanished} vanished"
            + (f", {self.deep} they cannot settle" if self.deep else "")
        )


def _settle(spec: TableSpec, log: ObservationLog, table, state, present, watermark: int, batch: Batch):
    """Each key of one batch (`present`: its latest record per key) against its version alive at the batch's time
    (a full snapshot's; a change list's latest record's), by the state hash, as a `Kind` (a repeat is dropped). Every
    record has a key (`refuse_keyless`)."""
    from pyspark.sql import functions as F

    key, full = spec.scd2.key, log.mode == FeedMode.FULL
    at_micros = batch.snapshot if full else batch.latest
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
    joined = present.alias("n").join(
        alive.alias("c"), F.col(f"n.{key}") == F.col(f"c.{key}"), "full_outer" if full else "left"
    )
    seen, is_alive = F.col(f"n.{key}").isNotNull(), F.col(f"c.{key}").isNotNull()
    is_current = is_alive & F.col("c._valid_to").isNull()
    if log.held is not None and full:
        held_here = log.held.where(F.col("_batch_id") == batch.id).select(F.col(key).alias("_held_key")).distinct()
        joined = joined.join(held_here, F.col(f"c.{key}") == F.col("_held_key"), "left")
        vanished = ~seen & F.col("_held_key").isNull()
    else:
        vanished = ~seen & F.lit(full)
    seq, since = F.col("n._seq"), F.col("c._valid_from")
    covered = (seq >= since) & (F.col("c._valid_to").isNull() | (seq < F.col("c._valid_to")))
    # At the version's very start the record ties with the one that started it: a repeat only if the two agree on
    # every compared column (else either may start it, as the window decides).
    inside = (seq > since) | (F.col("n._others") == F.col("c._others"))
    after = F.unix_micros(seq) > watermark
    kind = (
        # No hash to compare, or a start after everything applied (another writer's): for the versions to place.
        F.when(is_alive & (F.col("c._state").isNull() | (F.unix_micros(since) > watermark)), Kind.DEEP)
        .when(seen & covered & (F.col("n._state") == F.col("c._state")) & inside, Kind.REPEAT)
        .when(seen & after & (is_current | ~is_alive), Kind.NEW)
        .when(seen, Kind.DEEP)  # at or before the watermark: it may split or precede a version
        .when(vanished & is_current & F.lit(at_micros > watermark), Kind.VANISHED)
        .when(vanished & (since < at), Kind.DEEP)  # a late snapshot's absence inside a version
    )
    return joined.select(
        F.coalesce(F.col(f"n.{key}"), F.col(f"c.{key}")).alias(key),
        kind.alias("_kind"),
        F.when(is_current, since).alias("_current_from"),
        F.when(kind == Kind.NEW, seq).when(kind == Kind.VANISHED, at).alias(_CLOSE),
        *[F.col(f"n.{c}").alias(c) for c in PICKED],
        F.col("n._alone").alias("_alone"),
    ).where(F.col("_kind").isin(Kind.NEW, Kind.VANISHED, Kind.DEEP))


def _new_versions(records, spec: TableSpec, settled, counts: _Settled, broadcast_up_to: int):
    """The records that open new versions, as table rows: the batch joined with the picks of the keys that open
    one, by the key alone unless such a key had several records (then NULL-safe on every part of the pick, as the
    window compares them, and one per key: records may tie on the pick)."""
    from pyspark.sql import functions as F

    scd2 = spec.scd2
    picks = settled.where(F.col("_kind") == Kind.NEW).select(
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


def _publish(spark, target: str, gained: Gained, write: Callable[[str], None], watermark: int) -> bool:
    """`write(into)` on a branch made at `gained.base`, then main fast-forwarded to it with the cursor set in the same
    commit: all at once, and only if nobody committed to main since `gained.base`, which the classification read.
    Returns whether the cursor was set. (An empty table has no snapshot to branch from: written in place, the cursor
    not yet moved, so a failure between the writes is recomputed.)"""
    if gained.base is None:
        write(target)
        return False
    branch = f"{BRANCH_PREFIX}{uuid.uuid4().hex[:12]}"
    iceberg_table(spark, target).manageSnapshots().createBranch(branch, gained.base).commit()
    try:
        write(f"{target}.branch_{branch}")
        table = iceberg_table(spark, target)
        transaction = table.newTransaction()
        # Fails if main moved since the base (a commit conflict: the attempt reruns on fresh state).
        transaction.manageSnapshots().fastForwardBranch("main", branch).removeBranch(branch).commit()
        cursor = Scd2Cursor(table.refs().get(branch).snapshotId(), gained.head, watermark)
        transaction.updateProperties().set(CURSOR_PROPERTY, cursor.to_json()).commit()
        transaction.commitTransaction()
        return True
    finally:
        table = iceberg_table(spark, target)
        if table.refs().get(branch) is not None:
            table.manageSnapshots().removeBranch(branch).commit()


def _delete_closed(spark: SparkSession, spec: TableSpec, target: str, staged: DataFrame, broadcast: bool) -> None:
    from pyspark.sql import functions as F

    key = spec.scd2.key
    # An unconditional delete is the one MERGE that keeps a broadcast hint (any other adds a cardinality check that
    # drops it): broadcast, the MERGE reads the table once and shuffles none of it.
    with temp_view(spark, F.broadcast(staged) if broadcast else staged, "scd2_closes") as view:
        # `_valid_to IS NULL` keeps the scan to the current versions' partition; deleting only, the MERGE reads the
        # key and interval and writes deletion vectors, no rows.
        spark.sql(
            f"""
            MERGE INTO {target} t
            USING {view} s
            ON t.{key} = s.{key} AND t.{CURRENT_VERSIONS}
            WHEN MATCHED THEN DELETE
            """
        )


def _advance(spark: SparkSession, target: str, result: Scd2Result, log_snapshot: int, watermark: int | None) -> None:
    table_snapshot = result.snapshot_id if result.changed else current_snapshot_id(spark, target)
    write_cursor(spark, target, Scd2Cursor(table_snapshot, log_snapshot, watermark))


def _result(spark, target: str, counts: dict, method=Scd2Method.RECOMPUTE, reason: str = "") -> Scd2Result:
    """The result of a recompute's `counts` (`Action` -> rows; empty when nothing changed, and nothing committed)."""
    inserted, updated, deleted = (counts.get(a, 0) for a in (Action.INSERT, Action.UPDATE, Action.DELETE))
    snapshot = current_snapshot_id(spark, target) if counts else None
    return Scd2Result(target, inserted, updated, deleted, snapshot, method, reason)


def _with_retries(spark: SparkSession, target: str, attempt):
    """Re-run an SCD2 attempt that lost its commit to a concurrent writer, on fresh table state."""
    # Any other commit to the table conflicts with a keyed MERGE, so allow several rounds of waiting; the Dagster
    # layer also gives each SCD2 table a pool so its writers queue instead of racing.
    refresh = lambda attempt, error: spark.sql(f"REFRESH TABLE {target}")
    return run_with_retries(attempt, f"SCD2 merge into {target}", attempts=8, max_delay=30.0, on_retry=refresh)


def _planned_with(spark: SparkSession, key: str, value: str, frame: DataFrame) -> DataFrame:
    """`frame` planned and run by the caller's session cloned (settings, catalogs, views) with `key` set: a step gets
    the setting it needs while the caller's session, which other work in the process may be using, never changes.
    The plan is the same, so a cache either session makes serves both."""
    from pyspark.sql import DataFrame, SparkSession

    clone = spark._jsparkSession.cloneSession()
    clone.conf().set(key, value)
    session = SparkSession(spark.sparkContext, clone)
    plan = frame._jdf.queryExecution().analyzed()
    return DataFrame(session._jvm.org.apache.spark.sql.Dataset.ofRows(session._jsparkSession, plan), session)
