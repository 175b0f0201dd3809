"""The days of a run: `etr run DAY` / `etr run FIRST..LAST` checked before anything runs, and a run's tags checked the
same way (plain: no Dagster, no JVM)."""

from __future__ import annotations

import datetime as dt

import pytest

from etr_assets.errors import RunRequestError
from etr_assets.run_days import (
    PARTITION_TAG,
    RANGE_END_TAG,
    RANGE_START_TAG,
    Days,
    days_of_run,
    last_complete_day,
    parse_request,
)

START = dt.date(2025, 1, 1)
NOW = dt.datetime(2026, 11, 26, 1, 20, tzinfo=dt.UTC)  # yesterday, UTC: 2026-11-25
VALID = "give YYYY-MM-DD or FIRST..LAST, between 2025-01-01 and 2026-11-25"


def mistake(request: str | None) -> str:
    with pytest.raises(RunRequestError) as raised:
        parse_request(request, START, NOW)
    return str(raised.value)


def test_a_day_and_a_range_in_both_spellings():
    assert parse_request("2025-01-04", START, NOW) == Days(dt.date(2025, 1, 4), dt.date(2025, 1, 4))
    two = Days(dt.date(2025, 1, 5), dt.date(2025, 1, 6), ranged=True)
    assert parse_request("2025-01-05..2025-01-06", START, NOW) == two
    assert parse_request("2025-01-05...2025-01-06", START, NOW) == two  # as `dg launch --partition-range` takes it
    assert parse_request(" 2025-01-01 .. 2026-11-25 ", START, NOW).last == dt.date(2026, 11, 25)  # the edges


def test_the_tags_are_dg_launchs():
    assert parse_request("2025-01-04", START, NOW).tags == {PARTITION_TAG: "2025-01-04"}
    assert parse_request("2025-01-05..2025-01-06", START, NOW).tags == {
        RANGE_START_TAG: "2025-01-05",
        RANGE_END_TAG: "2025-01-06",
    }


@pytest.mark.parametrize(
    ("request_text", "what"),
    [
        ("2025/01/04", "2025/01/04 is not a day"),
        ("2025-02-30", "2025-02-30 is not a day"),
        ("20250104", "20250104 is not a day"),
        ("2099-01-01", "2099-01-01 has not ended yet (UTC)"),
        ("2026-11-26", "2026-11-26 has not ended yet (UTC)"),  # today: its partition does not exist yet
        ("2024-12-31", "2024-12-31 is before the first day"),
        ("2025-01-06..2025-01-05", "2025-01-06..2025-01-05 is reversed: its first day is after its last"),
        ("2025-01-06...2025-01-05", "2025-01-06...2025-01-05 is reversed: its first day is after its last"),
        ("2024-12-30..2025-01-02", "2024-12-30 is before the first day"),
        ("2025-01-05..", "2025-01-05.. is not a range"),
        ("", "no day given"),
        (None, "no day given"),
    ],
)
def test_each_mistake_is_one_line_naming_it_the_format_and_the_days(request_text, what):
    assert mistake(request_text) == f"{what}: {VALID}"


def test_before_any_day_has_ended_the_line_says_so():
    with pytest.raises(RunRequestError) as raised:
        parse_request("2026-11-26", dt.date(2026, 11, 26), NOW)
    first = "no day can run yet: the first day, 2026-11-26, has not ended (UTC)"
    assert str(raised.value) == f"2026-11-26 has not ended yet (UTC): {first}"


def test_the_last_day_is_dagsters_last_daily_partition():
    from etr_assets.defs.common import daily_partitions
    from etr_assets.settings import Settings

    partitions = daily_partitions(Settings(start_date=START))
    before = last_complete_day().isoformat()
    assert partitions.get_last_partition_key() in {before, last_complete_day().isoformat()}  # either, at midnight UTC
    assert partitions.get_first_partition_key() == START.isoformat()


def test_a_runs_tags_are_checked_the_same_way():
    assert days_of_run({PARTITION_TAG: "2025-01-04"}, START, NOW) == Days(dt.date(2025, 1, 4), dt.date(2025, 1, 4))
    ranged = {RANGE_START_TAG: "2025-01-05", RANGE_END_TAG: "2025-01-06"}
    assert days_of_run(ranged, START, NOW) == Days(dt.date(2025, 1, 5), dt.date(2025, 1, 6), ranged=True)
    for tags, what in [
        ({}, "no day given (etr_pipeline runs for a partition or a range of them)"),
        ({"dagster/backfill": "x"}, "no day given (etr_pipeline runs for a partition or a range of them)"),
        (
            {RANGE_START_TAG: "2025-01-06", RANGE_END_TAG: "2025-01-05"},
            "2025-01-06...2025-01-05 is reversed: its first day is after its last",
        ),
        ({RANGE_START_TAG: "2025-01-06", RANGE_END_TAG: ""}, "2025-01-06... is not a range"),
        ({PARTITION_TAG: "2099-01-01"}, "2099-01-01 has not ended yet (UTC)"),
    ]:
        with pytest.raises(RunRequestError) as raised:
            days_of_run(tags, START, NOW)
        assert str(raised.value) == f"{what}: {VALID}", tags
