"""`etr run DAY` / `etr run FIRST..LAST` through the real command, and the same check inside etr_pipeline.

A mistake is one line and exit 2 before anything runs: no Dagster import, no JVM, no run in the instance. A run
of etr_pipeline launched another way without a day, or with a reversed range, is refused by the code location's
executor before any step runs, its first step failed with the same line (no stack trace), and touches no table. A
valid day is the run `dg launch` makes, ended by its id and summary.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest
from dagster import (
    AssetPartitionStatus,
    DagsterEventType,
    DagsterInstance,
    DagsterRunStatus,
    execute_job,
    reconstructable,
)

from etr_assets.defs.announcements import API_STARTED, SPARK_STARTING
from etr_assets.defs.resources import SourceApiResource
from etr_assets.defs.run_summary import summarize_run
from etr_assets.run_days import PARTITION_TAG, RANGE_END_TAG, RANGE_START_TAG, last_complete_day
from etr_assets_tests.test_cli_subprocess import (
    BIN,
    MATERIALIZE_TIMEOUT_S,
    Done,
    finish,
    isolated_env,
    prepare_instance,
    start,
)

# Runs the CLI, then fails unless neither Dagster nor pyspark was imported: a mistake costs no JVM and no instance.
NOTHING_HEAVY = (
    "import sys; from etr_assets.cli import main; code = main(sys.argv[1:]); "
    "assert 'pyspark' not in sys.modules and 'dagster' not in sys.modules, 'imported'; sys.exit(code)"
)


def hints_since(before: dt.date, first: str = "2025-01-01") -> set[str]:
    """The hint a mistake ends with, for the last day at `before` (read before the action) and now: the last day
    is the clock's, so an action that crosses midnight UTC may give either."""
    return {f"give YYYY-MM-DD or FIRST..LAST, between {first} and {last}" for last in (before, last_complete_day())}


def runs_in(env: dict[str, str]) -> list:
    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        return list(instance.get_runs())


def test_each_mistake_is_one_line_exit_2_and_no_run(tmp_path: Path) -> None:
    env, before = isolated_env(tmp_path), last_complete_day()
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
        expected = [(2, "", [f"etr run: {what}: {hint}"]) for hint in hints_since(before)]
        assert (started[args].returncode, out.decode(), err.decode().splitlines()) in expected, err.decode()
    assert runs_in(env) == []  # nothing was launched


def test_the_days_start_at_etr_start_date_as_the_jobs_partitions_do(tmp_path: Path) -> None:
    """`./dev demo` and `./dev ui` set ETR_START_DATE to the demo's first day: `etr run` reads the same setting."""
    env, before = isolated_env(tmp_path, ETR_START_DATE="2025-01-03"), last_complete_day()
    done = subprocess.run(
        [sys.executable, "-c", NOTHING_HEAVY, "run", "2025-01-02..2025-01-04"], env=env, capture_output=True, text=True
    )
    expected = [[f"etr run: 2025-01-02 is before the first day: {hint}"] for hint in hints_since(before, "2025-01-03")]
    assert done.returncode == 2 and done.stderr.splitlines() in expected, done.stderr


def pipeline_job():
    """etr_pipeline with the code location's executor, on the environment's settings (module level:
    `execute_job` reconstructs it)."""
    from etr_assets.definitions import build_definitions
    from etr_assets.settings import Settings

    return build_definitions(Settings.from_env()).resolve_job_def("etr_pipeline")


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
def test_a_run_without_a_day_or_reversed_fails_once_at_its_first_step_touching_nothing(
    monkeypatch, tmp_path, tags, line
) -> None:
    """The run guard refuses the run before any step starts: its first step failed with the reason as its message
    and failure (no error: nothing ran), no step started, no asset's day marked failed."""
    home = tmp_path / "etr"
    monkeypatch.setenv("ETR_HOME", str(home))
    monkeypatch.delenv("ETR_START_DATE", raising=False)
    before = last_complete_day()
    with DagsterInstance.ephemeral() as instance:
        with execute_job(reconstructable(pipeline_job), instance=instance, tags=tags) as result:
            assert not result.success
            job = result.job_def
        steps = [(e.event_type, e.step_key) for e in result.all_events if e.step_key]
        first = steps[0][1]
        assert first.startswith("raw__") and steps == [(DagsterEventType.STEP_FAILURE, first)], steps
        (failed,) = [e for e in result.all_events if e.is_step_failure]
        summary = summarize_run(instance, result.run_id)
        assert summary.failures in [((first, f"{line}: {hint}"),) for hint in hints_since(before)]  # one line
        assert failed.message == summary.failures[0][1] and failed.step_failure_data.error is None  # no stack
        assert summary.rows_by_table == {}  # nothing materialized
        partitions = job.partitions_def
        for key in job.asset_layer.executable_asset_keys:
            status = instance.get_status_by_partition(key, ["2025-01-05", "2025-01-06"], partitions) or {}
            assert AssetPartitionStatus.FAILED not in status.values(), (key, status)
    assert not (home / "raw").exists() or not any((home / "raw").rglob("*.json*"))
    assert not (home / "warehouse").exists()  # no table touched


@pytest.mark.slow  # two `dg launch` processes: 5-15 s here
def test_dg_launch_without_a_day_or_reversed_says_why_first_in_three_lines(tmp_path: Path) -> None:
    """The issue's `dg launch` mistakes through the real command (71 lines, two tracebacks, the reason on line 9):
    the output is the refused step's line, which ends with the line `etr run` gives, then the run's failure and
    dg's last word, no stack trace; the run (Dagster made it before the code location saw it) failed at that step
    alone; no table is created. `bnpl_ingest` names itself."""
    env, before = isolated_env(tmp_path, VIRTUAL_ENV=str(BIN.parent)), last_complete_day()  # the README's venv
    assert runs_in(env) == []  # the instance's storage made once: two first runs at once would race to make it
    launches = {
        ("etr_pipeline", "no day given (etr_pipeline runs for a partition or a range of them)"): [],
        ("etr_pipeline", "2025-01-06...2025-01-05 is reversed: its first day is after its last"): [
            "--partition-range",
            "2025-01-06...2025-01-05",
        ],
        ("bnpl_ingest", "no day given (bnpl_ingest runs for a partition or a range of them)"): [],
    }
    started = {key: start(["dg", "launch", "--job", key[0], *args], env) for key, args in launches.items()}
    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        for (job, line), proc in started.items():
            done = finish(proc, MATERIALIZE_TIMEOUT_S)
            assert done.returncode != 0 and done.stdout == "", done.describe()
            said = [f"{line}: {hint}" for hint in hints_since(before)]
            lines = done.stderr.splitlines()
            assert len(lines) == 3 and "Trace" not in done.stderr, done.describe()  # no stack trace, nor traceback
            step = re.fullmatch(
                rf".* - ERROR - {job} - ([0-9a-f-]{{36}}) - \d+ - (raw__bnpl_\w+) - STEP_FAILURE - (.*)", lines[0]
            )
            assert step and step[3] in said, done.describe()
            assert lines[1].endswith(
                f"RUN_FAILURE - Execution of run for \"{job}\" failed. Steps failed: ['{step[2]}']."
            ), lines
            assert lines[2] == f"Error: Run {step[1]} resulted in failure.", lines
            summary = summarize_run(instance, step[1])
            assert summary.status == "FAILURE" and summary.failures == ((step[2], step[3]),), summary
            assert summary.rows_by_table == {}
    assert len(runs_in(env)) == len(launches)
    assert not (Path(env["ETR_HOME"]) / "warehouse").exists()


@dg.op
def ask_the_api(bnpl_api: SourceApiResource) -> None:
    assert bnpl_api.client().get_json("/health", {}) == {"status": "ok"}  # over HTTP


@dg.job(
    resource_defs={"bnpl_api": SourceApiResource(source="bnpl", start_synthetic=True)},
    executor_def=dg.in_process_executor,
)
def asks_the_api():
    """One step asking the synthetic API (the pipeline's resource, no URL) for its health."""
    ask_the_api()


def test_the_synthetic_api_starts_once_a_run_though_dagster_initialises_resources_again() -> None:
    """`dagster job execute` (what `dg launch` runs) opens the run's result, which initialises every resource again
    after the run: the API starts when a step first asks, so that second initialisation starts none."""
    with DagsterInstance.ephemeral() as instance:
        with execute_job(reconstructable(asks_the_api), instance=instance) as result:  # as `dagster job execute` does
            assert result.success
        logs = instance.all_logs(result.run_id)
    kinds = Counter(e.dagster_event.event_type for e in logs if e.is_dagster_event)
    assert kinds[DagsterEventType.RESOURCE_INIT_STARTED] == 2, kinds  # Dagster's own, twice
    said = [e.user_message for e in logs if not e.is_dagster_event]
    assert [message.startswith(API_STARTED) for message in said] == [True], said


def run_merged(args: list[str], env: dict[str, str]) -> Done:
    """A command from the venv's bin, its stderr into its stdout: the lines in the order a terminal shows them."""
    merged = start(args, env, stderr=subprocess.STDOUT)
    done = finish(merged, MATERIALIZE_TIMEOUT_S)
    return dataclasses.replace(done, stderr="")


STEP_LINE = re.compile(r"  (\w+) +(ok|FAILED)\b.*")
ROWS = re.compile(r"([\d,]+) rows\b")


def step_lines(lines: list[str]) -> dict[str, str]:
    """Each step's line, by step; fails on a step with more than one."""
    steps = [STEP_LINE.fullmatch(line) for line in lines]
    named = [m[1] for m in steps if m]
    assert len(named) == len(set(named)), named
    return {m[1]: m[0] for m in steps if m}


@pytest.mark.slow  # a real run: the JVM starts in the run's process
def test_a_valid_day_reads_as_a_report_a_line_a_step_and_its_summary_last(tmp_path: Path) -> None:
    """The issue's `dg launch` printed 155-201 lines, 135 DEBUG, the summary in the middle, nothing while the JVM
    started, and the synthetic API started again after the run. `etr run DAY`: a line a step, the API and Spark
    announced as they start, once each, then the run's id and summary, last."""
    env = isolated_env(tmp_path, ETR_API_TRANSACTIONS_PER_DAY="20")
    prepare_instance(env)  # what ./dev does first
    done = run_merged(["etr", "run", "2025-01-01"], env)
    assert done.returncode == 0, done.describe()

    (launched,) = runs_in(env)  # one run, as `dg launch --job etr_pipeline --partition 2025-01-01` makes it
    assert launched.job_name == "etr_pipeline" and launched.status == DagsterRunStatus.SUCCESS
    assert launched.tags[PARTITION_TAG] == "2025-01-01"
    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        summary = summarize_run(instance, launched.run_id)
        logs = instance.all_logs(launched.run_id)
    assert summary.status == "SUCCESS" and summary.failed == 0 and summary.rows_by_table, summary

    lines = done.stdout.splitlines()
    assert "DEBUG" not in done.stdout, done.stdout
    assert lines[0].startswith("etr run: etr_pipeline for 2025-01-01 (") and "etr run --verbose" in lines[0]
    assert lines[-4:] == [f"run {launched.run_id}", *summary.lines()], done.stdout  # the summary: last, once
    body = lines[1:-4]
    steps = step_lines(body)
    ran = [e.dagster_event.step_key for e in logs if e.is_dagster_event and e.dagster_event.is_step_success]
    assert sorted(steps) == sorted(ran) and len(ran) >= 12, done.stdout  # a line each step, and only those
    assert all(" ok " in line for line in steps.values()), done.stdout
    written = sum(int(found.replace(",", "")) for line in steps.values() for found in ROWS.findall(line))
    assert written == sum(summary.rows_by_table.values()), done.stdout  # the steps' rows: the summary's, by step
    others = [re.sub(r"\d+", "N", line) for line in body if not STEP_LINE.fullmatch(line)]
    assert others == [  # announced as they start, once each: no resource starts twice
        "  started the synthetic BNPL API on http://N.N.N.N:N for this run",
        "  starting Spark (a JVM) for this run",
        "  Spark started after N s",
    ], done.stdout
    # The run's whole log (the UI's) too: each resource initialised once, the API and Spark started once.
    kinds = Counter(e.dagster_event.event_type for e in logs if e.is_dagster_event)
    assert kinds[DagsterEventType.RESOURCE_INIT_STARTED] == 1, kinds
    said = Counter(e.user_message.split(" on ")[0] for e in logs if not e.is_dagster_event)
    assert said[API_STARTED] == 1 and said[SPARK_STARTING] == 1, said


@pytest.mark.slow  # two runs' processes (no JVM)
def test_a_failed_run_says_which_step_and_why_and_verbose_gives_dagsters_whole_log(tmp_path: Path, api) -> None:
    """A run refused by the API (a wrong token): each raw step's line says it failed and why, one line counts the
    steps not run, the summary ends the output; `--verbose` prints Dagster's whole log instead (DEBUG lines)."""
    env = isolated_env(tmp_path, ETR_API_URL=api.url, ETR_API_TOKEN="not-the-token")
    prepare_instance(env)
    quiet, verbose = (
        run_merged(["etr", "run", "2025-01-01"], env),
        run_merged(["etr", "run", "--verbose", "2025-01-01"], env),
    )
    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        first, second = (summarize_run(instance, r.run_id) for r in reversed(runs_in(env)))  # oldest first
        plan = instance.get_execution_plan_snapshot(runs_in(env)[0].execution_plan_snapshot_id)
    for done, summary in ((quiet, first), (verbose, second)):
        assert done.returncode == 1 and summary.status == "FAILURE", done.describe()
        assert done.stdout.splitlines()[-5:] == [f"run {summary.run_id}", *summary.lines()], done.stdout
    assert "DEBUG" not in quiet.stdout and "DEBUG" in verbose.stdout
    assert step_lines(verbose.stdout.splitlines()) == {}  # the whole log, not the step lines
    lines = quiet.stdout.splitlines()
    steps = step_lines(lines[1:-5])
    assert set(steps) == {"raw__bnpl_customers", "raw__bnpl_merchants", "raw__bnpl_transactions"}, quiet.stdout
    assert all(" FAILED " in line and "answered 401" in line for line in steps.values()), quiet.stdout  # why
    not_run = len(plan.step_keys_to_execute) - len(steps)
    assert lines[1:-5] == [*steps.values(), f"  {not_run} step(s) not run: an upstream step failed"], quiet.stdout
