"""Which days of the gold tables are out of date: built before something they were derived from changed (a corrected
silver day, a history given a late day, a day before them rebuilt or built late). Judged from the order in which
partitions were last built (Dagster's event storage ids, which only grow), per table and day; plain Python, so the
sensor, the checks and the tests share one rule (its table of rules: docs/lifecycle.md, "Corrections propagate").
A day never built is missing, not out of date."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping

from etr_assets.pipeline.layers import DERIVED_SPECS, layer_name
from etr_assets.tables.entities import LANDING_CUSTOMERS
from etr_assets.tables.transactions import SILVER_TRANSACTIONS

SILVER, HISTORY = layer_name(SILVER_TRANSACTIONS), layer_name(LANDING_CUSTOMERS)
SUMMARY, ACTIVITY, PROFILES = (layer_name(s) for s in DERIVED_SPECS)
DERIVED = (SUMMARY, ACTIVITY, PROFILES)  # the tables whose days are judged, in the order they are built
INPUTS = (SILVER, HISTORY)

Built = Mapping[str, Mapping[str, int]]  # table layer -> day (YYYY-MM-DD) -> order it was last built in


@dataclasses.dataclass(frozen=True)
class OutOfDate:
    """Per derived table, its out-of-date days and why each is."""

    days: dict[str, dict[str, str]]

    def __bool__(self) -> bool:
        return any(self.days.values())

    def runs(self, built: Built) -> list[tuple[tuple[str, ...], str, str]]:
        """(tables, first day, last day) of the runs that re-derive them: one single-run backfill per distinct range
        of consecutive out-of-date days (a day between them never built is built too), one commit per table."""
        ranges: dict[tuple[str, str], list[str]] = {}
        for table in DERIVED:
            for first, last in _blocks(self.days.get(table, {}), built.get(table, {})):
                ranges.setdefault((first, last), []).append(table)
        return [(tuple(tables), first, last) for (first, last), tables in sorted(ranges.items())]


def _blocks(stale: Mapping[str, str], built: Mapping[str, int]) -> list[tuple[str, str]]:
    """Runs of consecutive stale days among the built ones: a built day that is up to date ends a block."""
    blocks, current = [], None
    for day in sorted(built):
        if day in stale:
            current = [day, day] if current is None else [current[0], day]
        elif current is not None:
            blocks.append(tuple(current))
            current = None
    return blocks + ([tuple(current)] if current else [])


def out_of_date(built: Built) -> OutOfDate:
    """The out-of-date days of every derived table (see the module's rules)."""
    silver, history = built.get(SILVER, {}), built.get(HISTORY, {})
    summary, activity, profiles = (built.get(t, {}) for t in DERIVED)
    stale: dict[str, dict[str, str]] = {t: {} for t in DERIVED}
    for day, order in summary.items():
        if silver.get(day, -1) > order:
            stale[SUMMARY][day] = f"{SILVER} of {day} was rebuilt after it"
    newest_silver = _running_max(silver, activity)
    for day in sorted(activity):
        order, before = activity[day], (dt.date.fromisoformat(day) - dt.timedelta(days=1)).isoformat()
        if silver.get(day, -1) > order:
            stale[ACTIVITY][day] = f"{SILVER} of {day} was rebuilt after it"
        elif before in stale[ACTIVITY]:
            stale[ACTIVITY][day] = f"it carries {before}'s figures, which are out of date"
        elif before in activity and activity[before] > order:
            stale[ACTIVITY][day] = f"{before}, whose figures it carries, was rebuilt after it"
        elif before not in activity and newest_silver[day][0] > order:
            changed = newest_silver[day][1]
            stale[ACTIVITY][day] = f"built while {before} was missing; {SILVER} of {changed} was rebuilt after it"
    newest_history = _running_max(history, profiles)
    for day, order in profiles.items():
        if day in stale[ACTIVITY]:
            stale[PROFILES][day] = f"{ACTIVITY} of {day} is out of date"
        elif activity.get(day, -1) > order:
            stale[PROFILES][day] = f"{ACTIVITY} of {day} was rebuilt after it"
        elif newest_history[day][0] > order:
            stale[PROFILES][day] = f"{HISTORY} took in {newest_history[day][1]} after it"
    return OutOfDate({t: dict(sorted(days.items())) for t, days in stale.items()})


def _running_max(orders: Mapping[str, int], days) -> dict[str, tuple[int, str | None]]:
    """For each of `days`: the latest order among `orders`' days up to it, and that day (one pass over both)."""
    latest, at, result = -1, None, {}
    pending, index = sorted(orders.items()), 0
    for day in sorted(days):
        while index < len(pending) and pending[index][0] <= day:
            if pending[index][1] > latest:
                latest, at = pending[index][1], pending[index][0]
            index += 1
        result[day] = (latest, at)
    return result
