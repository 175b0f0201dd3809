"""The days a run is for: `DAY` or `FIRST..LAST` checked against the daily partitions (a mistake is one line), and
the run tags `dg launch` gives such a run. Only the standard library: `etr` checks a day without Dagster or pyspark,
and the raw assets check any run's tags with `days_of_run`."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Mapping

from etr_assets.errors import RunRequestError

JOB = "etr_pipeline"
FORMAT = "give YYYY-MM-DD or FIRST..LAST"
# Dagster's run tags for a partition and for a single-run range (what `dg launch` and the UI set).
PARTITION_TAG = "dagster/partition"
RANGE_START_TAG, RANGE_END_TAG = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"
ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
RANGE = re.compile(r"(.*?)\.{2,3}(.*)")  # FIRST..LAST, or FIRST...LAST as `dg launch --partition-range` takes it


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
    if (last := last_complete_day(now)) < start:
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
