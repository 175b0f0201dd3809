"""Dagster runs on the local profile: the per-table pools serialize writers of each table.

The Hadoop catalog has no atomic commit on a local disk (docs/stack.md), so each table's writers take turns through
a Dagster concurrency pool (`etr_assets/conf/dagster.yaml`: one slot per pool, op granularity). Two real `dagster
asset materialize` processes start together on the same instance; their bronze and silver steps must not overlap,
both days must land exactly, and no slot stays claimed. (A run killed while it holds a slot, and the runs after it
that must not wait for ever: test_crash_recovery.py, whose kills land inside pooled steps.)
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from etr_assets_tests.test_cli_subprocess import isolated_env, tail

DAYS = ("2025-01-01", "2025-01-02")
PER_DAY = 30
SELECTION = "*silver/bnpl_transactions_clean"
DAGSTER = str(Path(sys.executable).parent / "dagster")
ETR = str(Path(sys.executable).parent / "etr")


def step_windows(dagster_home: Path) -> dict[str, list[tuple[float, float]]]:
    """(start, end) of every successful step by step key, across all runs of the instance."""
    from dagster import DagsterEventType, DagsterInstance

    windows: dict[str, list[tuple[float, float]]] = {}
    with DagsterInstance.from_config(str(dagster_home)) as instance:
        for run in instance.get_runs():
            starts = {}
            for entry in instance.all_logs(
                run.run_id, of_type={DagsterEventType.STEP_START, DagsterEventType.STEP_SUCCESS}
            ):
                if entry.dagster_event.event_type == DagsterEventType.STEP_START:
                    starts[entry.step_key] = entry.timestamp
                else:
                    windows.setdefault(entry.step_key, []).append((starts[entry.step_key], entry.timestamp))
    return windows


BRONZE_POOL = "iceberg_bronze_bnpl_transactions_raw"


def slot_holders(dagster_home: Path, pool: str) -> set[str]:
    from dagster import DagsterInstance

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
def test_concurrent_runs_take_turns_on_each_table(tmp_path, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    env = isolated_env(tmp_path, ETR_API_TRANSACTIONS_PER_DAY=str(PER_DAY), PYTHONWARNINGS="ignore")
    # What ./dev does for its instance: the storage created once (two processes creating SQLite schemas at once would
    # race) and the pools created before any run (Dagster creates them lazily, racily).
    subprocess.run([ETR, "prepare-instance"], env=env, capture_output=True, check=True, timeout=120)
    home = Path(env["DAGSTER_HOME"])
    processes = []
    try:
        for day in DAYS:
            processes.append(start_materialize(env, day, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for process in processes:
            out, err = process.communicate(timeout=600)
            assert process.returncode == 0, tail(err)
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    from dagster import DagsterInstance, DagsterRunStatus

    with DagsterInstance.from_config(str(home)) as instance:
        assert {r.status for r in instance.get_runs()} == {DagsterRunStatus.SUCCESS}
    assert slot_holders(home, BRONZE_POOL) == set()
    windows = step_windows(home)
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
