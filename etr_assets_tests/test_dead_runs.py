"""A run the daemon launched, killed with SIGKILL inside a pooled step, as an on-call engineer sees it.

A real `dagster-daemon` (every daemon: run queue, monitoring, sensors) on an instance prepared by `etr prepare-instance`
launches `bnpl_ingest` for a day through its code server. Once the run holds the customers bronze pool's one slot, the
test kills its process with SIGKILL. The code server marks the run failed at once, with a line blaming the OS running
out of memory, and leaves the slot claimed (Dagster's run monitoring frees it a minute after the run's end at the
soonest). Then the `dead_runs` sensor is switched on: its first tick must free the slot, be a SUCCESS naming the run
(not SKIPPED), and leave a summary whose last line says the process was killed by SIGKILL in that step, not for lack
of memory (unless the kernel killed a process for memory meanwhile), in the run's log and on the daemon's console.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus
from dagster._core.scheduler.instigation import InstigatorType, TickStatus

from etr_assets.defs.run_guard import OOM_TAG, PID_TAG, oom_kills
from etr_assets.defs.run_summary import summarize_run
from etr_assets_tests.test_cli_subprocess import isolated_env, prepare_instance
from etr_assets_tests.test_dagster_dev import stop_group, tail

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
WORKSPACE = ["-w", str(REPO / "workspace.yaml")]
POOL, STEP = "iceberg_bronze_bnpl_customers_raw", "bronze__bnpl_customers_raw"
DAY = "2025-01-01"


def wait_for(what: str, found, log: Path, timeout: float = 240):
    deadline = time.monotonic() + timeout
    while not (result := found()):
        assert time.monotonic() < deadline, f"no {what} after {timeout:.0f} s; the daemon's log:\n{tail(log, 60)}"
        time.sleep(0.25)
    return result


def dagster(env: dict[str, str], *args: str) -> None:
    subprocess.run([str(BIN / "dagster"), *args, *WORKSPACE], env=env, cwd=REPO, capture_output=True, check=True)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_run_killed_under_the_daemon_is_explained_and_its_slot_freed_at_the_next_tick(tmp_path):
    env = isolated_env(tmp_path, ETR_API_TRANSACTIONS_PER_DAY="30", PYTHONWARNINGS="ignore")
    prepare_instance(env)
    log = tmp_path / "daemon.log"
    with log.open("w") as out:
        daemon = subprocess.Popen(
            [str(BIN / "dagster-daemon"), "run", *WORKSPACE],
            env=env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the daemon, its code server and the runs it launches: one group to stop
        )
    try:
        with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
            storage = instance.event_log_storage
            dagster(env, "job", "launch", "-j", "bnpl_ingest", "--tags", json.dumps({"dagster/partition": DAY}))
            (run,) = instance.get_runs()

            def holding():
                """The run, once it holds the pool's slot and its step has started: the slot is claimed just before
                the step's start is logged, and a kill in between leaves no step to name."""
                current = instance.get_run_by_id(run.run_id)
                claimed = {slot.run_id for slot in storage.get_concurrency_info(POOL).claimed_slots}
                started = instance.all_logs(run.run_id, of_type=DagsterEventType.STEP_START)
                in_step = any(record.dagster_event.step_key == STEP for record in started)
                return current if run.run_id in claimed and PID_TAG in current.tags and in_step else None

            run = wait_for(f"slot of {POOL} claimed by the run and {STEP} started", holding, log)
            os.kill(int(run.tags[PID_TAG]), signal.SIGKILL)
            killed_at = time.monotonic()

            # The code server fails the run at once, blaming memory, and the slot stays claimed.
            failed = wait_for(
                "run marked failed by its code server",
                lambda: instance.get_run_by_id(run.run_id).status == DagsterRunStatus.FAILURE,
                log,
                timeout=60,
            )
            assert failed
            crash = [e.message for e in instance.all_logs(run.run_id) if "terminated by signal 9" in (e.message or "")]
            assert crash and "running out of memory" in crash[0], "Dagster's code server no longer says this"
            assert {slot.run_id for slot in storage.get_concurrency_info(POOL).claimed_slots} == {run.run_id}

            dagster(env, "sensor", "start", "dead_runs")
            (state,) = [
                s for s in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR) if s.name == "dead_runs"
            ]

            def first_tick():
                ticks = instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=1)
                return ticks[0] if ticks and ticks[0].status != TickStatus.STARTED else None

            tick = wait_for("tick of dead_runs", first_tick, log, timeout=120)
            freed_after = time.monotonic() - killed_at
            assert tick.status == TickStatus.SUCCESS, (tick.status, tick.skip_reason, tail(log, 60))
            assert tick.tick_data.origin_run_ids == [run.run_id]
            assert storage.get_concurrency_info(POOL).claimed_slots == []
            assert freed_after < 60, "freed by the sensor, before Dagster's run monitoring could have"

            summary = summarize_run(instance, run.run_id)
            last = summary.lines()[-1]
            host_kills = oom_kills()
            assert last.startswith(f"  failed: {STEP}: run worker process {run.tags[PID_TAG]} on ")
            assert "was killed by signal 9 (SIGKILL)" in last
            if host_kills is not None and run.tags.get(OOM_TAG) == str(host_kills):  # none for memory meanwhile
                assert "not for lack of memory" in last and "out of memory" not in last
            assert summary.status == "FAILURE"
            # What the on-call engineer reads: the run's log, and the console of the daemon (its code server).
            assert any(last in (e.message or "") for e in instance.all_logs(run.run_id))
            wait_for("the summary on the daemon's console", lambda: last.strip() in log.read_text(), log, timeout=30)
    finally:
        stop_group(daemon)
