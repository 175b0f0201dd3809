"""Atomic writes to Iceberg tables, and what each commit did (read back from the snapshot it made)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING

from etr_assets.lake.metadata import PositionDeleteFile, RowCount, row_count
from etr_assets.lake.session import java_class, java_elements

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

WRITE_ID_PROPERTY = "etr.write-id"
EPOCH = dt.date(1970, 1, 1)  # what Iceberg's day() partition values count from


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


def iceberg_table(spark: SparkSession, qualified: str, refresh: bool = True):
    """The table's Iceberg (Java) object, refreshed to its latest metadata: what a commit recorded, read without a
    Spark job (a metadata-table query is a job, and the suite runs thousands of them)."""
    table = java_class(spark, "org.apache.iceberg.spark.Spark3Util").loadIcebergTable(spark._jsparkSession, qualified)
    if refresh:  # the session's catalog may cache the table object; another writer may have committed since
        table.refresh()
    return table


def files_of_days(spark: SparkSession, table, column: str, first: dt.date, last: dt.date) -> list:
    """The scan tasks (one per live data file, with the deletes to apply to it) of `table` (`iceberg_table`) in the
    days of `column` from `first` to `last`, planned from the manifests: no data file is read."""
    expressions = java_class(spark, "org.apache.iceberg.expressions.Expressions")
    day = expressions.day(column)
    within = getattr(expressions, "and")(
        expressions.greaterThanOrEqual(day, (first - EPOCH).days), expressions.lessThanOrEqual(day, (last - EPOCH).days)
    )
    tasks = table.newScan().filter(within).planFiles()
    try:
        return list(java_elements(tasks))
    finally:
        tasks.close()


def rows_where_null(spark: SparkSession, qualified: str, column: str) -> int | None:
    """The live rows of table `qualified` whose `column` is null, from the manifests of the files a scan for them
    plans, no data file read: exact where each such file holds only such rows (its null count is its row count, as in
    a partition of `column`) and each of its deletes deletes rows of that file alone (a deletion vector, a file-scoped
    position delete file); None otherwise (a file of an older layout, an equality delete, no column stats)."""
    expressions = java_class(spark, "org.apache.iceberg.expressions.Expressions")
    referenced = java_class(spark, "org.apache.iceberg.util.ContentFileUtil").referencedDataFileLocation
    table, rows = iceberg_table(spark, qualified), 0
    field_id = table.schema().findField(column).fieldId()
    tasks = table.newScan().includeColumnStats().filter(expressions.isNull(column)).planFiles()
    try:
        for task in java_elements(tasks):
            data = task.file()
            nulls = data.nullValueCounts()
            if nulls is None or nulls.get(field_id) != data.recordCount():
                return None
            rows += data.recordCount()
            for delete in java_elements(task.deletes()):
                if str(delete.content()) != "POSITION_DELETES" or referenced(delete) != data.location():
                    return None
                rows -= delete.recordCount()
    finally:
        tasks.close()
    return rows


def day_field_positions(table, column: str) -> dict[int, int | None]:
    """Per partition spec id of `table`, where its day(`column`) field is among the spec's fields (None: nowhere, as
    in a spec from before the table was partitioned by day)."""
    specs, positions = table.specs(), {}
    for spec_id in java_elements(specs.keySet()):
        spec = specs.get(spec_id)
        source, fields = spec.schema().findField(column).fieldId(), java_elements(spec.fields())
        at = (i for i, f in enumerate(fields) if f.sourceId() == source and str(f.transform()) == "day")
        positions[int(spec_id)] = next(at, None)
    return positions


def current_snapshot_id(spark: SparkSession, qualified: str) -> int | None:
    """The snapshot `main` points at now (from the table's refs, not the newest commit: a rollback makes an older
    snapshot current, and a concurrent writer's commit may be newer than ours); None for a table never written."""
    main = iceberg_table(spark, qualified).refs().get("main")
    return None if main is None else int(main.snapshotId())


class JavaSnapshotFiles:
    """`metadata.SnapshotFiles` of a snapshot through the Iceberg Java API of the session's JVM: the manifests a
    commit just wrote, without another catalog client. Read only when the snapshot holds position deletes."""

    def __init__(self, spark: SparkSession, table, snapshot) -> None:
        self._spark, self._table, self._snapshot = spark, table, snapshot

    def _live_files(self, deletes: bool):
        manifest_files = java_class(self._spark, "org.apache.iceberg.ManifestFiles")
        io, specs = self._table.io(), self._table.specs()
        manifests = self._snapshot.deleteManifests(io) if deletes else self._snapshot.dataManifests(io)
        for manifest in java_elements(manifests):
            reader = (manifest_files.readDeleteManifest if deletes else manifest_files.read)(manifest, io, specs)
            try:
                yield from java_elements(reader)  # live entries only
            finally:
                reader.close()

    def position_delete_files(self) -> Iterable[PositionDeleteFile]:
        content_files = java_class(self._spark, "org.apache.iceberg.util.ContentFileUtil")
        for file in self._live_files(deletes=True):
            if file.content().name() == "POSITION_DELETES":
                vector = content_files.isDV(file)  # what the row count needs of a deletion vector: nothing
                path = None if vector else content_files.referencedDataFileLocation(file)
                yield PositionDeleteFile(int(file.recordCount()), vector, None if path is None else str(path))

    def data_file_paths(self) -> Iterable[str]:
        return (str(file.location()) for file in self._live_files(deletes=False))


def _commit_info(spark: SparkSession, table, qualified: str, snapshot) -> CommitInfo:
    # The snapshot as one JSON text: reading its summary map entry by entry is two py4j round trips an entry.
    fields = json.loads(java_class(spark, "org.apache.iceberg.SnapshotParser").toJson(snapshot))
    summary = fields.get("summary", {})

    num = lambda key: int(summary.get(key, 0) or 0)
    return CommitInfo(
        table=qualified,
        snapshot_id=int(fields["snapshot-id"]),
        operation=summary.get("operation"),
        added_files=num("added-data-files"),
        removed_files=num("deleted-data-files"),
        added_records=num("added-records"),
        removed_records=num("deleted-records"),
        table_rows=row_count(summary, JavaSnapshotFiles(spark, table, snapshot)),
        total_files=num("total-data-files"),
        total_bytes=num("total-files-size"),
    )


def commit_of(spark: SparkSession, qualified: str, snapshot_id: int) -> CommitInfo:
    """The figures of one snapshot of `qualified`, by id."""
    table = iceberg_table(spark, qualified)
    if (snapshot := table.snapshot(int(snapshot_id))) is None:
        return CommitInfo(table=qualified, snapshot_id=None, operation=None)
    return _commit_info(spark, table, qualified, snapshot)


def _write(spark: SparkSession, qualified: str, df: DataFrame, target: str, options: dict[str, str] | None, action):
    """`action(writer)` writes `df` to `target` stamped with a new write id; the commit it made, found by that id
    (safe under concurrent writers): newest first, from the head of every branch back through its ancestors."""
    write_id = uuid.uuid4().hex
    action(df.writeTo(target).options(**(options or {})).option(f"snapshot-property.{WRITE_ID_PROPERTY}", write_id))
    table = iceberg_table(spark, qualified)
    seen = set()
    for ref in java_elements(table.refs().entrySet()):
        snapshot = table.snapshot(ref.getValue().snapshotId())
        while snapshot is not None and snapshot.snapshotId() not in seen:
            seen.add(snapshot.snapshotId())
            if snapshot.summary().get(WRITE_ID_PROPERTY) == write_id:
                return _commit_info(spark, table, qualified, snapshot)
            parent = snapshot.parentId()
            snapshot = None if parent is None else table.snapshot(parent)
    return CommitInfo(table=qualified, snapshot_id=None, operation=None)


def replace_days(
    spark: SparkSession,
    qualified: str,
    df: DataFrame,
    date_column: str,
    days: list[dt.date],
    branch: str | None = None,
    options: dict[str, str] | None = None,
) -> CommitInfo:
    """Atomically replace every row of `days` with `df` (an empty `df` empties them) by an overwrite filter Iceberg
    does not check rows against: `df` must hold rows of `days` only. `options`: of this write only."""
    from pyspark.sql import functions as F

    target = f"{qualified}.branch_{branch}" if branch else qualified
    return _write(spark, qualified, df, target, options, lambda w: w.overwrite(F.col(date_column).isin(sorted(days))))


def append(spark: SparkSession, qualified: str, df: DataFrame, options: dict[str, str] | None = None) -> CommitInfo:
    return _write(spark, qualified, df, qualified, options, lambda w: w.append())


def table_location(spark: SparkSession, qualified: str) -> str:
    # Not DESCRIBE TABLE EXTENDED, a command Spark plans: every layer run asks. A table's location never changes.
    return str(iceberg_table(spark, qualified, refresh=False).location())
