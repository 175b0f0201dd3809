"""`etr run-summary`: what a real Dagster run wrote and how its checks came out, read from its instance."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    DagsterInstance,
    DagsterRunStatus,
    Definitions,
    Failure,
    MaterializeResult,
    asset,
    define_asset_job,
    execute_job,
    job,
    materialize,
    op,
    reconstructable,
)

from etr_assets.defs.run_guard import in_process_executor
from etr_assets.defs.run_summary import summarize_run
from etr_assets_tests.test_cli_subprocess import isolated_env

ETR = str(Path(sys.executable).parent / "etr")


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
    # As an SCD2 history reports on a rerun: its current versions, and no version inserted or closed, no commit.
    history = {"versions_inserted": 0, "versions_updated": 0, "rows_written": 0, "records_added": 0}
    yield MaterializeResult(metadata={**history, "current_rows": 5})
    yield AssetCheckResult(check_name="row_count_anomaly", passed=False, severity=AssetCheckSeverity.WARN)
    yield AssetCheckResult(check_name="amounts_positive", passed=True)


def test_the_summary_counts_tables_rows_and_checks_of_the_run():
    with DagsterInstance.ephemeral() as instance:
        result = materialize([things, summary], instance=instance)
        newest = summarize_run(instance)
        by_id = summarize_run(instance, result.run_id)

    assert newest == by_id and newest.run_id == result.run_id and newest.status == "SUCCESS"
    # For its days, what each asset holds (a history: its current versions), the same on a rerun; written, what the
    # run's commits added (without a commit figure: all of it).
    assert newest.rows_by_table == {"silver/things": 40, "gold/summary": 5}
    assert newest.written_by_table == {"silver/things": 40, "gold/summary": 0}
    assert (newest.passed, newest.warned, newest.failed) == (2, 1, 0)
    lines = newest.lines()
    assert lines[1] == "  2 asset(s) materialized, 45 row(s) for its days, 40 written by this run"
    assert lines[2] == "  checks: 2 passed, 1 warned, 0 failed (gold/summary:row_count_anomaly)"


def test_a_range_run_counts_each_days_rows_and_check_result(settings):
    """A range run puts each day's rows on its partition: the run's rows are their sum; a figure of the whole run
    (a history's, the same on each day) is counted once."""
    from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

    from etr_assets.defs.common import as_metadata, check_results, on_partitions, record_days, table_asset
    from etr_assets.lake.figures import Tagged
    from etr_assets.tables.entities import LANDING_CUSTOMERS
    from etr_assets.tables.transactions import GOLD_DAILY_SUMMARY
    from etr_assets_tests.defs.test_check_partitions import DAYS, outcomes

    @table_asset(settings, GOLD_DAILY_SUMMARY, [], "made-up gold")
    def gold(context):
        figures = {"rows_written": 90, "rows_by_day": Tagged("json", dict(zip(DAYS, (30, 20, 40), strict=True)))}
        figures["records_added"] = 90  # the one commit's, on each day's materialization
        record_days(context, figures)
        yield MaterializeResult(metadata=as_metadata(figures))
        yield from on_partitions(context, check_results(outcomes(context.partition_keys)[1:]))  # the anomaly only

    @table_asset(settings, LANDING_CUSTOMERS, [], "made-up history")
    def history(context):
        figures = {"rows_written": 7, "rows_by_day": Tagged("json", {})}
        record_days(context, figures)
        yield MaterializeResult(metadata=as_metadata(figures))

    tags = {ASSET_PARTITION_RANGE_START_TAG: DAYS[0], ASSET_PARTITION_RANGE_END_TAG: DAYS[-1]}
    with DagsterInstance.ephemeral() as instance:
        materialize([gold, history], instance=instance, tags=tags)
        summary = summarize_run(instance)
    assert summary.partitions == f"{DAYS[0]}...{DAYS[-1]}"
    assert summary.rows_by_table == {"gold/bnpl_daily_summary": 90, "landing/customers": 7}
    assert summary.written_by_table == {"gold/bnpl_daily_summary": 90, "landing/customers": 7}  # counted once
    assert (summary.passed, summary.warned, summary.failed) == (2, 1, 0)  # one result per day


def test_the_summary_counts_records_of_erased_customers_suppressed():
    @asset(key=["bronze", "things"])
    def bronze_things():
        yield MaterializeResult(metadata={"rows_written": 7, "records_suppressed": 2})

    with DagsterInstance.ephemeral() as instance:
        materialize([bronze_things, things], instance=instance)
        summary = summarize_run(instance)
    assert summary.suppressed == 2
    line = (
        "  2 asset(s) materialized, 47 row(s) for its days, 47 written by this run, 2 record(s) of erased customers "
        "suppressed"
    )
    assert summary.lines()[1] == line


def test_the_short_id_every_log_line_prints_finds_its_run():
    with DagsterInstance.ephemeral() as instance:
        first = materialize([things, summary], instance=instance).run_id
        second = materialize([things, summary], instance=instance).run_id
        assert summarize_run(instance, first[:8]).run_id == first
        assert summarize_run(instance, second[:8]).run_id == second
        assert summarize_run(instance, "0000zzzz") is None  # no run begins so


def test_run_summary_without_an_instance_says_where_it_looked_in_one_line(tmp_path):
    env = isolated_env(tmp_path)
    del env["DAGSTER_HOME"]
    done = subprocess.run([ETR, "run-summary", "f9857d34"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert "DAGSTER_HOME is not set" in line and str(tmp_path / "etr" / "dagster") in line, line


def test_an_instance_without_runs_has_no_summary():
    with DagsterInstance.ephemeral() as instance:
        assert summarize_run(instance) is None


@pytest.mark.slow
def test_run_summary_without_an_id_takes_the_newest_finished_run_not_one_launching(tmp_path):
    """The issue's: `etr run-summary` picked a run still being launched (NOT_STARTED, 0 assets, exit 1). Without an
    id it takes the newest run that finished (succeeded, failed or canceled); none: one line, exit 1."""
    env = isolated_env(tmp_path)
    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        waiting = instance.create_run_for_job(things_job(), status=DagsterRunStatus.STARTED)
        alone = subprocess.run([ETR, "run-summary"], env=env, capture_output=True, text=True, timeout=60)
        finished = materialize([things, summary], instance=instance).run_id
        for status in (DagsterRunStatus.STARTED, DagsterRunStatus.NOT_STARTED):  # launched after it, not ended
            instance.create_run_for_job(things_job(), status=status)
        newest = [run.status for run in instance.get_runs(limit=2)]
    assert alone.returncode == 1 and alone.stdout == "", alone.stderr
    assert alone.stderr.splitlines() == [
        f"etr run-summary: no finished run in the Dagster instance at {env['DAGSTER_HOME']}"
    ], waiting.run_id
    assert newest == [DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTED]
    done = subprocess.run([ETR, "run-summary"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith(f"run {finished[:8]} of __ephemeral_asset_job__: SUCCESS in "), (
        done.stdout
    )


def things_job():
    """The two assets as a job of the code location's executor (module level: `execute_job` reconstructs it)."""
    defs = Definitions(assets=[things, summary], jobs=[define_asset_job("things_job")], executor=in_process_executor)
    return defs.resolve_job_def("things_job")


def test_every_run_of_the_code_locations_executor_ends_with_its_summary_in_the_log():
    with DagsterInstance.ephemeral() as instance:
        with execute_job(reconstructable(things_job), instance=instance) as result:
            assert result.success
            messages = [entry.user_message for entry in instance.all_logs(result.run_id) if entry.dagster_event is None]
    (last,) = [m for m in messages if m.startswith(f"run {result.run_id[:8]} of things_job")]
    assert last.splitlines() == [
        f"run {result.run_id[:8]} of things_job: every step succeeded",
        "  2 asset(s) materialized, 45 row(s) for its days, 40 written by this run",
        "  checks: 2 passed, 1 warned, 0 failed (gold/summary:row_count_anomaly)",
    ]


def test_a_failed_run_ends_with_the_first_failures_one_line_reason_and_the_other_failed_steps():
    @asset(key=["bronze", "disk"])
    def disk():
        raise Failure(description="a disk ran out of space (...) while building bronze.full: free space there")

    @asset(key=["bronze", "parse"])
    def parse():
        try:
            raise KeyError("inner")
        except KeyError as inner:
            raise ValueError("bad input\nsecond line of the message") from inner

    with DagsterInstance.ephemeral() as instance:
        materialize([disk, parse], instance=instance, raise_on_error=False)
        summary = summarize_run(instance)
    assert summary.status == "FAILURE"
    assert summary.failures == (
        ("bronze__disk", "a disk ran out of space (...) while building bronze.full: free space there"),
        ("bronze__parse", "ValueError: bad input"),
    )
    assert summary.lines()[3] == (
        "  failed: bronze__disk: a disk ran out of space (...) while building bronze.full: free space there "
        "(also failed: bronze__parse)"
    )
    assert len(summary.lines()) == 4


def test_an_erasure_run_states_its_proof_and_the_suppression_list():
    statement = "2 erased customer(s) on the suppression list: no row of theirs in any table since"

    @op(name="prove_erasure")
    def proven(context):
        context.add_output_metadata({"proof": "VERIFIED", "suppression": statement, "suppressed_customers": 2})

    @op(name="prove_erasure")
    def refuted():
        back = "2 erased customer(s) on the suppression list: 1 found again in a table"
        raise Failure(description="not proven", metadata={"proof": "FAILED", "suppression": back})

    @job(name="gdpr_erasure")
    def proven_job():
        proven()

    @job(name="gdpr_erasure")
    def refuted_job():
        refuted()

    with DagsterInstance.ephemeral() as instance:
        proven_job.execute_in_process(instance=instance)
        assert summarize_run(instance).lines()[3] == f"  erasure proof: VERIFIED ({statement})"
        refuted_job.execute_in_process(instance=instance, raise_on_error=False)
        lines = summarize_run(instance).lines()
    assert lines[3:] == [
        "  erasure proof: FAILED (2 erased customer(s) on the suppression list: 1 found again in a table)",
        "  failed: prove_erasure: not proven",
    ]
