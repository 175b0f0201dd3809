"""`etr run`'s run (`python -m etr_assets.run_progress JOB TAGS [LOG_LEVEL]`: `dagster job execute` less its second
start of every resource) and its progress: a line a step, what the run announces (the API and Spark starting),
warnings."""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import TextIO

from dagster import DagsterEventType as Kind
from dagster import DagsterInstance, EventLogEntry, RunsFilter, build_reconstructable_job, execute_job

from etr_assets.defs.announcements import ANNOUNCED
from etr_assets.defs.run_guard import PID_TAG
from etr_assets.defs.run_summary import RunSummary, failure_reason, summarize_run

ABANDONED = "Dependencies for step {}"  # how Dagster logs a step it does not run: an upstream step failed
SAID_ELSEWHERE = {Kind.STEP_FAILURE, Kind.RUN_FAILURE}  # errors the step's line or the summary gives
POLL_SECONDS = 0.5
WIDTH = 44  # the longest step name: a table's growth check


class Progress:
    """Writes a run's events to `out` as they come; on a terminal the running step shows on a live line. A step's
    rows are its assets' in the run's summary (`summary()`), so the two agree."""

    def __init__(self, out: TextIO, summary: Callable[[], RunSummary]):
        self.out, self.live, self.summary = out, "", summary
        self.tty = out.isatty()
        self.began: dict[str, float] = {}
        self.assets: dict[str, set[str]] = {}
        self.checks: dict[str, Counter[bool]] = {}
        self.not_run: list[str] = []

    def feed(self, entry: EventLogEntry) -> None:
        event = entry.dagster_event
        kind, step = (event.event_type, event.step_key) if event else (None, entry.step_key)
        if kind == Kind.STEP_START:
            self.began[step] = entry.timestamp
            self._write(None, live=f"  {step:<{WIDTH}} running")
        elif kind == Kind.ASSET_MATERIALIZATION:
            self.assets.setdefault(step, set()).add(event.asset_key.to_user_string())
        elif kind == Kind.ASSET_CHECK_EVALUATION:
            self.checks.setdefault(step, Counter())[event.event_specific_data.passed] += 1
        elif kind in (Kind.STEP_SUCCESS, Kind.STEP_FAILURE):
            self._write(f"  {step:<{WIDTH}} {self._outcome(event, entry.timestamp)}")
        elif kind == Kind.STEP_SKIPPED or (event is None and entry.user_message.startswith(ABANDONED.format(step))):
            self.not_run.append(step)
        elif (event is None and entry.user_message.startswith(ANNOUNCED)) or (
            entry.level >= logging.WARNING and kind not in SAID_ELSEWHERE
        ):
            self._write(f"  {entry.user_message.strip().splitlines()[0]}", live=self.live)

    def _outcome(self, event, ended: float) -> str:
        step = event.step_key
        took = f" {ended - self.began[step]:4.0f} s" if step in self.began else ""
        if event.event_type == Kind.STEP_FAILURE:
            return f"FAILED{took}: {failure_reason(event.event_specific_data)}"
        checks, figures = self.checks.get(step, Counter()), []
        if step in self.assets:
            rows = self.summary().rows_by_table
            figures.append(f"{sum(rows.get(key, 0) for key in self.assets[step]):,} rows")
        figures += [f"{checks[True]} check{'s' * (checks[True] != 1)} passed"] if checks else []
        figures += [f"{checks[False]} NOT passed"] if checks[False] else []
        return f"ok{took}" + (f"  {', '.join(figures)}" if figures else "")

    def close(self) -> None:
        """The steps the run did not run, in one line."""
        self._write(f"  {len(self.not_run)} step(s) not run: an upstream step failed" if self.not_run else None)

    def _write(self, line: str | None, live: str = "") -> None:
        if self.tty and self.live:
            self.out.write("\r\033[K")  # the live line goes: a finished line or an announcement takes its place
        if line:
            self.out.write(f"{line}\n")
        self.live = live
        if self.tty:
            self.out.write(live)
        self.out.flush()


def follow(instance: DagsterInstance, worker: subprocess.Popen, job: str, tags, since: float, out: TextIO | None):
    """Follows the run of `job` with `tags` that `worker` makes (its pid tag; once it ended, else the newest such),
    its progress written to `out` (None: nothing), until the process ends; returns the run, or None."""
    made = RunsFilter(job_name=job, tags=dict(tags), created_after=dt.datetime.fromtimestamp(since, dt.UTC))
    run, progress, cursor = None, None, None
    while True:
        try:
            ended = worker.poll() is not None
            if run is None:
                runs = instance.get_runs(made)
                mine = [r for r in runs if r.tags.get(PID_TAG) == str(worker.pid)]
                if (run := next(iter(mine or (runs if ended else [])), None)) and out:
                    progress = Progress(out, functools.partial(summarize_run, instance, run.run_id))
            while run is not None:
                found = instance.get_records_for_run(run.run_id, cursor)
                for record in found.records if progress else ():
                    progress.feed(record.event_log_entry)
                cursor = found.cursor
                if not found.has_more:
                    break
            if ended:
                if progress:
                    progress.close()
                return run
            time.sleep(POLL_SECONDS)
        except KeyboardInterrupt:  # the run got it too (same process group): let it end, then read its last events
            worker.wait()


def job_of_defs(name: str):
    """A job of the code location, as `dagster job execute -m etr_assets.definitions -j NAME` loads it."""
    from etr_assets.definitions import defs

    return defs.resolve_job_def(name)


def execute(job: str, tags: dict[str, str], log_level: str | None = None) -> bool:
    """Runs `job` in $DAGSTER_HOME's instance, its console log at `log_level` (None: the instance's, INFO in the
    shipped dagster.yaml); whether it succeeded (the result unopened: no resource restarts)."""
    recon = build_reconstructable_job(__spec__.name, job_of_defs.__name__, (job,))
    config = {"loggers": {"console": {"config": {"log_level": log_level}}}} if log_level else None
    with DagsterInstance.get() as instance:
        return execute_job(recon, instance, run_config=config, tags=tags, raise_on_error=False).success


if __name__ == "__main__":  # JOB TAGS [LOG_LEVEL]
    sys.exit(0 if execute(sys.argv[1], json.loads(sys.argv[2]), *sys.argv[3:4]) else 1)
