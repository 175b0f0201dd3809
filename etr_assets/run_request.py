"""`etr run DAY|FIRST..LAST`: the days checked (`run_days`: a mistake is one line, and no run), then the run
`dg launch` makes, followed a line a step, then its id and summary. Only the standard library at module level: `etr`
must not import Dagster or pyspark to check a day."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from etr_assets.errors import EtrError, RunRequestError
from etr_assets.run_days import JOB, parse_request

REQUEST_EXIT = 2  # a mistake in the request (as argparse's usage errors); a failed run exits 1


def dagster_home(etr_home: Path, environ: Mapping[str, str] | None = None) -> Path:
    """$DAGSTER_HOME, or where ./dev keeps the instance ($ETR_HOME/dagster) when that one is prepared."""
    env = os.environ if environ is None else environ
    if env.get("DAGSTER_HOME", "").strip():
        return Path(env["DAGSTER_HOME"].strip())
    home = etr_home / "dagster"
    if (home / "dagster.yaml").is_file():
        return home
    raise EtrError(
        f"DAGSTER_HOME is not set and {home} has no dagster.yaml: export DAGSTER_HOME (./dev uses "
        "$ETR_HOME/dagster), or run ./dev setup to prepare that one"
    )


def run(request: str | None, start: dt.date, etr_home: Path, verbose: bool = False, job: str = JOB) -> int:
    """`etr run`: check the request, launch and follow its run of `job`, end with its id and summary. Exits 0 when
    the run succeeded, 1 when it failed, 2 (and no run) for a mistake in the request."""
    try:
        days = parse_request(request, start)
        if job not in (jobs := runnable_jobs()):
            raise RunRequestError(f"no job {job!r} to run: give one of {', '.join(jobs)}")
    except RunRequestError as mistake:
        print(f"etr run: {mistake}", file=sys.stderr)
        return REQUEST_EXIT
    home = dagster_home(etr_home)
    env = {"PYTHONWARNINGS": "ignore", **os.environ, "DAGSTER_HOME": str(home)}  # as ./dev demo: no beta notices
    where = "Dagster's log follows" if verbose else "its full log: etr run --verbose, or the run's page in the UI"
    print(f"etr run: {job} for {days} (DAGSTER_HOME={home}); {where}", file=sys.stderr, flush=True)
    from dagster import DagsterInstance

    from etr_assets.defs.run_summary import summarize_run
    from etr_assets.run_progress import follow

    # The instance opened (its storage made) before the run's process opens it; that process's log shown if no run.
    with DagsterInstance.from_config(str(home)) as instance, tempfile.TemporaryFile("w+") as log:
        launched, quiet = time.time(), {"stdout": log, "stderr": subprocess.STDOUT}
        command = [sys.executable, "-m", "etr_assets.run_progress", job, json.dumps(days.tags)]  # dg launch's tags
        command += ["DEBUG"] if verbose else []  # Dagster's whole log: its DEBUG events too
        worker = subprocess.Popen(command, env=env, **({} if verbose else quiet))
        ours = follow(instance, worker, job, days.tags, launched, None if verbose else sys.stderr)
        summary = summarize_run(instance, ours.run_id) if ours else None
        if summary is None:
            log.seek(0)
            sys.stderr.write("".join(log.readlines()[-20:]))  # why it made no run
            print(f"etr run: the run's process exited {worker.returncode} without a run of {job}", file=sys.stderr)
            return worker.returncode or 1
    print(f"run {summary.run_id}")
    print("\n".join(summary.lines()))
    return 0 if worker.returncode == 0 and summary.status == "SUCCESS" else 1


def runnable_jobs() -> list[str]:
    """etr_pipeline and each declared source's job (`<source>_ingest`), from the declarations, without Dagster."""
    from etr_assets.tables.declared import SOURCES

    return [JOB, *(f"{declared.name}_ingest" for declared in SOURCES)]
