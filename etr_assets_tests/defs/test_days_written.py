"""A day a step wrote without being asked is recorded on its own partition, so the UI says what the table holds."""

from __future__ import annotations

from dagster import (
    AssetKey,
    AssetRecordsFilter,
    DagsterInstance,
    DailyPartitionsDefinition,
    MaterializeResult,
    asset,
    materialize,
)

from etr_assets.defs.common import log_partition_counts
from etr_assets.lake.figures import Tagged

KEY = AssetKey(["landing", "customers"])


def run_day(figures: dict, day: str, instance: DagsterInstance) -> None:
    @asset(key=KEY, partitions_def=DailyPartitionsDefinition(start_date="2025-01-01"))
    def history(context):
        log_partition_counts(context, figures)
        return MaterializeResult()

    assert materialize([history], partition_key=day, instance=instance).success


def materialized_days(instance: DagsterInstance) -> dict[str, dict]:
    records = instance.fetch_materializations(AssetRecordsFilter(asset_key=KEY), limit=100).records
    return {r.partition_key: r.asset_materialization.metadata for r in reversed(records)}


def test_days_a_history_applied_beyond_the_request_are_materialized_on_their_partitions():
    instance = DagsterInstance.ephemeral()
    applied = {"rows_by_day": Tagged("json", {}), "days_applied": Tagged("json", ["2025-01-01", "2025-01-03"])}
    run_day(applied, "2025-01-03", instance)
    days = materialized_days(instance)
    assert set(days) == {"2025-01-01", "2025-01-03"}
    assert days["2025-01-01"]["written_by_run_of"].value == "2025-01-03...2025-01-03"


def test_a_pending_day_bronze_finished_carries_its_own_row_count():
    instance = DagsterInstance.ephemeral()
    run_day({"rows_by_day": Tagged("json", {"2025-01-01": 7, "2025-01-02": 5})}, "2025-01-02", instance)
    days = materialized_days(instance)
    assert set(days) == {"2025-01-01", "2025-01-02"}
    assert days["2025-01-01"]["dagster/partition_row_count"].value == 7


def test_a_run_that_wrote_only_its_days_records_nothing_more():
    instance = DagsterInstance.ephemeral()
    run_day(
        {"rows_by_day": Tagged("json", {"2025-01-02": 5}), "days_applied": Tagged("json", [])}, "2025-01-02", instance
    )
    assert set(materialized_days(instance)) == {"2025-01-02"}
