"""`etr run DAY|FIRST..LAST`: the days checked (a mistake is one line, and no run), then the run `dg launch` makes,
followed a line a step, then its id and summary; the raw assets check any run's tags with `days_of_run`.
Only the standard library at module level: `etr` must not import Dagster or pyspark to check a day."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from etr_assets.errors import EtrError

JOB = "etr_pipeline"
FORMAT = "give YYYY-MM-DD or FIRST..LAST"
# Dagster's run tags for a partition and for a single-run range (what `dg launch` and the UI set).
PARTITION_TAG = "dagster/partition"
RANGE_START_TAG, RANGE_END_TAG = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"
ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
RANGE = re.compile(r"(.*?)\.{2,3}(.*)")  # FIRST..LAST, or FIRST...LAST as `dg launch --partition-range` takes it
REQUEST_EXIT = 2  # a mistake in the request (as argparse's usage errors); a failed run exits 1


class RunRequestError(EtrError, ValueError):
    """A day or range that etr_pipeline has no partitions for; the message is the one line to show."""


@dataclasses.dataclass(frozen=True)
class Days:
    """The days of one run: a partition (`first == last`, not `ranged`), or a range run as one run."""

    first: dt.date
    last: dt.date
    ranged: bool = False

    @property
    def tags(self) -> dict[str, str]:
        """The run tags `dg launch --partition` / `--partition-range` gives such a run."""
        if not self.ranged:
            return {PARTITION_TAG: self.first.isoformat()}
        return {RANGE_START_TAG: self.first.isoformat(), RANGE_END_TAG: self.last.isoformat()}

    def __str__(self) -> str:
        return f"{self.first}..{self.last}" if self.ranged else str(self.first)


def last_complete_day(now: dt.datetime | None = None) -> dt.date:
    """The newest daily partition: the day before today, UTC (a DailyPartitionsDefinition ending at end_offset 0)."""
    return (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).date() - dt.timedelta(days=1)


def _mistake(what: str, start: dt.date, now: dt.datetime | None) -> RunRequestError:
    last = last_complete_day(now)
    if last < start:
        return RunRequestError(f"{what}: no day can run yet: the first day, {start}, has not ended (UTC)")
    return RunRequestError(f"{what}: {FORMAT}, between {start} and {last}")


def _day(text: str, start: dt.date, now: dt.datetime | None) -> dt.date:
    try:
        if not ISO_DAY.fullmatch(text):
            raise ValueError(text)
        day = dt.date.fromisoformat(text)
    except ValueError:
        raise _mistake(f"{text} is not a day", start, now) from None
    if day < start:
        raise _mistake(f"{day} is before the first day", start, now)
    if day > last_complete_day(now):
        raise _mistake(f"{day} has not ended yet (UTC)", start, now)
    return day


def _days(first_text: str, last_text: str, shown: str, start: dt.date, now: dt.datetime | None) -> Days:
    if not first_text or not last_text:
        raise _mistake(f"{shown} is not a range", start, now)
    first, last = _day(first_text, start, now), _day(last_text, start, now)
    if last < first:
        raise _mistake(f"{shown} is reversed: its first day is after its last", start, now)
    return Days(first, last, ranged=True)


def parse_request(text: str | None, start: dt.date, now: dt.datetime | None = None) -> Days:
    """`DAY` or `FIRST..LAST` (or `FIRST...LAST`) as days of etr_pipeline's partitions, which run from `start`
    (the setting ETR_START_DATE) to yesterday, UTC; a RunRequestError saying in one line what is wrong otherwise."""
    text = (text or "").strip()
    if not text:
        raise _mistake("no day given", start, now)
    if ranged := RANGE.fullmatch(text):
        return _days(ranged[1].strip(), ranged[2].strip(), text, start, now)
    day = _day(text, start, now)
    return Days(day, day)


def days_of_run(tags: Mapping[str, str], start: dt.date, now: dt.datetime | None = None, job: str = JOB) -> Days:
    """The days a run of `job` (etr_pipeline, or another job of these daily partitions) is for, from its tags,
    checked as `parse_request` checks a request."""
    if tags.get(PARTITION_TAG):
        return parse_request(tags[PARTITION_TAG], start, now)
    first, last = tags.get(RANGE_START_TAG, "").strip(), tags.get(RANGE_END_TAG, "").strip()
    if first or last:
        return _days(first, last, f"{first}...{last}", start, now)
    runs = "its assets run" if job.startswith("__") else f"{job} runs"  # Dagster's implicit job of an asset selection
    raise _mistake(f"no day given ({runs} for a partition or a range of them)", start, now)


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
    """`etr run`: check the request, launch its run of `job` (etr_pipeline, or a declared source's job), follow it
    (`verbose`: Dagster's whole log), end with its id and summary. Exits 0 when the run succeeded, 1 when it failed,
    2 (and no run) for a mistake in the request."""
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

    from etr_assets.run_progress import follow
    from etr_assets.run_summary import summarize_run

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
