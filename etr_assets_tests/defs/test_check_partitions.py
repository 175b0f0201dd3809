"""Checks of days land on the days' partitions: a one-day run through Dagster's own result, a range run as one
evaluation per day with that day's verdict and the check's output downstream steps are gated on (no Spark: the
asset reports made-up outcomes)."""

from __future__ import annotations

import pytest
from dagster import AssetCheckKey, BackfillPolicy, DagsterInstance, MaterializeResult, asset, materialize
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from etr_assets.defs.common import check_results, on_partitions, table_asset, table_key
from etr_assets.lake.quality import CheckOutcome, Severity
from etr_assets.tables.transactions import GOLD_DAILY_SUMMARY

DAYS = ["2025-01-01", "2025-01-02", "2025-01-03"]
KEY = table_key(GOLD_DAILY_SUMMARY)


def outcomes(days: list[str]) -> list[CheckOutcome]:
    """Negative amounts on the middle day only; a row-count anomaly the check itself placed on the last day."""
    broken = {day: (2.0 if day == DAYS[1] else 0.0) for day in days}
    return [
        CheckOutcome("amounts_are_not_negative", "amounts >= 0", not any(broken.values()), 2, by_day=broken),
        CheckOutcome(
            "row_count_anomaly",
            "rows near the median",
            DAYS[2] not in days,
            1,
            severity=Severity.WARN,
            by_day=dict.fromkeys(days, 10.0),
            days_failed=(DAYS[2],) if DAYS[2] in days else (),
        ),
    ]


@pytest.fixture
def gold(settings):
    @table_asset(settings, GOLD_DAILY_SUMMARY, [], "made-up gold")
    def asset(context):
        yield MaterializeResult(metadata={"rows": 1})
        yield from on_partitions(context, check_results(outcomes(context.partition_keys)))

    return asset


@pytest.fixture
def downstream(settings, gold):
    @asset(key="report", deps=[KEY], partitions_def=gold.partitions_def, backfill_policy=BackfillPolicy.single_run())
    def report():
        return MaterializeResult()

    return report


def run_range(assets, first: str, last: str, instance=None):
    tags = {ASSET_PARTITION_RANGE_START_TAG: first, ASSET_PARTITION_RANGE_END_TAG: last}
    return materialize(assets, instance=instance or DagsterInstance.ephemeral(), tags=tags, raise_on_error=False)


def check_outputs(result, gold) -> dict[str, bool]:
    """Per check the asset reports, whether the run emitted its step output: what Dagster gates downstream steps on
    (without it, Dagster says "did not yield expected outputs" and lets them run "without gating on it")."""
    outputs = {e.step_output_data.output_name for e in result.all_events if e.is_successful_output}
    reported = {o.name for o in outcomes(DAYS)}
    return {s.name: name in outputs for name, s in gold.check_specs_by_output_name.items() if s.name in reported}


def evaluations(result) -> dict[tuple[str, str | None], bool]:
    return {
        (e.event_specific_data.check_name, e.event_specific_data.partition): e.event_specific_data.passed
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }


def test_a_one_day_run_records_each_check_on_its_day(gold):
    result = materialize([gold], partition_key=DAYS[0], instance=DagsterInstance.ephemeral())
    assert evaluations(result) == {("amounts_are_not_negative", DAYS[0]): True, ("row_count_anomaly", DAYS[0]): True}


def test_a_range_run_records_each_days_verdict_on_its_partition_and_a_blocking_failure_fails_it(gold, downstream):
    instance = DagsterInstance.ephemeral()
    result = run_range([gold, downstream], DAYS[0], DAYS[-1], instance)

    assert evaluations(result) == {
        **{("amounts_are_not_negative", day): day != DAYS[1] for day in DAYS},  # blocking, broken on day 2 only
        **{("row_count_anomaly", day): day != DAYS[2] for day in DAYS},  # the check's own verdict per day
    }
    assert not result.success  # the blocking check failed (on day 2), as a one-day run of day 2 would fail
    assert check_outputs(result, gold) == {"amounts_are_not_negative": True, "row_count_anomaly": True}
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert materialized == {"gold/bnpl_daily_summary"}  # written (checked after), but nothing downstream ran
    for event in result.all_events:
        if event.event_type_value == "ASSET_CHECK_EVALUATION":  # each points at its day's materialization
            data = event.event_specific_data
            assert data.target_materialization_data.run_id == result.run_id
            assert data.metadata["run_days"].value == f"{DAYS[0]}...{DAYS[-1]}"
    check = AssetCheckKey(KEY, "amounts_are_not_negative")
    history = instance.event_log_storage.get_asset_check_execution_history(check, limit=10)
    assert {(r.partition, r.status) for r in history} == {
        (DAYS[0], AssetCheckExecutionRecordStatus.SUCCEEDED),
        (DAYS[1], AssetCheckExecutionRecordStatus.FAILED),
        (DAYS[2], AssetCheckExecutionRecordStatus.SUCCEEDED),
    }
    # What the UI shows per day: each result is of the day's latest materialization (else it drops it as stale).
    infos = instance.event_log_storage.get_asset_check_partition_info([check])
    assert {(i.partition_key, i.is_current) for i in infos} == {(day, True) for day in DAYS}


def test_a_range_run_that_passes_its_blocking_checks_emits_each_checks_output_and_runs_downstream(gold, downstream):
    days = ["2025-01-03", "2025-01-04"]  # the anomaly on the first only: it warns
    result = run_range([gold, downstream], *days)
    assert result.success
    assert check_outputs(result, gold) == {"amounts_are_not_negative": True, "row_count_anomaly": True}
    assert evaluations(result) == {
        **{("amounts_are_not_negative", day): True for day in days},
        **{("row_count_anomaly", day): day != days[0] for day in days},
    }
    materialized = {(e.asset_key.to_user_string(), e.partition) for e in result.get_asset_materialization_events()}
    assert materialized == {(key, day) for key in ("gold/bnpl_daily_summary", "report") for day in days}


def test_a_check_that_failed_without_a_day_to_blame_fails_every_day():
    whole_table = CheckOutcome("key_is_unique", "unique", False, 2, by_day={DAYS[0]: 0.0, DAYS[1]: 0.0})
    assert whole_table.day_verdicts() == {DAYS[0]: False, DAYS[1]: False}
