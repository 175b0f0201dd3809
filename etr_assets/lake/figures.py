"""What a table write did (`WriteResult`) and what a materialization reports about it, as plain values (no Dagster
import), so a local run and a remote one (through Dagster Pipes) report the same; `Tagged` marks values rendered as
a path, JSON or Markdown."""

from __future__ import annotations

import dataclasses

from etr_assets.lake.evolve import TableChanges
from etr_assets.lake.metadata import RowCount
from etr_assets.lake.quality import CheckOutcome
from etr_assets.lake.writes import CommitInfo


@dataclasses.dataclass(frozen=True)
class Tagged:
    kind: str  # "path", "json" or "md"
    value: object


@dataclasses.dataclass(frozen=True)
class WriteResult:
    """What one build wrote: its commit (none when nothing changed), the table's evolution, its rows by day and the
    figures, warnings and checks it measured on the way; `layer_figures` makes the materialization's metadata."""

    commit: CommitInfo
    changes: TableChanges
    rows_by_day: dict[str, int]
    extra: dict[str, int | str | float] = dataclasses.field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    checks: tuple = ()  # CheckOutcomes measured while building (blocking ones on the audit branch)
    written_rows: str | None = None  # a table without days: a filter selecting the rows the build wrote

    @property
    def rows(self) -> int:
        return sum(self.rows_by_day.values())


def layer_figures(result: WriteResult, location: str, unchanged_rows: RowCount | None = None) -> dict[str, object]:
    """Figures of one write (ids as strings: over 32 bits); `unchanged_rows`: the rows when nothing committed."""
    commit = result.commit
    rows = commit.table_rows if commit.snapshot_id is not None else (unchanged_rows or RowCount(0))
    figures: dict[str, object] = {
        **({"dagster/row_count": rows.rows, "table_rows": rows.rows} if rows.rows is not None else {}),
        "rows_written": result.rows,
        "table": commit.table,
        "table_uri": Tagged("path", location),
        "snapshot_id": str(commit.snapshot_id) if commit.snapshot_id is not None else "none",
        "operation": commit.operation or "none",
        "files_added": commit.added_files,
        "files_removed": commit.removed_files,
        "records_added": commit.added_records,
        "records_removed": commit.removed_records,
        "table_files": commit.total_files,
        "table_bytes": commit.total_bytes,
        "rows_by_day": Tagged("json", result.rows_by_day),
    }
    if rows.rows is None:
        figures["table_rows_unknown"] = rows.unknown
    if result.changes.any:
        figures["table_change"] = result.changes.describe()
    if result.changes.schema_id is not None:
        figures["schema_id"] = result.changes.schema_id
    for key, value in result.extra.items():  # Markdown tables (e.g. silver's read plan) render as such
        figures[key] = Tagged("md", value) if isinstance(value, str) and value.startswith("|") else value
    return figures


DAY_ROWS = ("rows_written", "records_fetched")  # figures that add up a write's `rows_by_day`


def day_figures(figures: dict[str, object]) -> dict[str, dict[str, object]]:
    """Per day a write counted rows for, the figures that are that day's own (its rows, not the whole run's)."""
    return {
        day: {"dagster/partition_row_count": rows, "rows_by_day": Tagged("json", {day: rows})}
        | {key: rows for key in DAY_ROWS if key in figures}
        for day, rows in figures["rows_by_day"].value.items()
    }


def written_days(figures: dict[str, object]) -> set[str]:
    """Every day a write touched: the days it counted rows for, and those a history applied (`days_applied`)."""
    return {day for key in ("rows_by_day", "days_applied") if key in figures for day in figures[key].value}


def check_figures(outcome: CheckOutcome) -> dict[str, object]:
    """What a check result reports: its numbers, and for a check of days its figure and verdict per day."""
    figures = {"violations": outcome.violations, "detail": outcome.examples or "none", **outcome.figures}
    if outcome.by_day:
        failed = sorted(day for day, passed in outcome.day_verdicts().items() if not passed)
        figures |= {"by_day": Tagged("json", outcome.by_day), "days_failed": Tagged("json", failed)}
    return figures
