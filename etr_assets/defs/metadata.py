"""What the Dagster UI shows about a table: its column schema (from the spec) and each commit's figures."""

from __future__ import annotations

from dagster import AssetObservation, MetadataValue, TableColumn, TableColumnConstraints, TableSchema

from etr_assets.lake.figures import Tagged, partition_counts
from etr_assets.lake.specs import TableSpec


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


def as_metadata(figures: dict[str, object]) -> dict[str, object]:
    """Figures of one materialization (`etr_assets.lake.figures`), as Dagster metadata values."""
    render = {"path": MetadataValue.path, "json": MetadataValue.json, "md": MetadataValue.md}
    return {
        key: render[value.kind](value.value) if isinstance(value, Tagged) else value for key, value in figures.items()
    }


def log_partition_counts(context, figures: dict[str, object]) -> None:
    """A range run materializes every day with the same metadata; each day's own row count goes on that partition
    as an observation (the UI lists it under the partition and plots it)."""
    for day, rows in partition_counts(figures).items():
        context.log_event(
            AssetObservation(
                asset_key=context.asset_key, partition=day, metadata={"dagster/partition_row_count": int(rows)}
            )
        )
