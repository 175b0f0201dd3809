"""Several writes to one table published as one: made on a branch at the snapshot they were computed from, then main
fast-forwarded to it. A reader sees all of them or none; a writer that committed to main since that snapshot makes
the fast-forward fail as a commit conflict (the caller's retry reruns on fresh state).

The SCD2 writes use it to split a MERGE that would also insert (Spark must keep every source row of such a MERGE:
an outer join that shuffles and sorts the whole table) into a MERGE of matched rows, whose small source Spark
broadcasts, and an append of the new rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from etr_assets.lake.side_by_side import run_side_by_side
from etr_assets.lake.writes import iceberg_table

BRANCH_PREFIX = "scd2_apply_"  # a branch per publish, dropped when published (or when a write fails)
# A matched-only MERGE's source sent whole to every task: narrow or few rows, tens of MB at most.
BROADCAST_ROWS = 2_000_000
# Spark's estimate of such a source (cached, every column): what the join threshold must admit to broadcast it.
BROADCAST_BYTES = 512 * 1024 * 1024
_BROADCAST_THRESHOLD = "spark.sql.autoBroadcastJoinThreshold"


def publish_on_branch(
    spark, target: str, base: int | None, writes: list[Callable[[str], None]], together: bool = False
) -> None:
    """Run each write (given the table name to write to) on a branch made at `base`, then fast-forward main to it.
    `together`: the writes at once (each in a thread). `base` None (the table is still empty): straight to main."""
    if base is None:
        for write in writes:
            write(target)
        return
    branch = f"{BRANCH_PREFIX}{uuid.uuid4().hex[:12]}"
    on_branch = f"{target}.branch_{branch}"
    iceberg_table(spark, target).manageSnapshots().createBranch(branch, base).commit()
    try:
        if together:
            run_side_by_side([lambda write=write: write(on_branch) for write in writes])
        else:
            for write in writes:
                write(on_branch)
        # Fails if main moved since `base` (a commit conflict: the caller's attempt reruns on fresh state).
        iceberg_table(spark, target).manageSnapshots().fastForwardBranch("main", branch).removeBranch(branch).commit()
    finally:
        table = iceberg_table(spark, target)
        if table.refs().get(branch) is not None:
            table.manageSnapshots().removeBranch(branch).commit()


def merge_matched(spark, source, rows: int, statement: Callable[[str], str]) -> None:
    """Run the MERGE `statement(view)` whose source is `source` (registered as `view`), with matched clauses only,
    broadcasting the source when it has at most BROADCAST_ROWS rows: the MERGE then reads the table once and shuffles
    none of its rows (a sort-merge join shuffles the whole table)."""
    view = f"merge_source_{uuid.uuid4().hex[:12]}"
    # MERGE ignores broadcast hints (apache/iceberg#10891), but Spark broadcasts a join side estimated under this
    # threshold, and MERGE's target is never a candidate (its scan reports no size).
    threshold = spark.conf.get(_BROADCAST_THRESHOLD) if rows <= BROADCAST_ROWS else None
    source.createOrReplaceTempView(view)
    try:
        if threshold is not None:
            spark.conf.set(_BROADCAST_THRESHOLD, str(BROADCAST_BYTES))
        spark.sql(statement(view))
    finally:
        if threshold is not None:  # the session's own value back
            spark.conf.set(_BROADCAST_THRESHOLD, threshold)
        spark.catalog.dropTempView(view)
