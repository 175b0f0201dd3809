"""Bookkeeping tables any pipeline on this library keeps about itself: the GDPR audit trail, table changes (rollbacks,
abandoned batches), data-quality metrics and the maintenance log. Each is an append-only log partitioned by day that
keeps every row, and keeps itself small in files without a maintenance run (`record_rows`)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from etr_assets.lake.evolve import ensure_table
from etr_assets.lake.frames import local_frame, spark_schema
from etr_assets.lake.retry import run_with_retries
from etr_assets.lake.specs import MIB, TARGET_FILE_SIZE, Column, TableSpec
from etr_assets.lake.writes import files_of_days, iceberg_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# A day's partition of a bookkeeping table holds at most this many data files: the write that would leave more
# compacts that day into one file, and the first write of a day compacts the day before into one. So a table written
# by every run holds one file per past day and at most this many for the day being written, and a write costs at
# most one rewrite of a day (kilobytes), never of the table.
MAX_FILES_PER_DAY = 8


def _bookkeeping(namespace: str, name: str, description: str, day_column: str, *columns: Column) -> TableSpec:
    """A small append-only table, partitioned by the day of `day_column`."""
    return TableSpec(
        namespace, name, description, columns, (f"days({day_column})",), properties={TARGET_FILE_SIZE: str(8 * MIB)}
    )


# The audit outlives the erasures it records: a keyed hash, never the id, so it is no personal data to erase.
GDPR_ACTIONS = _bookkeeping(
    "audit",
    "gdpr_actions",
    "What each GDPR request did: per table, rows removed, and the proof that nothing is left",
    "executed_at",
    Column("request_id", "string", "Reference of the erasure request", required=True),
    Column("subject_hash", "string", "HMAC-SHA256 of the customer id under the audit key", required=True),
    Column("action", "string", "GDPR_DELETE, GDPR_EXPIRE or GDPR_VERIFY", required=True),
    Column("table_name", "string", "Table or raw-zone location acted on"),
    Column("rows_removed", "bigint", "Rows (or raw records) removed"),
    Column("outcome", "string", "DONE, NOT_FOUND, VERIFIED or FAILED", required=True),
    Column("detail", "string", "Human-readable detail"),
    Column("executed_at", "timestamp", "When the action ran", required=True),
    Column("run_id", "string", "Dagster run that did it"),
)

DATA_QUALITY_METRICS = _bookkeeping(
    "monitoring",
    "data_quality_metrics",
    "Every data-quality figure measured, so trends can be queried",
    "measured_at",
    Column("table_name", "string", "Table measured", required=True),
    Column("partition_key", "string", "Partition measured, if any"),
    Column("metric", "string", "Metric name", required=True),
    Column("value", "double", "Measured value"),
    Column("passed", "boolean", "Whether the check that produced it passed"),
    Column("measured_at", "timestamp", "When it was measured", required=True),
    Column("run_id", "string", "Dagster run that measured it"),
)

TABLE_CHANGES = _bookkeeping(
    "audit",
    "table_changes",
    "Operations that changed a table outside the pipeline (rollbacks), with who asked and why",
    "executed_at",
    Column("table_name", "string", "Table changed", required=True),
    Column("action", "string", "ROLLBACK or ABANDON_BATCH (a raw batch closed without loading)", required=True),
    Column("from_snapshot_id", "string", "Snapshot current before"),
    Column("to_snapshot_id", "string", "Snapshot current after", required=True),
    Column("reason", "string", "Why, as given by the person who asked", required=True),
    Column("run_id", "string", "Dagster run that did it"),
    Column("executed_at", "timestamp", "When", required=True),
)

TABLE_MAINTENANCE_LOG = _bookkeeping(
    "monitoring",
    "table_maintenance_log",
    "Each maintenance of a table (compaction, manifests, snapshot expiry, orphan files): health before "
    "and after, and what each step removed",
    "started_at",
    Column("table_name", "string", "Table maintained", required=True),
    Column("run_id", "string", "Dagster run that did it"),
    Column("started_at", "timestamp", "When maintenance of this table began", required=True),
    Column("finished_at", "timestamp", "When it ended", required=True),
    Column("status_before", "string", "Health before: OK, WARN or ERROR", required=True),
    Column("status_after", "string", "Health after: OK, WARN or ERROR", required=True),
    Column("reasons_before", "string", "Thresholds passed before, if any"),
    Column("data_files_before", "bigint", "Live data files before"),
    Column("data_files_after", "bigint", "Live data files after"),
    Column("small_files_before", "bigint", "Data files under 75% of the target size, before"),
    Column("small_files_after", "bigint", "Data files under 75% of the target size, after"),
    Column("delete_files_before", "bigint", "Live delete files before"),
    Column("delete_files_after", "bigint", "Live delete files after"),
    Column("snapshots_before", "bigint", "Snapshots kept in metadata before"),
    Column("snapshots_after", "bigint", "Snapshots kept in metadata after"),
    Column("manifests_before", "bigint", "Manifests of the current snapshot before"),
    Column("manifests_after", "bigint", "Manifests of the current snapshot after"),
    Column("metadata_bytes_before", "bigint", "Size of the current metadata.json before"),
    Column("metadata_bytes_after", "bigint", "Size of the current metadata.json after"),
    Column("data_bytes_before", "bigint", "Bytes of live data files before"),
    Column("data_bytes_after", "bigint", "Bytes of live data files after"),
    Column("rewritten_data_files", "bigint", "Data files compaction replaced"),
    Column("added_data_files", "bigint", "Data files compaction wrote"),
    Column("removed_delete_files", "bigint", "Delete files compaction applied and removed"),
    Column("rewritten_manifests", "bigint", "Manifests rewrite_manifests replaced"),
    Column("added_manifests", "bigint", "Manifests rewrite_manifests wrote"),
    Column("expired_snapshots", "bigint", "Snapshots expire_snapshots removed"),
    Column("expired_files", "bigint", "Files expiry deleted (data, delete, manifest and manifest-list files)"),
    Column("orphan_files_removed", "bigint", "Files no snapshot referenced, older than the orphan age, deleted"),
    Column("seconds", "double", "How long maintenance of this table took"),
    Column("audit_branches_dropped", "string", "Write-audit-publish branches older than the grace period, dropped"),
)


def record_rows(spark: SparkSession, catalog: str, spec: TableSpec, rows: list[dict]) -> None:
    """Append `rows` to the bookkeeping table `spec` (created or evolved first): one small file, one commit; then
    compact, each into one file, a written day holding more than MAX_FILES_PER_DAY files and the day before a written
    day holding more than one. Compaction keeps every row and commits a `replace` apart, which concurrent appends do
    not conflict with (a compaction that loses to another is re-run, and finds the day compacted)."""
    if not rows:
        return
    ensure_table(spark, catalog, spec)
    local_frame(spark, rows, spark_schema(spec.columns)).writeTo(spec.qualified(catalog)).append()
    if (column := spec.day_column) is None:
        return
    written = {day for row in rows if (day := _day_of(row.get(column))) is not None}
    for day in sorted(written | {day - dt.timedelta(days=1) for day in written}):
        most = MAX_FILES_PER_DAY if day in written else 1  # the day before a written day is done with
        if len(files_of_days(spark, iceberg_table(spark, spec.qualified(catalog)), column, day, day)) > most:
            compact_day(spark, catalog, spec, column, day)


def _day_of(value) -> dt.date | None:
    if isinstance(value, dt.datetime):  # naive: UTC, as the session reads it
        return (value.astimezone(dt.UTC) if value.tzinfo else value).date()
    return value if isinstance(value, dt.date) else None


def compact_day(spark: SparkSession, catalog: str, spec: TableSpec, column: str, day: dt.date) -> None:
    """rewrite_data_files on `day`'s partition alone: its small files become one (every row kept)."""
    start, end = (f"TIMESTAMP '{moment:%Y-%m-%d 00:00:00}+00:00'" for moment in (day, day + dt.timedelta(days=1)))
    where = f"{column} >= {start} AND {column} < {end}"
    call = (
        f"CALL {catalog}.system.rewrite_data_files(table => '{spec.identifier}', where => \"{where}\", "
        f"options => map('min-input-files', '2', 'target-file-size-bytes', '{spec.target_file_size_bytes}'))"
    )
    run_with_retries(lambda: spark.sql(call).collect(), f"compacting {day} of {spec.qualified(catalog)}")
