"""Each day's partition says what was written on that day: a range run's days their own rows, not the run's; a
day a step wrote without being asked is recorded on its own partition, so the UI says what the table holds."""

from __future__ import annotations

from dagster import (
    AssetKey,
    AssetRecordsFilter,
    BackfillPolicy,
    DagsterInstance,
    DailyPartitionsDefinition,
    MaterializeResult,
    asset,
    materialize,
)
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from etr_assets.defs.common import as_metadata, record_days
from etr_assets.lake.figures import Tagged

KEY = AssetKey(["landing", "customers"])


def run_days(figures: dict, first: str, instance: DagsterInstance, last: str | None = None) -> None:
    @asset(
        key=KEY,
        partitions_def=DailyPartitionsDefinition(start_date="2025-01-01"),
        backfill_policy=BackfillPolicy.single_run(),
    )
    def table(context):
        record_days(context, figures)
        return MaterializeResult(metadata=as_metadata(figures))

    days = {ASSET_PARTITION_RANGE_START_TAG: first, ASSET_PARTITION_RANGE_END_TAG: last} if last else {}
    assert materialize([table], partition_key=None if last else first, instance=instance, tags=days).success


def materialized_days(instance: DagsterInstance) -> dict[str, dict]:
    records = instance.fetch_materializations(AssetRecordsFilter(asset_key=KEY), limit=100).records
    return {r.partition_key: r.asset_materialization.metadata for r in reversed(records)}


def test_days_a_history_applied_beyond_the_request_are_materialized_on_their_partitions():
    instance = DagsterInstance.ephemeral()
    applied = {"rows_by_day": Tagged("json", {}), "days_applied": Tagged("json", ["2025-01-01", "2025-01-03"])}
    run_days(applied, "2025-01-03", instance)
    days = materialized_days(instance)
    assert set(days) == {"2025-01-01", "2025-01-03"}
    assert days["2025-01-01"]["written_by_run_of"].value == "2025-01-03"


def test_a_pending_day_bronze_finished_carries_its_own_row_count():
    instance = DagsterInstance.ephemeral()
    figures = {"rows_written": 12, "rows_by_day": Tagged("json", {"2025-01-01": 7, "2025-01-02": 5})}
    run_days(figures, "2025-01-02", instance)
    days = materialized_days(instance)
    assert set(days) == {"2025-01-01", "2025-01-02"}
    assert days["2025-01-01"]["dagster/partition_row_count"].value == 7 == days["2025-01-01"]["rows_written"].value
    assert days["2025-01-02"]["dagster/partition_row_count"].value == 5 == days["2025-01-02"]["rows_written"].value


def test_a_run_that_wrote_only_its_days_records_nothing_more():
    instance = DagsterInstance.ephemeral()
    run_days(
        {"rows_by_day": Tagged("json", {"2025-01-02": 5}), "days_applied": Tagged("json", [])}, "2025-01-02", instance
    )
    assert set(materialized_days(instance)) == {"2025-01-02"}


def test_each_day_of_a_range_run_carries_its_own_rows_and_the_commit_it_is_in():
    instance = DagsterInstance.ephemeral()
    by_day = {"2025-01-01": 200, "2025-01-02": 150, "2025-01-03": 250}
    figures = {"rows_written": 600, "rows_by_day": Tagged("json", by_day), "snapshot_id": "42", "files_added": 3}
    run_days(figures, "2025-01-01", instance, last="2025-01-03")
    days = {day: {k: v.value for k, v in metadata.items()} for day, metadata in materialized_days(instance).items()}
    assert days == {
        day: {
            "rows_written": rows,
            "dagster/partition_row_count": rows,
            "rows_by_day": {day: rows},
            "snapshot_id": "42",  # the one commit of the run, and the days it holds
            "files_added": 3,
            "run_days": "2025-01-01...2025-01-03",
        }
        for day, rows in by_day.items()
    }


def test_a_history_has_no_days_its_figures_stay_the_runs():
    instance = DagsterInstance.ephemeral()
    run_days({"rows_written": 9, "rows_by_day": Tagged("json", {})}, "2025-01-01", instance, last="2025-01-02")
    days = materialized_days(instance)
    assert {day: m["rows_written"].value for day, m in days.items()} == {"2025-01-01": 9, "2025-01-02": 9}
    assert {m["run_days"].value for m in days.values()} == {"2025-01-01...2025-01-02"}
