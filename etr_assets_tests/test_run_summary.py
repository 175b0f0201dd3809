"""`etr run-summary`: what a real Dagster run wrote and how its checks came out, read from its instance."""

from __future__ import annotations

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    DagsterInstance,
    MaterializeResult,
    asset,
    materialize,
)

from etr_assets.run_summary import summarize_run


@asset(key=["silver", "things"], check_specs=[AssetCheckSpec("keys_present", asset=["silver", "things"])])
def things():
    yield MaterializeResult(metadata={"rows_written": 40, "dagster/row_count": 400})
    yield AssetCheckResult(check_name="keys_present", passed=True)


@asset(
    key=["gold", "summary"],
    deps=[things],
    check_specs=[
        AssetCheckSpec("row_count_anomaly", asset=["gold", "summary"]),
        AssetCheckSpec("amounts_positive", asset=["gold", "summary"]),
    ],
)
def summary():
    yield MaterializeResult(metadata={"versions_inserted": 3, "rows_written": 0})  # as an SCD2 history reports
    yield AssetCheckResult(check_name="row_count_anomaly", passed=False, severity=AssetCheckSeverity.WARN)
    yield AssetCheckResult(check_name="amounts_positive", passed=True)


def test_the_summary_counts_tables_rows_and_checks_of_the_run():
    with DagsterInstance.ephemeral() as instance:
        result = materialize([things, summary], instance=instance)
        newest = summarize_run(instance)
        by_id = summarize_run(instance, result.run_id)

    assert newest == by_id and newest.run_id == result.run_id and newest.status == "SUCCESS"
    assert newest.rows_by_table == {"silver/things": 40, "gold/summary": 3}
    assert (newest.passed, newest.warned, newest.failed) == (2, 1, 0)
    lines = newest.lines()
    assert lines[1] == "  2 asset(s) materialized, 43 row(s) written"
    assert lines[2] == "  checks: 2 passed, 1 warned, 0 failed (gold/summary:row_count_anomaly)"


def test_an_instance_without_runs_has_no_summary():
    with DagsterInstance.ephemeral() as instance:
        assert summarize_run(instance) is None
