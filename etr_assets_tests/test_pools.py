"""Dagster runs on the local profile: the per-table pools serialize writers of each table.

The Hadoop catalog has no atomic commit on a local disk (docs/stack.md), so each table's writers take turns through
a Dagster concurrency pool (`etr_assets/conf/dagster.yaml`: one slot per pool, op granularity). Two real `dagster
asset materialize` processes start together on the same instance while the test holds the bronze pool's one slot:
both must queue behind it (so they ran at the same time), then, once it is let go, their bronze and silver steps
must not overlap, both days must land exactly, and no slot stays claimed. (A run killed while it holds a slot, and
the runs after it that must not wait for ever: test_crash_recovery.py, whose kills land inside pooled steps.)
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus

from etr_assets_tests.test_cli_subprocess import isolated_env, prepare_instance, tail

DAYS = ("2025-01-01", "2025-01-02")
PER_DAY = 30
SELECTION = "*silver/bnpl_transactions_clean"
DAGSTER = str(Path(sys.executable).parent / "dagster")


def step_windows(instance, end=DagsterEventType.STEP_SUCCESS) -> dict[str, list[tuple[float, float]]]:
    """(start, `end` event) of every step by step key, across all runs of the instance (end=STEP_START: started)."""
    windows: dict[str, list[tuple[float, float]]] = {}
    for run in instance.get_runs():
        starts = {}
        for entry in instance.all_logs(run.run_id, of_type={DagsterEventType.STEP_START, end}):
            if entry.dagster_event.event_type == DagsterEventType.STEP_START:
                starts[entry.step_key] = entry.timestamp
            if entry.dagster_event.event_type == end:
                windows.setdefault(entry.step_key, []).append((starts[entry.step_key], entry.timestamp))
    return windows


BRONZE_POOL = "iceberg_bronze_bnpl_transactions_raw"
HOLDER = ("the-test-holds-the-slot", "held_by_the_test")  # (run id, step key) of the test's own claim


def queued_runs(dagster_home: Path, processes: list[subprocess.Popen], logs: list[Path]) -> set[str]:
    """The runs waiting for BRONZE_POOL once every process has one there; fails if a bronze step starts first. One
    instance for every poll: opening one is most of a poll's cost."""
    deadline = time.monotonic() + 300
    with DagsterInstance.from_config(str(dagster_home)) as instance:
        while True:
            for process, log in zip(processes, logs):
                assert process.poll() is None, f"a run ended while the test held the slot:\n{tail(log.read_text())}"
            started = step_windows(instance, DagsterEventType.STEP_START).get("bronze__bnpl_transactions_raw")
            assert not started, "a bronze step started while the test held the pool's only slot"
            waiting = instance.event_log_storage.get_concurrency_info(BRONZE_POOL).pending_run_ids
            if len(waiting) == len(processes):
                return waiting
            assert time.monotonic() < deadline, f"only {len(waiting)} run(s) reached the bronze pool"
            time.sleep(0.5)


def slot_holders(dagster_home: Path, pool: str) -> set[str]:
    with DagsterInstance.from_config(str(dagster_home)) as instance:
        return {slot.run_id for slot in instance.event_log_storage.get_concurrency_info(pool).claimed_slots}


def start_materialize(env: dict[str, str], day: str, **output) -> subprocess.Popen:
    """`dagster asset materialize` of SELECTION for one day, in a process group of its own (to kill it whole)."""
    command = [
        DAGSTER,
        "asset",
        "materialize",
        "-m",
        "etr_assets.definitions",
        "--select",
        SELECTION,
        "--partition",
        day,
    ]
    return subprocess.Popen(command, env=env, cwd=Path(__file__).resolve().parents[1], start_new_session=True, **output)


@pytest.mark.slow
def test_concurrent_runs_take_turns_on_each_table(tmp_path):
    env = isolated_env(tmp_path, ETR_API_TRANSACTIONS_PER_DAY=str(PER_DAY), PYTHONWARNINGS="ignore")
    # What ./dev does for its instance (`etr prepare-instance`, in process: the test is not about the command): the
    # storage created once (two processes creating SQLite schemas at once would race) and the pools created before
    # any run (Dagster creates them lazily, racily).
    prepare_instance(env)
    home = Path(env["DAGSTER_HOME"])
    with DagsterInstance.from_config(str(home)) as instance:
        assert instance.event_log_storage.claim_concurrency_slot(BRONZE_POOL, *HOLDER).is_claimed
    processes, logs = [], [tmp_path / f"{day}.log" for day in DAYS]
    try:
        for day, log in zip(DAYS, logs):
            with log.open("w") as out:  # a file, not a pipe: nobody reads while the runs wait
                processes.append(start_materialize(env, day, stdout=out, stderr=subprocess.STDOUT))
        # Both runs wait for the slot at once: they ran concurrently, and neither has written bronze yet.
        assert len(queued_runs(home, processes, logs)) == len(DAYS)
        with DagsterInstance.from_config(str(home)) as instance:
            instance.event_log_storage.free_concurrency_slot_for_step(*HOLDER)
        for process, log in zip(processes, logs):
            assert process.wait(timeout=600) == 0, tail(log.read_text())
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    with DagsterInstance.from_config(str(home)) as instance:
        assert {r.status for r in instance.get_runs()} == {DagsterRunStatus.SUCCESS}
        windows = step_windows(instance)
    assert slot_holders(home, BRONZE_POOL) == set()
    for step in ("bronze__bnpl_transactions_raw", "silver__bnpl_transactions_clean"):
        (first, second) = sorted(windows[step])
        assert first[1] <= second[0], f"{step}: the two runs wrote at the same time: {first} and {second}"

    # Read back without a JVM (pyiceberg, as `etr tables` reads): each day holds exactly the API's transactions.
    from etr_assets.lake.metadata import load_table
    from etr_assets.settings import Settings
    from etr_assets.tables.transactions import SILVER_TRANSACTIONS

    silver = load_table(Settings.from_env(env), SILVER_TRANSACTIONS)
    days = silver.scan(selected_fields=("transaction_date",)).to_arrow().column("transaction_date").to_pylist()
    assert collections.Counter(day.isoformat() for day in days) == dict.fromkeys(DAYS, PER_DAY)
