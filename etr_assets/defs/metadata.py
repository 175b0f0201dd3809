"""What the Dagster UI shows about a table: its column schema (from the spec) and each commit's figures."""

from __future__ import annotations

from dagster import MetadataValue, TableColumn, TableColumnConstraints, TableSchema

from etr_assets.lake.specs import TableSpec
from etr_assets.lake.transactions import LayerResult


def column_schema(spec: TableSpec) -> TableSchema:
    return TableSchema(
        columns=[
            TableColumn(
                name=c.name,
                type=c.type,
                description=c.doc or None,
                constraints=TableColumnConstraints(nullable=not c.required, other=["personal data"] if c.pii else []),
            )
            for c in spec.columns
        ]
    )


def definition_metadata(spec: TableSpec, catalog: str) -> dict[str, object]:
    """Static metadata on the asset definition: what the table is, before any run."""
    return {
        "dagster/column_schema": column_schema(spec),
        "dagster/table_name": spec.qualified(catalog),
        "partitioning": ", ".join(spec.partition_by) or "unpartitioned",
        "personal_data_columns": ", ".join(spec.pii_columns) or "none",
        "target_file_size_mb": spec.target_file_size_bytes // (1024 * 1024),
    }


def commit_metadata(result: LayerResult, location: str) -> dict[str, object]:
    """Figures of one materialization: numbers plot over time in the UI; ids are strings (exceed 32 bits)."""
    commit = result.commit
    metadata: dict[str, object] = {
        "dagster/row_count": result.rows,
        "table": commit.table,
        "table_uri": MetadataValue.path(location),
        "snapshot_id": str(commit.snapshot_id) if commit.snapshot_id is not None else "none",
        "operation": commit.operation or "none",
        "files_added": commit.added_files,
        "files_removed": commit.removed_files,
        "records_added": commit.added_records,
        "records_removed": commit.removed_records,
        "table_rows": commit.total_records,
        "table_files": commit.total_files,
        "table_bytes": commit.total_bytes,
        "rows_by_day": MetadataValue.json(result.rows_by_day),
    }
    if result.changes.any:
        metadata["table_change"] = result.changes.describe()
    if result.changes.schema_id is not None:
        metadata["schema_id"] = result.changes.schema_id
    for key, value in result.extra.items():  # Markdown tables (e.g. silver's read plan) render as such
        metadata[key] = MetadataValue.md(value) if isinstance(value, str) and value.startswith("|") else value
    return metadata
