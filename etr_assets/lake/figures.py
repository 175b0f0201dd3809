"""What a materialization reports about a table write, as plain values (no Dagster import).

The Dagster layer turns these into `MetadataValue`s (`etr_assets.defs.metadata.as_metadata`); a remote Glue or
EMR job sends the same figures through Dagster Pipes (`etr_assets.remote.run_layer`). Values that need a special
rendering are tagged: `Tagged("path" | "json" | "md", value)`.
"""

from __future__ import annotations

import dataclasses

from etr_assets.lake.bronze import LayerResult
from etr_assets.lake.quality import CheckOutcome


@dataclasses.dataclass(frozen=True)
class Tagged:
    kind: str  # "path", "json" or "md"
    value: object


def layer_figures(result: LayerResult, location: str, table_rows: int | None = None) -> dict[str, object]:
    """Figures of one write: numbers plot over time in the UI; ids are strings (they exceed 32 bits). `table_rows`:
    the table's rows when the write committed nothing (its commit then has no figures)."""
    commit = result.commit
    figures: dict[str, object] = {
        # Dagster's meanings: rows in the table, and rows of the partition materialized (one day only; a range run
        # reports each day's own count as an observation of that partition, `partition_counts`).
        "dagster/row_count": commit.total_records if commit.snapshot_id is not None else (table_rows or 0),
        "rows_written": result.rows,
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
    if len(result.rows_by_day) == 1:
        figures["dagster/partition_row_count"] = result.rows
    if result.changes.any:
        figures["table_change"] = result.changes.describe()
    if result.changes.schema_id is not None:
        figures["schema_id"] = result.changes.schema_id
    for key, value in result.extra.items():  # Markdown tables (e.g. silver's read plan) render as such
        figures[key] = Tagged("md", value) if isinstance(value, str) and value.startswith("|") else value
    return figures


def partition_counts(figures: dict[str, object]) -> dict[str, int]:
    """Per day, the rows a range run wrote for it (empty for a one-day run, whose figures already say)."""
    by_day = figures.get("rows_by_day")
    counts = getattr(by_day, "value", by_day) or {}  # Tagged here, Dagster's JSON value after Pipes
    return dict(counts) if isinstance(counts, dict) and len(counts) > 1 else {}


def check_figures(outcome: CheckOutcome) -> dict[str, object]:
    """What a check result reports: its numbers (plotted by the UI), and for a check of days its figure and verdict
    per day, from which a range run records a result on each day's partition (`etr_assets.defs.common`)."""
    figures: dict[str, object] = {
        "violations": outcome.violations,
        "detail": outcome.examples or "none",
        **outcome.figures,
    }
    if outcome.by_day:
        verdicts = outcome.day_verdicts()
        figures["by_day"] = Tagged("json", outcome.by_day)
        figures["days_failed"] = Tagged("json", sorted(day for day, passed in verdicts.items() if not passed))
    return figures
