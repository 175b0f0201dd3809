"""Plain-Python models the lake is checked against."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from etr_assets.sources.synthetic_api import customers_as_of
from etr_assets.tables.entities import LANDING_CUSTOMERS

TRACKED = LANDING_CUSTOMERS.scd2.tracked


def parse_ts(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).replace(tzinfo=None)


def typed(record: dict) -> tuple:
    values = dict(record)
    values["credit_limit"] = Decimal(values["credit_limit"]) if values["credit_limit"] is not None else None
    values["date_of_birth"] = dt.date.fromisoformat(values["date_of_birth"]) if values["date_of_birth"] else None
    return tuple(values[c] for c in TRACKED)


def in_order_history(config, days):
    """Requirement R2's algorithm over full customer snapshots in day order (NULL-safe compare), as plain Python.

    Returns {(customer_id, *tracked values, valid_from, valid_to)}.
    """
    versions: dict[int, list[list]] = {}
    for day in sorted(days):
        present = {}
        for record in customers_as_of(config, day):
            present[record["customer_id"]] = (parse_ts(record["updated_at"]), typed(record))
        for key, (when, state) in present.items():
            history = versions.setdefault(key, [])
            if history and history[-1][2] is None:
                if history[-1][0] == state:
                    continue
                history[-1][2] = when
            history.append([state, when, None])
        end_of_day = dt.datetime.combine(day + dt.timedelta(days=1), dt.time())
        for key, history in versions.items():
            if key not in present and history[-1][2] is None:
                history[-1][2] = end_of_day
    return {(k, *v[0], v[1], v[2]) for k, hist in versions.items() for v in hist}
