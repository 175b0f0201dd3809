"""The bookkeeping tables stay small in files without a maintenance run, and keep every row (an append-only log)."""

from __future__ import annotations

import datetime as dt

import pytest

from etr_assets.lake.bookkeeping import DATA_QUALITY_METRICS, MAX_FILES_PER_DAY, TABLE_CHANGES, record_rows
from etr_assets.lake.metadata import load_table
from etr_assets.lake.quality import Metric, record_metrics

LAYER_RUNS = 30


def files_by_day(settings, spec) -> dict[str, int]:
    """Live data files per day partition, from metadata."""
    files = load_table(settings, spec).inspect.files().to_pylist()
    days: dict[str, int] = {}
    for file in files:
        (day,) = file["partition"].values()
        key = str(dt.date(1970, 1, 1) + dt.timedelta(days=day) if isinstance(day, int) else day)
        days[key] = days.get(key, 0) + 1
    return days


@pytest.mark.slow
def test_a_log_written_by_every_run_stays_within_its_bound_of_files_and_keeps_every_row(lake, settings):
    """30 layer runs each record their check metrics (as `pipeline.layers` does): one append each, 30 files before
    compaction on write; now at most MAX_FILES_PER_DAY, and all 30 runs' rows."""
    qualified = DATA_QUALITY_METRICS.qualified(settings.catalog)
    metrics = [Metric("silver.bnpl_transactions_clean", f"check_{i}", float(i), True, "2025-01-02") for i in range(3)]
    for run in range(LAYER_RUNS):
        record_metrics(lake, settings.catalog, metrics, f"run-{run}")
        assert sum(files_by_day(settings, DATA_QUALITY_METRICS).values()) <= MAX_FILES_PER_DAY

    runs = {r["run_id"]: r["count"] for r in lake.table(qualified).groupBy("run_id").count().collect()}
    assert runs == {f"run-{run}": len(metrics) for run in range(LAYER_RUNS)}
    table = load_table(settings, DATA_QUALITY_METRICS)
    # Compaction committed `replace` snapshots only: rows were never removed or rewritten otherwise.
    operations = [s.summary.operation.value for s in table.metadata.snapshots]
    assert set(operations) == {"append", "replace"} and operations.count("append") == LAYER_RUNS


@pytest.mark.slow
def test_a_past_day_is_compacted_into_one_file_and_only_the_days_written_are_rewritten(lake, settings):
    assert TABLE_CHANGES.day_column == "executed_at"
    qualified = TABLE_CHANGES.qualified(settings.catalog)

    def change(at: dt.datetime, n: int) -> dict:
        return {
            "table_name": "silver.t",
            "action": "ROLLBACK",
            "to_snapshot_id": str(n),
            "reason": f"change {n}",
            "executed_at": at,
        }

    quiet, busy, next_day = (dt.datetime(2025, 3, d, 12) for d in (1, 4, 5))
    for n in range(5):  # a day nothing wrote the day after: left as written, within the bound
        record_rows(lake, settings.catalog, TABLE_CHANGES, [change(quiet, n)])
    for n in range(5, 5 + MAX_FILES_PER_DAY + 3):  # a busy day: compacted when a write passes the bound
        record_rows(lake, settings.catalog, TABLE_CHANGES, [change(busy, n)])
    files = files_by_day(settings, TABLE_CHANGES)
    assert files["2025-03-01"] == 5 and 1 <= files["2025-03-04"] <= MAX_FILES_PER_DAY

    # The next day's first write closes the day before into one file; older days are not touched.
    record_rows(lake, settings.catalog, TABLE_CHANGES, [change(next_day, 99)])
    assert files_by_day(settings, TABLE_CHANGES) == {"2025-03-01": 5, "2025-03-04": 1, "2025-03-05": 1}
    written = MAX_FILES_PER_DAY + 3 + 5 + 1
    assert lake.table(qualified).count() == written
    assert {r[0] for r in lake.table(qualified).select("reason").collect()} == {f"change {n}" for n in range(5)} | {
        f"change {n}" for n in range(5, 5 + MAX_FILES_PER_DAY + 3)
    } | {"change 99"}
