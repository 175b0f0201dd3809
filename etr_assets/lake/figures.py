"""What a materialization reports about a table write, as plain values (no Dagster import).

The Dagster layer turns these into `MetadataValue`s (`etr_assets.defs.metadata.as_metadata`); a remote Glue or
EMR job sends the same figures through Dagster Pipes (`etr_assets.remote.run_layer`). Values that need a special
rendering are tagged: `Tagged("path" | "json" | "md", value)`.
"""

from __future__ import annotations

import dataclasses

from etr_assets.lake.bronze import LayerResult


@dataclasses.dataclass(frozen=True)
class Tagged:
    kind: str  # "path", "json" or "md"
    value: object


def layer_figures(result: LayerResult, location: str) -> dict[str, object]:
    """Figures of one write: numbers plot over time in the UI; ids are strings (they exceed 32 bits)."""
    commit = result.commit
    figures: dict[str, object] = {
        "dagster/row_count": result.rows,
        "table": commit.table,
        "table_uri": Tagged("path", location),
        "snapshot_id": str(commit.snapshot_id) if commit.snapshot_id is not None else "none",
        "operation": commit.operation or "none",
        "files_added": commit.added_files,
        "files_removed": commit.removed_files,
        "records_added": commit.added_records,
        "records_removed": commit.removed_records,
        "table_rows": commit.total_records,
        "table_files": commit.total_files,
        "table_bytes": commit.total_bytes,
        "rows_by_day": Tagged("json", result.rows_by_day),
    }
    if result.changes.any:
        figures["table_change"] = result.changes.describe()
    if result.changes.schema_id is not None:
        figures["schema_id"] = result.changes.schema_id
    for key, value in result.extra.items():  # Markdown tables (e.g. silver's read plan) render as such
        figures[key] = Tagged("md", value) if isinstance(value, str) and value.startswith("|") else value
    return figures
