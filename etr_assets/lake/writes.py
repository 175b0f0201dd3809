"""Atomic writes to Iceberg tables, and what each commit did (read back from the snapshot it made)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid

from etr_assets.lake.session import java_class

WRITE_ID_PROPERTY = "etr.write-id"


@dataclasses.dataclass(frozen=True)
class CommitInfo:
    """One Iceberg snapshot's figures, as its summary records them."""

    table: str
    snapshot_id: int | None
    operation: str | None
    added_files: int = 0
    removed_files: int = 0
    added_records: int = 0
    removed_records: int = 0
    total_records: int = 0
    total_files: int = 0
    total_bytes: int = 0

    @classmethod
    def from_summary(cls, table: str, snapshot_id: int, operation: str, summary: dict[str, str]) -> CommitInfo:
        def num(key: str) -> int:
            return int(summary.get(key, 0) or 0)

        return cls(
            table=table,
            snapshot_id=snapshot_id,
            operation=operation,
            added_files=num("added-data-files"),
            removed_files=num("deleted-data-files"),
            added_records=num("added-records"),
            removed_records=num("deleted-records"),
            total_records=num("total-records"),
            total_files=num("total-data-files"),
            total_bytes=num("total-files-size"),
        )


def iceberg_table(spark, qualified: str):
    """The table's Iceberg (Java) object, refreshed to its latest metadata: what a commit recorded, read without a
    Spark job (a metadata-table query is a job, and the suite runs thousands of them)."""
    table = java_class(spark, "org.apache.iceberg.spark.Spark3Util").loadIcebergTable(spark._jsparkSession, qualified)
    table.refresh()  # the session's catalog may cache the table object; another writer may have committed since
    return table


def current_snapshot_id(spark, qualified: str) -> int | None:
    """The snapshot `main` points at now (from the table's refs, not the newest commit: a rollback makes an older
    snapshot current, and a concurrent writer's commit may be newer than ours); None for a table never written."""
    main = iceberg_table(spark, qualified).refs().get("main")
    return None if main is None else int(main.snapshotId())


def _commit_info(spark, qualified: str, snapshot) -> CommitInfo:
    # The snapshot as one JSON text: reading its summary map entry by entry is two py4j round trips an entry.
    fields = json.loads(java_class(spark, "org.apache.iceberg.SnapshotParser").toJson(snapshot))
    summary = fields.get("summary", {})
    return CommitInfo.from_summary(qualified, int(fields["snapshot-id"]), summary.get("operation"), summary)


def commit_of(spark, qualified: str, snapshot_id: int) -> CommitInfo:
    """The figures of one snapshot of `qualified`, by id."""
    snapshot = iceberg_table(spark, qualified).snapshot(int(snapshot_id))
    if snapshot is None:
        return CommitInfo(table=qualified, snapshot_id=None, operation=None)
    return _commit_info(spark, qualified, snapshot)


def new_write_id() -> str:
    return uuid.uuid4().hex


def find_commit(spark, qualified: str, write_id: str) -> CommitInfo:
    """The snapshot our write made, found by the write id we stamped on it (safe under concurrent writers): newest
    first, from the head of every branch back through its ancestors (ours is at or near a head)."""
    table = iceberg_table(spark, qualified)
    seen = set()
    for ref in table.refs().values():
        snapshot = table.snapshot(ref.snapshotId())
        while snapshot is not None and snapshot.snapshotId() not in seen:
            seen.add(snapshot.snapshotId())
            if snapshot.summary().get(WRITE_ID_PROPERTY) == write_id:
                return _commit_info(spark, qualified, snapshot)
            parent = snapshot.parentId()
            snapshot = None if parent is None else table.snapshot(parent)
    return CommitInfo(table=qualified, snapshot_id=None, operation=None)


def replace_days(
    spark, qualified: str, df, date_column: str, days: list[dt.date], branch: str | None = None
) -> CommitInfo:
    """Atomically replace every row of `days` with `df` (one snapshot; empty `df` empties those days).

    An explicit overwrite filter rather than dynamic partition overwrite: a day that now has no rows is
    emptied too, and Iceberg refuses (before committing) any row of `df` outside those days. With `branch`,
    the write goes to that branch (Iceberg's `<table>.branch_<name>` identifier; no session-wide setting).
    """
    from pyspark.sql import functions as F

    write_id = new_write_id()
    condition = F.col(date_column).isin(sorted(days))
    target = f"{qualified}.branch_{branch}" if branch else qualified
    df.writeTo(target).option(f"snapshot-property.{WRITE_ID_PROPERTY}", write_id).overwrite(condition)
    return find_commit(spark, qualified, write_id)


def append(spark, qualified: str, df) -> CommitInfo:
    write_id = new_write_id()
    df.writeTo(qualified).option(f"snapshot-property.{WRITE_ID_PROPERTY}", write_id).append()
    return find_commit(spark, qualified, write_id)


def table_location(spark, qualified: str) -> str:
    for row in spark.sql(f"DESCRIBE TABLE EXTENDED {qualified}").collect():
        if row["col_name"] == "Location":
            return row["data_type"]
    return ""
