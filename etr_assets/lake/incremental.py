"""Incremental reads of a day-partitioned table: per day, only what was appended since a cursor snapshot; a day a
non-append snapshot changed is read whole, as Iceberg's incremental scan skips those (docs/lifecycle.md). A day's
cursor lives in the downstream table itself: each commit that rebuilds days is stamped with them and with the
upstream snapshot it read (`cursor_stamp`), so a lake goes on incrementally whatever orchestrates it."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING

from etr_assets.lake.writes import EPOCH, day_field_positions, iceberg_table

if TYPE_CHECKING:
    from pyiceberg.table.snapshots import Operation
    from pyspark.sql import SparkSession


class ReadMode(StrEnum):
    """How a downstream day is read: not at all, only the rows appended upstream, or whole."""

    UNCHANGED = "unchanged"
    APPENDED = "incremental"
    WHOLE_DAY = "full"


@dataclasses.dataclass(frozen=True)
class Cursor:  # what a downstream day was last built from
    upstream_snapshot_id: int
    downstream_snapshot_id: int | None = None  # the downstream snapshot after


# Snapshot properties of a downstream commit that rebuilt days: which days, and the upstream snapshot it read them at.
DAYS_BUILT, READ_FROM = "etr.days-built", "etr.read-from-snapshot-id"


def cursor_stamp(upstream_snapshot_id: int | None, days: list[dt.date]) -> dict[str, str]:
    """The write options that stamp a commit rebuilding `days` from `upstream_snapshot_id` (its days' next cursor)."""
    if upstream_snapshot_id is None:  # read from an empty upstream: no cursor (the next build reads whole)
        return {}
    built = ",".join(sorted(day.isoformat() for day in days))
    return {f"snapshot-property.{DAYS_BUILT}": built, f"snapshot-property.{READ_FROM}": str(upstream_snapshot_id)}


def stamped_cursors(spark: SparkSession, downstream: str, days: list[dt.date]) -> dict[dt.date, Cursor | None]:
    """Per day, the cursor of the newest commit in main's history that rebuilt it (None: no kept commit did), read
    from metadata; after a rollback, from the snapshot main went back to, whose stamps describe what it holds."""
    found: dict[dt.date, Cursor] = {}
    if not spark.catalog.tableExists(downstream):
        return dict.fromkeys(days)
    table = iceberg_table(spark, downstream)
    main, wanted = table.refs().get("main"), set(days)
    snapshot = None if main is None else table.snapshot(main.snapshotId())
    while snapshot is not None and len(found) < len(wanted):
        summary = snapshot.summary()
        if (read_from := summary.get(READ_FROM)) is not None:
            for text in str(summary.get(DAYS_BUILT) or "").split(","):
                if text and (day := dt.date.fromisoformat(text)) in wanted and day not in found:
                    found[day] = Cursor(int(read_from), int(snapshot.snapshotId()))
        parent = snapshot.parentId()
        snapshot = None if parent is None else table.snapshot(parent)
    return {day: found.get(day) for day in days}


@dataclasses.dataclass(frozen=True)
class DayRead:
    day: dt.date
    mode: ReadMode
    reason: str
    since: int | None = None  # exclusive start snapshot of an incremental read


@dataclasses.dataclass(frozen=True)
class ReadPlan:
    upstream_snapshot_id: int | None  # every read is pinned to this snapshot: the next cursor
    days: tuple[DayRead, ...]

    def of(self, mode: ReadMode) -> list[dt.date]:
        return [d.day for d in self.days if d.mode == mode]

    def summary(self) -> str:
        counts = {m: len(self.of(m)) for m in (ReadMode.APPENDED, ReadMode.WHOLE_DAY, ReadMode.UNCHANGED)}
        return ", ".join(f"{n} {m}" for m, n in counts.items() if n) or "nothing to read"

    def table(self) -> str:
        """Markdown, one line per day, for the run's metadata."""
        lines = ["| day | read | why |", "|---|---|---|"]
        return "\n".join(lines + [f"| {d.day} | {d.mode} | {d.reason} |" for d in self.days])


def lineage_since(
    parent_of: Callable[[int], tuple[int | None, Operation] | None], head: int, since: int
) -> list[tuple[int, Operation]] | None:
    """The snapshots after `since` up to `head` (newest first), or None if `since` is not an ancestor of `head`.
    `parent_of(snapshot id)`: (parent id, operation), None for a snapshot not kept."""
    chain, current = [], head
    while current is not None and current != since:
        if (found := parent_of(current)) is None:
            return None  # history expired below this point
        parent, operation = found
        chain.append((current, operation))
        current = parent
    return chain if current == since else None


def snapshot_in_metadata(table) -> Callable[[int], tuple[int | None, Operation] | None]:
    """`lineage_since`'s lookup on the table's own metadata: a few Java calls, not a Spark job over its snapshots."""
    from pyiceberg.table.snapshots import Operation  # here: pyiceberg.table costs the definitions' load a second

    def parent_of(snapshot_id: int) -> tuple[int | None, Operation] | None:
        if (snapshot := table.snapshot(snapshot_id)) is None:
            return None
        parent = snapshot.parentId()
        return (None if parent is None else int(parent)), Operation(snapshot.operation())

    return parent_of


def _head_and_lineage(spark: SparkSession, qualified: str):
    """(the snapshot `main` points at, None if none; `lineage_since`'s lookup on the table's metadata)."""
    table = iceberg_table(spark, qualified)
    main = table.refs().get("main")
    return (None if main is None else int(main.snapshotId())), snapshot_in_metadata(table)


def changed_only_by(
    spark: SparkSession, qualified: str, since: int, operations: tuple[Operation, ...]
) -> tuple[int | None, str | None]:
    """(current snapshot, None) if every snapshot after `since` is one of `operations` (e.g. append and replace:
    an append scan from `since` sees every change); else (current snapshot, why not)."""
    head, parent_of = _head_and_lineage(spark, qualified)
    if head is None:
        return None, f"{qualified} has no snapshot"
    if (chain := lineage_since(parent_of, head, since)) is None:
        return head, f"snapshot {since} of {qualified} is not an ancestor of its current one (rolled back, or expired)"
    if others := [(sid, op) for sid, op in chain if op not in operations]:
        return head, f"snapshot {others[-1][0]} ({others[-1][1].value}) of {qualified} changed rows in place"
    return head, None


def days_changed_by(
    spark: SparkSession, qualified: str, snapshot_ids: list[int], day_column: str
) -> dict[int, set[dt.date | None]]:
    """Per snapshot, the days whose files it added or deleted (metadata only); None: unknown. Read from each
    snapshot's own manifests: the `all_entries` table reads every manifest the table keeps."""
    from etr_assets.lake.session import java_class, java_elements

    changed: dict[int, set[dt.date | None]] = {sid: set() for sid in snapshot_ids}
    if not snapshot_ids:
        return changed
    table = iceberg_table(spark, qualified)
    io, position = table.io(), day_field_positions(table, day_column)  # old files may lack the day field
    integer = java_class(spark, "java.lang.Class").forName("java.lang.Integer")
    for sid in snapshot_ids:
        if (snapshot := table.snapshot(int(sid))) is None:  # no longer kept: nothing known of it (nor its entries)
            continue
        for files in ("addedDataFiles", "removedDataFiles", "addedDeleteFiles", "removedDeleteFiles"):
            for file in java_elements(getattr(snapshot, files)(io)):
                at = position.get(int(file.specId()))
                value = None if at is None else file.partition().get(at, integer)
                changed[sid].add(None if value is None else EPOCH + dt.timedelta(days=int(value)))
    return changed


def plan_reads(
    spark: SparkSession,
    upstream: str,
    downstream: str,
    day_column: str,
    cursors: dict[dt.date, Cursor | None],
    full_refresh: bool = False,
) -> ReadPlan:
    """Decide, per day, how little of `upstream` a rebuild of that day in `downstream` must read."""
    from pyiceberg.table.snapshots import Operation

    head, upstream_parent = _head_and_lineage(spark, upstream)
    downstream_head, downstream_parent = (
        _head_and_lineage(spark, downstream) if spark.catalog.tableExists(downstream) else (None, None)
    )
    changed: dict[int, set[dt.date | None]] = {}  # per snapshot, the days it touched (fetched once per chain)

    def touched(chain: list[tuple[int, Operation]], day: dt.date) -> list[tuple[int, Operation]]:
        missing = [sid for sid, op in chain if op != Operation.REPLACE and sid not in changed]
        changed.update(days_changed_by(spark, upstream, missing, day_column))
        return [(sid, op) for sid, op in chain if op != Operation.REPLACE and ({day, None} & changed[sid])]

    def decide(day: dt.date, cursor: Cursor | None) -> DayRead:
        whole = functools.partial(DayRead, day, ReadMode.WHOLE_DAY)
        if full_refresh:
            return whole("full refresh requested")
        if cursor is None:
            return whole(f"no cursor: no kept commit of {downstream} rebuilt the day (its first build, or expired)")
        if head is None:
            return whole("upstream table has no snapshot")
        built, since = cursor.downstream_snapshot_id, cursor.upstream_snapshot_id
        if built is not None and lineage_since(downstream_parent, downstream_head, built) is None:
            return whole(f"{downstream} no longer descends from snapshot {built} (rolled back, or history expired)")
        if (chain := lineage_since(upstream_parent, head, since)) is None:
            return whole(f"cursor snapshot {since} is not in the upstream history (expired or rolled back)")
        touching = touched(chain, day)  # compaction (replace) snapshots change no rows
        if rewrites := [(sid, op) for sid, op in touching if op != Operation.APPEND]:
            return whole(f"snapshot {rewrites[0][0]} ({rewrites[0][1].value}) rewrote rows of the day")
        if not touching:
            return DayRead(day, ReadMode.UNCHANGED, f"no snapshot since {since} changed the day")
        return DayRead(day, ReadMode.APPENDED, f"{len(touching)} append snapshot(s) since {since}", since)

    return ReadPlan(head, tuple(decide(day, cursors.get(day)) for day in sorted(cursors)))


def read_plan(spark: SparkSession, upstream: str, plan: ReadPlan, day_column: str):
    """(full-day rows, appended rows): DataFrames of the upstream rows the plan needs, pinned to its snapshot."""
    from pyspark.sql import functions as F

    full, full_days = None, plan.of(ReadMode.WHOLE_DAY)
    if full_days:
        reader = spark.read.format("iceberg")
        if plan.upstream_snapshot_id is not None:  # None: a table with no snapshot yet reads as empty
            reader = reader.option("snapshot-id", plan.upstream_snapshot_id)
        full = reader.load(upstream).where(F.col(day_column).isin(full_days))
    by_cursor: dict[int, list[dt.date]] = {}
    for d in plan.days:
        if d.mode == ReadMode.APPENDED:
            by_cursor.setdefault(d.since, []).append(d.day)
    appended = [
        spark.read.format("iceberg")
        .option("start-snapshot-id", since)
        .option("end-snapshot-id", plan.upstream_snapshot_id)
        .load(upstream)
        .where(F.col(day_column).isin(days))
        for since, days in sorted(by_cursor.items())
    ]
    return full, functools.reduce(lambda a, b: a.unionByName(b), appended) if appended else None
