"""Atomic writes to Iceberg tables, and what each commit did (read back from the snapshot it made)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from collections.abc import Iterable

from etr_assets.lake.metadata import PositionDeleteFile, RowCount, SnapshotFiles, row_count
from etr_assets.lake.session import java_class

WRITE_ID_PROPERTY = "etr.write-id"


@dataclasses.dataclass(frozen=True)
class CommitInfo:
    """One Iceberg snapshot's figures, as its summary records them; `table_rows` is `metadata.row_count`'s."""

    table: str
    snapshot_id: int | None
    operation: str | None
    added_files: int = 0
    removed_files: int = 0
    added_records: int = 0
    removed_records: int = 0
    table_rows: RowCount = RowCount(0)
    total_files: int = 0
    total_bytes: int = 0

    @classmethod
    def from_summary(
        cls, table: str, snapshot_id: int, operation: str, summary: dict[str, str], files: SnapshotFiles
    ) -> CommitInfo:
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
            table_rows=row_count(summary, files),
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


class JavaSnapshotFiles:
    """`metadata.SnapshotFiles` of a snapshot through the Iceberg Java API of the session's JVM: the manifests a
    commit just wrote, without another catalog client. Read only when the snapshot holds position deletes."""

    def __init__(self, spark, table, snapshot) -> None:
        self._spark, self._table, self._snapshot = spark, table, snapshot

    def position_delete_files(self) -> Iterable[PositionDeleteFile]:
        manifests = java_class(self._spark, "org.apache.iceberg.ManifestFiles")
        content_files = java_class(self._spark, "org.apache.iceberg.util.ContentFileUtil")
        io, specs = self._table.io(), self._table.specs()
        for manifest in self._snapshot.deleteManifests(io):
            reader = manifests.readDeleteManifest(manifest, io, specs)
            try:
                for file in reader.iterator():  # live entries only
                    if file.content().name() != "POSITION_DELETES":
                        continue
                    if content_files.isDV(file):  # what the row count needs of a deletion vector: nothing
                        yield PositionDeleteFile(int(file.recordCount()), True, None)
                        continue
                    referenced = content_files.referencedDataFileLocation(file)
                    yield PositionDeleteFile(
                        int(file.recordCount()), False, None if referenced is None else str(referenced)
                    )
            finally:
                reader.close()

    def data_file_paths(self) -> Iterable[str]:
        manifests = java_class(self._spark, "org.apache.iceberg.ManifestFiles")
        io, specs = self._table.io(), self._table.specs()
        for manifest in self._snapshot.dataManifests(io):
            reader = manifests.read(manifest, io, specs)
            try:
                for file in reader.iterator():  # live entries only
                    yield str(file.location())
            finally:
                reader.close()


def _commit_info(spark, table, qualified: str, snapshot) -> CommitInfo:
    # The snapshot as one JSON text: reading its summary map entry by entry is two py4j round trips an entry.
    fields = json.loads(java_class(spark, "org.apache.iceberg.SnapshotParser").toJson(snapshot))
    summary = fields.get("summary", {})
    files = JavaSnapshotFiles(spark, table, snapshot)
    return CommitInfo.from_summary(qualified, int(fields["snapshot-id"]), summary.get("operation"), summary, files)


def commit_of(spark, qualified: str, snapshot_id: int) -> CommitInfo:
    """The figures of one snapshot of `qualified`, by id."""
    table = iceberg_table(spark, qualified)
    snapshot = table.snapshot(int(snapshot_id))
    if snapshot is None:
        return CommitInfo(table=qualified, snapshot_id=None, operation=None)
    return _commit_info(spark, table, qualified, snapshot)


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
                return _commit_info(spark, table, qualified, snapshot)
            parent = snapshot.parentId()
            snapshot = None if parent is None else table.snapshot(parent)
    return CommitInfo(table=qualified, snapshot_id=None, operation=None)


def replace_days(
    spark,
    qualified: str,
    df,
    date_column: str,
    days: list[dt.date],
    branch: str | None = None,
    options: dict[str, str] | None = None,
) -> CommitInfo:
    """Atomically replace every row of `days` with `df` (one snapshot; empty `df` empties those days).

    An explicit overwrite filter, so a day that now has no rows is emptied too. Iceberg does not check the rows
    against it: `df` must hold rows of `days` only. `branch` writes to `<table>.branch_<name>` (no session-wide
    setting); `options` are Iceberg write options of this write only.
    """
    from pyspark.sql import functions as F

    write_id = new_write_id()
    condition = F.col(date_column).isin(sorted(days))
    target = f"{qualified}.branch_{branch}" if branch else qualified
    df.writeTo(target).options(**(options or {})).option(f"snapshot-property.{WRITE_ID_PROPERTY}", write_id).overwrite(
        condition
    )
    return find_commit(spark, qualified, write_id)


def append(spark, qualified: str, df, options: dict[str, str] | None = None) -> CommitInfo:
    write_id = new_write_id()
    df.writeTo(qualified).options(**(options or {})).option(f"snapshot-property.{WRITE_ID_PROPERTY}", write_id).append()
    return find_commit(spark, qualified, write_id)


def table_location(spark, qualified: str) -> str:
    for row in spark.sql(f"DESCRIBE TABLE EXTENDED {qualified}").collect():
        if row["col_name"] == "Location":
            return row["data_type"]
    return ""
