"""Freshness: Dagster's FreshnessPolicy on every table asset (from its spec), and the project's check of what Dagster
cannot see, commits made outside it, recorded by a sensor from table metadata against a real instance."""

from __future__ import annotations

import datetime as dt

import dagster as dg
import pytest

from etr_assets.definitions import build_definitions, defs
from etr_assets.defs.common import table_key
from etr_assets.errors import SpecError
from etr_assets.lake.metadata import load_table
from etr_assets.lake.specs import QualityRules
from etr_assets.tables import ALL_SPECS
from etr_assets.tables.entities import BRONZE_MERCHANTS
from etr_assets_tests.defs.outside_ticks import OutsideTick, outside_tick

DAY = "2025-01-02"


def table_assets() -> set[dg.AssetKey]:
    """The assets that write a table: every declared source's bronze and histories, and the Python layers."""
    return {key for a in defs.assets for key in a.keys if key.path[0] != "raw"}


RAW_AND_BRONZE = [dg.AssetKey(["raw", "bnpl_merchants"]), table_key(BRONZE_MERCHANTS)]


def test_every_table_asset_declares_its_specs_freshness_window():
    graph = defs.resolve_asset_graph()
    policies = [graph.get(table_key(s)).freshness_policy for s in ALL_SPECS if graph.has(table_key(s))]
    assert len(policies) == len(table_assets()) and {p.fail_window.to_timedelta() for p in policies} == {
        dt.timedelta(hours=36)
    }
    with pytest.raises(SpecError, match="under a minute"):
        QualityRules(freshness_window=dt.timedelta(seconds=30))


def current(settings, spec=BRONZE_MERCHANTS):
    return load_table(settings, spec).current_snapshot()


@pytest.mark.slow  # two pipeline materializations: about 50 s here
def test_commits_outside_dagster_are_reported_and_dagsters_own_are_not(lake, settings):
    pipeline = build_definitions(settings)
    resources = pipeline.get_repository_def().get_top_level_resources()
    bronze, qualified = table_key(BRONZE_MERCHANTS).to_user_string(), BRONZE_MERCHANTS.qualified(settings.catalog)
    key = dg.AssetCheckKey(table_key(BRONZE_MERCHANTS), "commits_outside_dagster")
    check = next(c for c in pipeline.asset_checks if key in c.check_keys)
    with dg.DagsterInstance.ephemeral() as instance:

        def materialize() -> int:
            assets = list(pipeline.assets)
            assert dg.materialize(
                assets, selection=RAW_AND_BRONZE, resources=resources, partition_key=DAY, instance=instance
            ).success
            return current(settings).snapshot_id

        def tick(cursor: str | None = None) -> OutsideTick:
            return outside_tick(pipeline, instance, cursor)

        def skipped(looked: OutsideTick) -> str:
            assert not looked.result.run_requests and not looked.evaluations, looked.result.run_requests
            return looked.result.skip_reason.skip_message

        def warning(looked: OutsideTick) -> tuple[dg.AssetCheckEvaluation, str]:
            (request,) = looked.result.run_requests  # the tick launched a run: the daemon lists it as a success
            (warned,) = looked.evaluations
            assert warned.asset_key.to_user_string() == bronze and not warned.passed
            assert warned.severity == dg.AssetCheckSeverity.WARN
            return warned, warned.metadata["detail"].value

        dagsters_first = materialize()
        first = tick()  # a first look: Dagster's commit, and tables never written
        assert "no commit outside Dagster" in skipped(first)
        assert "no commit outside Dagster" in skipped(tick(first.cursor))

        # Another tool appends; a manifest rewrite (no rows changed) is not a change of data. The warning says what.
        lake.sql(f"INSERT INTO {qualified} SELECT * FROM {qualified} LIMIT 1")
        appended = current(settings).snapshot_id
        lake.sql(f"CALL {settings.catalog}.system.rewrite_manifests('{BRONZE_MERCHANTS.identifier}')")
        second = tick(first.cursor)
        warned, detail = warning(second)
        assert warned.metadata["violations"].value == 1
        assert f"append {appended} at " in detail and "(+1/-0 rows)" in detail
        assert warned.description.startswith("1 commit outside Dagster since ") and detail in warned.description

        # Two commits between ticks, then Dagster writes the same table: both are reported, Dagster's is not.
        lake.sql(f"INSERT INTO {qualified} SELECT * FROM {qualified} LIMIT 2")
        inserted = current(settings).snapshot_id
        merchant = lake.sql(f"SELECT min(merchant_id) FROM {qualified}").first()[0]
        lake.sql(f"DELETE FROM {qualified} WHERE merchant_id = {merchant}")
        deleted = current(settings)
        dagsters_second = materialize()
        third = tick(second.cursor)
        warned, detail = warning(third)
        assert warned.metadata["violations"].value == 2, detail
        assert f"append {inserted} at " in detail and "(+2/-0 rows)" in detail
        assert f"{deleted.summary.operation.value} {deleted.snapshot_id} at " in detail
        assert str(dagsters_second) not in detail
        assert "no commit outside Dagster" in skipped(tick(third.cursor))  # each reported once

        # Execute (the UI's button) judges what came since the check's last evaluation: nothing, so the warning
        # clears; the sensor then judges from there.
        run = dg.materialize([check], selection=dg.AssetSelection.checks(check), instance=instance)
        (evaluation,) = run.get_asset_check_evaluations()
        assert evaluation.passed and evaluation.description.startswith("no commit outside Dagster since ")

        # A commit made while a run that may have made it is in progress waits for the run's end, then is reported.
        busy = instance.add_run(dg.DagsterRun(job_name="etr_pipeline", status=dg.DagsterRunStatus.STARTED))
        lake.sql(f"INSERT INTO {qualified} SELECT * FROM {qualified} LIMIT 1")
        during = current(settings).snapshot_id
        waiting = tick(third.cursor)
        assert f"wait for run {busy.run_id[:8]}" in skipped(waiting)
        instance.delete_run(busy.run_id)
        warned, detail = warning(tick(waiting.cursor))
        assert f"append {during} at " in detail and warned.metadata["violations"].value == 1

        # Executed by hand before the sensor looks, the check reports it; the sensor does not report it again.
        lake.sql(f"INSERT INTO {qualified} SELECT * FROM {qualified} LIMIT 1")
        unseen = current(settings).snapshot_id
        run = dg.materialize([check], selection=dg.AssetSelection.checks(check), instance=instance)
        (evaluation,) = run.get_asset_check_evaluations()
        assert not evaluation.passed and f"append {unseen} at " in evaluation.metadata["detail"].value
        looked = tick(waiting.cursor)
        assert "no commit outside Dagster" in skipped(looked)

        # Rollbacks: the rollback_table job's is Dagster's; one made with `etr sql` is reported, naming its target.
        rolled = pipeline.resolve_job_def("rollback_table").execute_in_process(
            instance=instance,
            run_config={
                "ops": {
                    "rollback_table_op": {
                        "config": {
                            "table": BRONZE_MERCHANTS.identifier,
                            "snapshot_id": str(dagsters_second),
                            "reason": "rows inserted by hand",
                        }
                    }
                }
            },
        )
        assert rolled.success and current(settings).snapshot_id == dagsters_second
        lake.sql(
            f"CALL {settings.catalog}.system.rollback_to_snapshot('{BRONZE_MERCHANTS.identifier}', {dagsters_first})"
        )
        warned, detail = warning(tick(looked.cursor))
        assert warned.metadata["violations"].value == 1
        assert detail.startswith(f"rollback to append {dagsters_first} of "), detail


# A launched run executes at once, in this process (a code server would start a process of its own).
IN_THIS_PROCESS = {"module": "dagster._core.launcher.sync_in_memory_run_launcher", "class": "SyncInMemoryRunLauncher"}


def test_under_the_daemon_a_tick_that_finds_outside_commits_is_a_success_with_its_run(lake, settings, monkeypatch):
    """What the on-call engineer sees in the sensor's tick history: a tick that found commits launched a run (a
    success naming it) whose check fails naming them; the next tick, with nothing new, is skipped saying so."""
    from dagster._core.scheduler.instigation import TickStatus

    from etr_assets.lake.evolve import ensure_table
    from etr_assets_tests.daemon import launch_queued, workspace
    from etr_assets_tests.daemon import tick as daemon_tick

    monkeypatch.setenv("ETR_HOME", str(settings.home))
    monkeypatch.setenv("ETR_CATALOG", settings.catalog)
    qualified = BRONZE_MERCHANTS.qualified(settings.catalog)
    ensure_table(lake, settings.catalog, BRONZE_MERCHANTS)
    value = {"bigint": "1", "string": "'x'", "timestamp": "current_timestamp()", "date": "current_date()"}
    columns = ", ".join(f"{value[c.type]} AS {c.name}" for c in BRONZE_MERCHANTS.columns)
    lake.sql(f"INSERT INTO {qualified} SELECT {columns}")  # another tool's first commit: Dagster wrote nothing
    appended = current(settings).snapshot_id
    with (
        dg.instance_for_test(overrides={"run_launcher": IN_THIS_PROCESS}) as instance,
        workspace(instance, module="etr_assets_tests.defs.location_from_env") as context,
    ):
        first = daemon_tick(context, "commits_outside_dagster")
        assert first.status == TickStatus.SUCCESS, (first.status, first.skip_reason, first.error)
        (run_id,) = first.run_ids
        assert launch_queued(context) == [run_id]  # as the daemon's run queue does
        run = instance.get_run_by_id(run_id)
        assert run.job_name == "judge_commits_outside_dagster" and run.status == dg.DagsterRunStatus.SUCCESS
        (record,) = instance.event_log_storage.get_asset_check_execution_history(
            dg.AssetCheckKey(table_key(BRONZE_MERCHANTS), "commits_outside_dagster"), limit=1
        )
        evaluation = record.event.dagster_event.event_specific_data
        assert record.run_id == run_id and not evaluation.passed
        assert f"append {appended} at " in evaluation.description

        second = daemon_tick(context, "commits_outside_dagster")
        assert second.status == TickStatus.SKIPPED and "no commit outside Dagster" in second.skip_reason
