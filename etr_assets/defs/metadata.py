"""What the Dagster UI shows about a table: its column schema (from the spec) and each commit's figures."""

from __future__ import annotations

from dagster import (
    AssetMaterialization,
    AssetObservation,
    MetadataValue,
    TableColumn,
    TableColumnConstraints,
    TableSchema,
)

from etr_assets.lake.figures import Tagged, partition_counts, written_days
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
    as an observation (the UI lists it under the partition and plots it). A day the step wrote without being asked
    (a pending batch it finished, a snapshot day a history took in) is recorded as a materialization of that
    partition, with a warning, so the UI's partitions and staleness say what the table holds."""
    counts, requested = partition_counts(figures), set(context.partition_keys)  # every asset here is partitioned
    unrequested = sorted(written_days(figures) - requested)
    for day, rows in counts.items():
        if day not in unrequested:
            context.log_event(
                AssetObservation(
                    asset_key=context.asset_key, partition=day, metadata={"dagster/partition_row_count": int(rows)}
                )
            )
    if not unrequested:
        return
    run_days = sorted(requested)
    context.log.warning(
        f"{context.asset_key.to_user_string()}: also wrote {', '.join(unrequested)} (not requested by this run of "
        f"{run_days[0]}{'...' + run_days[-1] if len(run_days) > 1 else ''}); recorded as materializations of those "
        "partitions"
    )
    for day in unrequested:
        metadata = {"written_by_run_of": f"{run_days[0]}...{run_days[-1]}"}
        metadata |= {"dagster/partition_row_count": int(counts[day])} if day in counts else {}
        context.log_event(AssetMaterialization(asset_key=context.asset_key, partition=day, metadata=metadata))
