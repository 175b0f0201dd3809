"""Which gold days are out of date, from the order their inputs and they were last built in (plain Python)."""

from __future__ import annotations

import datetime as dt

from etr_assets.pipeline.propagation import ACTIVITY, HISTORY, PROFILES, SILVER, SUMMARY, out_of_date

START = dt.date(2025, 1, 1)


def days(n: int) -> list[str]:
    return [(START + dt.timedelta(days=i)).isoformat() for i in range(n)]


class Lake:
    """Records the order tables' days were built in, as Dagster's event storage ids record it."""

    def __init__(self):
        self.order, self.built = 0, {t: {} for t in (SILVER, HISTORY, SUMMARY, ACTIVITY, PROFILES)}

    def build(self, table: str, *on: str) -> None:
        for day in on:
            self.order += 1
            self.built[table][day] = self.order

    def daily(self, *on: str) -> None:  # etr_pipeline for each day, one after the other
        for day in on:
            for table in (SILVER, HISTORY, SUMMARY, ACTIVITY, PROFILES):
                self.build(table, day)

    def range_run(self, on: list[str], tables=(SILVER, HISTORY, SUMMARY, ACTIVITY, PROFILES)) -> None:
        for table in tables:  # a single-run backfill: each table's days in one step, in day order
            self.build(table, *on)


def test_a_lake_built_in_order_or_by_ranges_has_nothing_out_of_date_at_400_days():
    daily, ranged = Lake(), Lake()
    daily.daily(*days(400))
    ranged.range_run(days(200))
    ranged.range_run(days(400)[200:])
    assert not out_of_date(daily.built) and not out_of_date(ranged.built)


def test_a_silver_correction_40_days_back_outdates_its_summary_and_every_carried_day_since():
    lake = Lake()
    lake.daily(*days(120))
    corrected = days(120)[80]
    lake.build(SILVER, corrected)
    stale = out_of_date(lake.built)
    assert stale.days[SUMMARY] == {corrected: f"{SILVER} of {corrected} was rebuilt after it"}
    assert list(stale.days[ACTIVITY]) == days(120)[80:] == list(stale.days[PROFILES])
    assert stale.runs(lake.built) == [
        ((SUMMARY,), corrected, corrected),
        ((ACTIVITY, PROFILES), corrected, days(120)[-1]),
    ]
    # The runs it asks for put everything right.
    lake.range_run([corrected], (SUMMARY,))
    lake.range_run(days(120)[80:], (ACTIVITY, PROFILES))
    assert not out_of_date(lake.built)


def test_two_corrections_in_a_row_are_re_derived_together_from_the_earlier():
    lake = Lake()
    lake.daily(*days(30))
    lake.build(SILVER, days(30)[5])
    lake.build(SILVER, days(30)[12])
    stale = out_of_date(lake.built)
    assert set(stale.days[SUMMARY]) == {days(30)[5], days(30)[12]}
    assert stale.runs(lake.built) == [
        ((SUMMARY,), days(30)[5], days(30)[5]),
        ((ACTIVITY, PROFILES), days(30)[5], days(30)[-1]),
        ((SUMMARY,), days(30)[12], days(30)[12]),
    ]


def test_days_built_while_the_day_before_was_missing_are_out_of_date_once_it_arrives():
    lake = Lake()
    d = days(5)
    lake.daily(d[0], d[1])
    lake.daily(d[3], d[4])  # day 3's run failed; 4 and 5 ran (4 summed every earlier silver day)
    assert not out_of_date(lake.built)  # nothing is known to be wrong yet: day 3 is missing, not out of date
    lake.daily(d[2])  # day 3 is run again and succeeds
    stale = out_of_date(lake.built)
    assert list(stale.days[ACTIVITY]) == [d[3], d[4]] == list(stale.days[PROFILES])
    assert stale.days[ACTIVITY][d[3]] == f"{d[2]}, whose figures it carries, was rebuilt after it"
    assert not stale.days[SUMMARY]


def test_a_day_built_on_a_missing_day_is_out_of_date_when_an_earlier_silver_day_changes():
    lake = Lake()
    d = days(6)
    lake.daily(d[0], d[1])
    lake.daily(d[4], d[5])  # days 3 and 4 never built: day 5 summed silver up to it
    lake.build(SILVER, d[0])  # a correction of day 1
    stale = out_of_date(lake.built)
    assert list(stale.days[ACTIVITY]) == [d[0], d[1], d[4], d[5]]
    assert stale.days[ACTIVITY][d[4]].startswith(f"built while {d[3]} was missing")
    assert stale.runs(lake.built)[1] == ((ACTIVITY, PROFILES), d[0], d[5])


def test_a_late_day_taken_into_the_history_outdates_the_profiles_from_it_on_only():
    lake = Lake()
    lake.daily(*days(10))
    lake.build(HISTORY, days(10)[6])  # a re-sent customer list of day 7
    stale = out_of_date(lake.built)
    assert not stale.days[SUMMARY] and not stale.days[ACTIVITY]
    assert list(stale.days[PROFILES]) == days(10)[6:]
    assert stale.days[PROFILES][days(10)[9]] == f"{HISTORY} took in {days(10)[6]} after it"
