"""Tables the pipeline keeps about itself: the GDPR audit trail and data-quality metrics."""

from etr_assets.lake.specs import MIB, Column, TableSpec

# The audit trail outlives the erasure it records, so it holds no raw customer id: a keyed hash lets an
# auditor confirm "was customer X erased?" without the table itself being personal data to erase.
GDPR_ACTIONS = TableSpec(
    namespace="audit",
    name="gdpr_actions",
    description="What each GDPR request did: per table, rows removed, and the proof that nothing is left",
    columns=(
        Column("request_id", "string", "Reference of the erasure request", required=True),
        Column("subject_hash", "string", "HMAC-SHA256 of the customer id under the audit key", required=True),
        Column("action", "string", "GDPR_DELETE, GDPR_EXPIRE or GDPR_VERIFY", required=True),
        Column("table_name", "string", "Table or raw-zone location acted on"),
        Column("rows_removed", "bigint", "Rows (or raw records) removed"),
        Column("outcome", "string", "DONE, NOT_FOUND, VERIFIED or FAILED", required=True),
        Column("detail", "string", "Human-readable detail"),
        Column("executed_at", "timestamp", "When the action ran", required=True),
        Column("run_id", "string", "Dagster run that did it"),
    ),
    partition_by=("days(executed_at)",),
    properties={"write.target-file-size-bytes": str(8 * MIB)},
)

DATA_QUALITY_METRICS = TableSpec(
    namespace="monitoring",
    name="data_quality_metrics",
    description="Every data-quality figure measured, so trends can be queried",
    columns=(
        Column("table_name", "string", "Table measured", required=True),
        Column("partition_key", "string", "Partition measured, if any"),
        Column("metric", "string", "Metric name", required=True),
        Column("value", "double", "Measured value"),
        Column("passed", "boolean", "Whether the check that produced it passed"),
        Column("measured_at", "timestamp", "When it was measured", required=True),
        Column("run_id", "string", "Dagster run that measured it"),
    ),
    partition_by=("days(measured_at)",),
    properties={"write.target-file-size-bytes": str(8 * MIB)},
)

TABLE_CHANGES = TableSpec(
    namespace="audit",
    name="table_changes",
    description="Operations that changed a table outside the pipeline (rollbacks), with who asked and why",
    columns=(
        Column("table_name", "string", "Table changed", required=True),
        Column("action", "string", "ROLLBACK", required=True),
        Column("from_snapshot_id", "string", "Snapshot current before"),
        Column("to_snapshot_id", "string", "Snapshot current after", required=True),
        Column("reason", "string", "Why, as given by the person who asked", required=True),
        Column("run_id", "string", "Dagster run that did it"),
        Column("executed_at", "timestamp", "When", required=True),
    ),
    partition_by=("days(executed_at)",),
    properties={"write.target-file-size-bytes": str(8 * MIB)},
)
