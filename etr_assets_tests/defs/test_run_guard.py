"""A run whose process died frees its pool slots and ends as failed, with no one freeing them by hand.

A real Dagster instance (SQLite storage with pools) holds a STARTED run whose worker process is gone and a pool
slot it claimed; the `dead_runs` sensor (and every run's executor, through `reap_dead_runs`) must fail the run and
free the slot, and leave alone a run whose process lives and a run of another host. A run a code server already
marked failed (as it does when its run process dies, guessing "out of memory" for any SIGKILL) gets its slots freed
at the sensor's next tick and its summary says how the process ended. Ticks go through the daemon's code path
(`etr_assets_tests/daemon.py`): a tick that acted is SUCCESS, one that did nothing SKIPPED. Real runs killed with
SIGKILL: test_dead_runs.py (under the daemon) and test_crash_recovery.py (inside pooled steps).
"""

from __future__ import annotations

import subprocess

import pytest
from dagster import DagsterInstance, DagsterRunStatus, build_sensor_context, job, op
from dagster._core.scheduler.instigation import TickStatus
from dagster._utils import get_run_crash_explanation

from etr_assets.defs import run_guard
from etr_assets.defs.run_guard import (
    END_TAG,
    HOST_TAG,
    OOM_TAG,
    PID_TAG,
    dead_runs_sensor,
    oom_kills,
    reap_dead_runs,
    worker_tags,
)
from etr_assets.defs.run_summary import summarize_run
from etr_assets_tests.daemon import tick, workspace

POOL = "iceberg_bronze_example"


@op
def noop():
    pass


@job
def example():
    noop()


def started_run(instance, tags):
    run = instance.create_run_for_job(example, tags=tags)
    instance.handle_run_event(run.run_id, _start_event(run))
    instance.event_log_storage.claim_concurrency_slot(POOL, run.run_id, "noop")
    return run.run_id


def _start_event(run):
    from dagster._core.events import DagsterEvent, DagsterEventType

    return DagsterEvent(DagsterEventType.RUN_START.value, job_name=run.job_name)


def test_a_dead_run_is_failed_and_its_slot_freed_and_live_or_foreign_runs_are_left_alone(tmp_path):
    finished = subprocess.Popen(["true"])
    finished.wait()  # a process that existed and is gone
    dead_tags = {**worker_tags(), PID_TAG: str(finished.pid)}
    with DagsterInstance.from_config(str(_home(tmp_path))) as instance:
        instance.event_log_storage.set_concurrency_slots(POOL, 3)
        dead = started_run(instance, dead_tags)
        alive = started_run(instance, worker_tags())  # this test's own process
        foreign = started_run(instance, {**dead_tags, HOST_TAG: "another-host"})

        result = dead_runs_sensor(build_sensor_context(instance=instance))

        assert [reaction.dagster_run.run_id for reaction in result] == [dead]  # a reaction: the tick is a success
        assert instance.get_run_by_id(dead).status == DagsterRunStatus.FAILURE
        assert instance.get_run_by_id(alive).status == DagsterRunStatus.STARTED
        assert instance.get_run_by_id(foreign).status == DagsterRunStatus.STARTED
        holders = {slot.run_id for slot in instance.event_log_storage.get_concurrency_info(POOL).claimed_slots}
        assert holders == {alive, foreign}
        failure = [
            e
            for e in instance.all_logs(dead)
            if e.dagster_event and e.dagster_event.event_type_value == "PIPELINE_FAILURE"
        ]
        assert f"run worker process {finished.pid}" in failure[0].message
        assert reap_dead_runs(instance) == []  # nothing left to do
        assert summarize_run(instance, dead).failures == (("run", gone(finished.pid)),)


def gone(pid: int, how: str = "is gone (killed or crashed: no exit status was recorded)") -> str:
    """What the guard says of a run worker that ran on this host, no process having been killed for memory since."""
    from etr_assets.defs.run_guard import socket

    host = socket.gethostname()
    return (
        f"run worker process {pid} on {host} {how}, not for lack of memory: the kernel killed no process on {host} "
        "for memory since the run started (/proc/vmstat oom_kill)"
    )


needs_vmstat = pytest.mark.skipif(oom_kills() is None, reason="no /proc/vmstat oom_kill on this machine")


def failed_by_a_code_server(instance, tags, exit_code=-9) -> str:
    """A STARTED run holding a slot, then what a code server does when its process dies (`_check_for_orphaned_runs`):
    its crash explanation as an engine event, and the run marked failed; the slot stays claimed."""
    run_id = started_run(instance, tags)
    run = instance.get_run_by_id(run_id)
    message = get_run_crash_explanation(prefix=f"Run execution process for {run_id}", exit_code=exit_code)
    instance.report_engine_event(message, run)
    instance.report_run_failed(run)
    return run_id


def slot_holders(instance) -> set[str]:
    return {slot.run_id for slot in instance.event_log_storage.get_concurrency_info(POOL).claimed_slots}


@needs_vmstat
def test_a_run_a_code_server_failed_gets_its_slots_freed_at_the_next_tick_and_its_summary_says_it_was_killed(
    tmp_path,
):
    killed = subprocess.Popen(["sleep", "60"])
    tags = worker_tags() | {PID_TAG: str(killed.pid)}
    killed.kill()
    killed.wait()
    with DagsterInstance.from_config(str(_home(tmp_path))) as instance:
        instance.event_log_storage.set_concurrency_slots(POOL, 3)
        dead = failed_by_a_code_server(instance, tags)
        crash = [e.message for e in instance.all_logs(dead) if "terminated by signal 9" in (e.message or "")]
        assert "running out of memory" in crash[0]  # Dagster's guess for any SIGKILL: what the guard corrects
        assert slot_holders(instance) == {dead}
        with workspace(instance) as context:
            acted, idle = tick(context, "dead_runs"), tick(context, "dead_runs")

        assert acted.status == TickStatus.SUCCESS and acted.tick_data.origin_run_ids == [dead]
        assert idle.status == TickStatus.SKIPPED and idle.skip_reason == "no dead run"
        assert slot_holders(instance) == set()
        why = gone(killed.pid, "was killed by signal 9 (SIGKILL)")
        summary = summarize_run(instance, dead)
        assert summary.status == "FAILURE" and summary.failures == (("run", why),)  # no step had started
        assert summary.lines()[-1] == f"  failed: run: {why}"
        # The run's log ends with that summary (then the daemon's note that the sensor acted on the run).
        messages = [e.message for e in instance.all_logs(dead)]
        assert messages[-2].endswith(summary.lines()[-1]) and "dead_runs" in messages[-1]
        failures = [e for e in instance.all_logs(dead) if e.dagster_event and e.dagster_event.is_run_failure]
        assert len(failures) == 1, "the code server failed the run: the guard did not fail it again"
        assert instance.get_run_by_id(dead).tags[END_TAG] == "gone"


def test_out_of_memory_is_said_only_when_the_kernel_killed_a_process_for_memory_meanwhile(tmp_path, monkeypatch):
    finished = subprocess.Popen(["true"])
    finished.wait()
    monkeypatch.setattr(run_guard, "oom_kills", lambda: 8)  # the kernel killed one process for memory meanwhile
    with DagsterInstance.from_config(str(_home(tmp_path))) as instance:
        dead = failed_by_a_code_server(instance, worker_tags() | {PID_TAG: str(finished.pid), OOM_TAG: "7"})
        assert [r.run_id for r in reap_dead_runs(instance)] == [dead]  # its slot
        (step, why) = summarize_run(instance, dead).failures[0]
    assert "was killed by signal 9 (SIGKILL); the kernel killed 1 process(es)" in why
    assert why.endswith("probably out of memory, `dmesg` names them")


def test_the_sensor_explains_a_failed_run_whose_slots_are_already_free_and_leaves_ended_runs_alone(tmp_path):
    finished = subprocess.Popen(["true"])
    finished.wait()
    tags = worker_tags() | {PID_TAG: str(finished.pid)}
    with DagsterInstance.from_config(str(_home(tmp_path))) as instance:
        instance.event_log_storage.set_concurrency_slots(POOL, 3)
        freed = failed_by_a_code_server(instance, tags)
        instance.event_log_storage.free_concurrency_slots_for_run(freed)  # Dagster's run monitoring came first
        ended = failed_by_a_code_server(instance, tags | {END_TAG: "ended"})  # its process ended the run itself
        earlier = failed_by_a_code_server(instance, {k: v for k, v in tags.items() if k != OOM_TAG})  # old version
        instance.event_log_storage.free_concurrency_slots_for_run(ended)
        instance.event_log_storage.free_concurrency_slots_for_run(earlier)

        # A run's executor frees slots and fails runs, but explains no run that holds nothing.
        assert reap_dead_runs(instance, current_run_id="a-starting-run") == []
        # The sensor also looks at the runs of this host that failed since its previous tick.
        with workspace(instance) as context:
            acted = tick(context, "dead_runs")
        assert acted.status == TickStatus.SUCCESS and acted.tick_data.origin_run_ids == [freed]
        assert summarize_run(instance, freed).failures[0][1].startswith(f"run worker process {finished.pid} ")
        assert summarize_run(instance, ended).failures == (("run", FAILED_FROM_OUTSIDE),)
        assert summarize_run(instance, earlier).failures == (("run", FAILED_FROM_OUTSIDE),)


FAILED_FROM_OUTSIDE = "This run has been marked as failed from outside the execution context."


def test_a_starting_run_frees_the_slots_of_a_run_a_code_server_failed(tmp_path):
    finished = subprocess.Popen(["true"])
    finished.wait()
    with DagsterInstance.from_config(str(_home(tmp_path))) as instance:
        instance.event_log_storage.set_concurrency_slots(POOL, 3)
        dead = failed_by_a_code_server(instance, worker_tags() | {PID_TAG: str(finished.pid)}, exit_code=-15)
        (reaped,) = reap_dead_runs(instance, current_run_id="a-starting-run")
        assert (reaped.run_id, reaped.failed, reaped.freed) == (dead, False, True)
        assert slot_holders(instance) == set()
        assert "was killed by signal 15 (SIGTERM)" in reaped.summary[-1]


def _home(tmp_path):
    home = tmp_path / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text("concurrency:\n  pools:\n    default_limit: 1\n")
    return home


def test_only_a_run_materializing_days_must_name_them():
    """The executor's check of a run's days (`refusal`) applies to a run that materializes daily partitions, of a
    named job or of an asset selection; not to a job without partitions, nor to a run of checks alone (*Execute*
    on `commits_outside_dagster` in the UI: a run of the implicit asset job, whose partitions are the assets')."""
    from types import SimpleNamespace

    from dagster import AssetKey

    from etr_assets.definitions import defs
    from etr_assets.defs.run_guard import refusal

    repository = defs.get_repository_def()
    assets = repository.get_job("__ASSET_JOB")
    (outside,) = [
        key
        for key in repository.asset_graph.asset_check_keys
        if key.name == "commits_outside_dagster" and key.asset_key == AssetKey(["silver", "bnpl_transactions_clean"])
    ]

    def refused(job_def, tags=None) -> str | None:  # what the executor reads of its plan context
        job, run = SimpleNamespace(get_definition=lambda: job_def), SimpleNamespace(tags=tags or {})
        return refusal(SimpleNamespace(job=job, job_name=job_def.name, dagster_run=run))

    assert refused(defs.resolve_job_def("etr_pipeline")).startswith("no day given (etr_pipeline runs for ")
    assert refused(defs.resolve_job_def("etr_pipeline"), {"dagster/partition": "2025-01-02"}) is None
    assert refused(defs.resolve_job_def("bnpl_ingest")).startswith("no day given (bnpl_ingest runs for ")
    silver = assets.get_subset(asset_selection={AssetKey(["silver", "bnpl_transactions_clean"])})
    assert refused(silver).startswith("no day given (its assets run for ")
    assert refused(assets.get_subset(asset_selection=set(), asset_check_selection={outside})) is None
    assert refused(defs.resolve_job_def("rollback_table")) is None
