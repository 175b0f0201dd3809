"""`etr run DAY` / `etr run FIRST..LAST` through the real command, and the same check inside etr_pipeline.

A mistake is one line and exit 2 before anything runs: no Dagster import, no JVM, no run in the instance. A run
of etr_pipeline launched another way without a day, or with a reversed range, fails at its first steps (the raw
assets) with the same line and touches no table. A valid day is the run `dg launch` makes, ended by its id and
summary.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus

from etr_assets.run_request import PARTITION_TAG, RANGE_END_TAG, RANGE_START_TAG, last_complete_day
from etr_assets.run_summary import summarize_run
from etr_assets_tests.test_cli_subprocess import MATERIALIZE_TIMEOUT_S, finish, isolated_env, run, start

# Runs the CLI, then fails unless neither Dagster nor pyspark was imported: a mistake costs no JVM and no instance.
NOTHING_HEAVY = (
    "import sys; from etr_assets.cli import main; code = main(sys.argv[1:]); "
    "assert 'pyspark' not in sys.modules and 'dagster' not in sys.modules, 'imported'; sys.exit(code)"
)
VALID = f"give YYYY-MM-DD or FIRST..LAST, between 2025-01-01 and {last_complete_day()}"


def runs_in(env: dict[str, str]) -> list:
    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        return list(instance.get_runs())


def test_each_mistake_is_one_line_exit_2_and_no_run(tmp_path: Path) -> None:
    env = isolated_env(tmp_path)
    mistakes = {  # the issue's: no day, a reversed range, a future day, a day in the wrong format, before the start
        (): "no day given",
        ("2025-01-06..2025-01-05",): "2025-01-06..2025-01-05 is reversed: its first day is after its last",
        ("2099-01-01",): "2099-01-01 has not ended yet (UTC)",
        ("2025/01/04",): "2025/01/04 is not a day",
        ("2024-12-31",): "2024-12-31 is before the first day",
    }
    started = {
        args: subprocess.Popen(
            [sys.executable, "-c", NOTHING_HEAVY, "run", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for args in mistakes
    }
    for args, what in mistakes.items():
        out, err = started[args].communicate(timeout=60)
        assert (started[args].returncode, out.decode(), err.decode().splitlines()) == (
            2,
            "",
            [f"etr run: {what}: {VALID}"],
        ), err.decode()
    assert runs_in(env) == []  # nothing was launched


def test_the_days_start_at_etr_start_date_as_the_jobs_partitions_do(tmp_path: Path) -> None:
    """`./dev demo` and `./dev ui` set ETR_START_DATE to the demo's first day: `etr run` reads the same setting."""
    env = isolated_env(tmp_path, ETR_START_DATE="2025-01-03")
    done = subprocess.run(
        [sys.executable, "-c", NOTHING_HEAVY, "run", "2025-01-02..2025-01-04"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 2 and done.stderr.splitlines() == [
        f"etr run: 2025-01-02 is before the first day: give YYYY-MM-DD or FIRST..LAST, between 2025-01-03 and "
        f"{last_complete_day()}"
    ], done.stderr


@pytest.fixture
def pipeline_job(settings):
    from etr_assets.definitions import build_definitions

    return build_definitions(settings).resolve_job_def("etr_pipeline")


@pytest.mark.parametrize(
    ("tags", "line"),
    [
        ({}, "no day given (etr_pipeline runs for a partition or a range of them)"),
        (
            {RANGE_START_TAG: "2025-01-06", RANGE_END_TAG: "2025-01-05"},
            "2025-01-06...2025-01-05 is reversed: its first day is after its last",
        ),
    ],
)
def test_a_run_without_a_day_or_reversed_fails_at_its_first_steps_touching_nothing(
    pipeline_job, settings, tmp_path, tags, line
) -> None:
    with DagsterInstance.ephemeral() as instance:
        result = pipeline_job.execute_in_process(instance=instance, tags=tags, raise_on_error=False)
        assert not result.success
        failed = {e.step_key for e in result.all_events if e.event_type == DagsterEventType.STEP_FAILURE}
        assert failed and all(step.startswith("raw__") for step in failed), failed  # only the first steps
        summary = summarize_run(instance, result.run_id)
        assert summary.failures[0][1] == f"{line}: {VALID}", summary.failures
        assert summary.rows_by_table == {}  # nothing materialized
    assert not (settings.home / "raw").exists() or not any((settings.home / "raw").rglob("*.json*"))
    assert not (settings.home / "warehouse").exists()  # no table touched


@pytest.mark.slow  # two `dg launch` processes: 5-15 s here
def test_dg_launch_without_a_day_or_reversed_fails_its_run_in_that_line(tmp_path: Path) -> None:
    """The issue's two `dg launch` mistakes through the real command: each run fails at its raw steps, says why in
    the line `etr run` gives, and its summary (the log's last lines) names it; no table is created."""
    env = isolated_env(tmp_path)
    assert runs_in(env) == []  # the instance's storage made once: two first runs at once would race to make it
    launches = {
        "no day given (etr_pipeline runs for a partition or a range of them)": [],
        "2025-01-06...2025-01-05 is reversed: its first day is after its last": [
            "--partition-range",
            "2025-01-06...2025-01-05",
        ],
    }
    started = {line: start(["dg", "launch", "--job", "etr_pipeline", *args], env) for line, args in launches.items()}
    for line, proc in started.items():
        done = finish(proc, MATERIALIZE_TIMEOUT_S)
        assert done.returncode != 0, done.describe()
        assert re.search(rf"failed: raw__bnpl_\w+: {re.escape(f'{line}: {VALID}')}", done.stderr), done.describe()
    runs = runs_in(env)
    assert len(runs) == 2 and {r.status for r in runs} == {DagsterRunStatus.FAILURE}, runs
    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        for launched in runs:
            summary = summarize_run(instance, launched.run_id)
            assert summary.rows_by_table == {} and all(step.startswith("raw__") for step, _ in summary.failures)
    assert not (Path(env["ETR_HOME"]) / "warehouse").exists()


@pytest.mark.slow  # a real run: the JVM starts in `dagster job execute` (about a minute here)
def test_a_valid_day_launches_the_dg_launch_run_and_ends_with_its_id_and_summary(tmp_path: Path) -> None:
    env = isolated_env(tmp_path, ETR_API_TRANSACTIONS_PER_DAY="20")
    run(["etr", "prepare-instance"], env)  # what ./dev does first
    done = run(["etr", "run", "2025-01-01"], env, MATERIALIZE_TIMEOUT_S)
    assert done.returncode == 0, done.describe()

    (launched,) = runs_in(env)  # one run, as `dg launch --job etr_pipeline --partition 2025-01-01` makes it
    assert launched.job_name == "etr_pipeline" and launched.status == DagsterRunStatus.SUCCESS
    assert launched.tags[PARTITION_TAG] == "2025-01-01"
    assert "etr run: etr_pipeline for 2025-01-01" in done.stderr  # then the run's log, streamed
    assert "raw/bnpl_transactions" in done.stderr or "raw__bnpl_transactions" in done.stderr, done.describe()
    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        summary = summarize_run(instance, launched.run_id)
    assert done.stdout.splitlines() == [f"run {launched.run_id}", *summary.lines()], done.describe()
    assert summary.status == "SUCCESS" and summary.failed == 0 and summary.rows_by_table, summary
