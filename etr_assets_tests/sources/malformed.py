"""What the synthetic API serves, without HTTP, and which malformed kind a record it served is: the tests' oracle
for its record faults."""

from __future__ import annotations

import copy
import datetime
import decimal
import functools
import re

from etr_assets.sources.synthetic_api import _served
from etr_assets.sources.synthetic_data import ApiConfig
from etr_assets.sources.synthetic_faults import ApiFaults

_ID = {"transaction": "transaction_id", "customer": "customer_id", "merchant": "merchant_id"}
_INSTALMENTS = (3, 4, 6, 12)
_MONEY = re.compile(r"-?[0-9]+\.[0-9]{2}")


def served(path: str, config: ApiConfig, faults: ApiFaults, day: datetime.date) -> list:
    """Exactly the list the server serves on ``path`` for ``day`` under ``faults`` (before paging), the caller's own
    copy. Items are dicts, except the string ``"#corrupted#"`` for kind not_an_object. Only malformed_rate and drift
    matter here."""
    return copy.deepcopy(_served(config, path, day, faults.malformed_rate, faults.drift))


transactions_served = functools.partial(served, "/v1/transactions")
customers_served = functools.partial(served, "/v1/customers")
merchants_served = functools.partial(served, "/v1/merchants")


def malformed_kind(record: object) -> str | None:
    """Which malformed kind a served record is (see MALFORMED_KINDS), or None for a well-formed record; the entity
    is recognised by its fields (transactions have "instalments", merchants "mcc", customers "first_name")."""
    if not isinstance(record, dict):
        return "not_an_object"
    if "instalments" in record:
        if "transaction_id" not in record or "customer_id" not in record:
            return "missing_key"
        amount = record.get("amount")
        if type(record["customer_id"]) is not int or not isinstance(amount, str) or not _MONEY.fullmatch(amount):
            return "wrong_type"
        created = record.get("created_at")
        if (
            decimal.Decimal(amount) < 0
            or record["instalments"] not in _INSTALMENTS
            or not isinstance(created, str)
            or record.get("transaction_date") != created[:10]
        ):
            return "out_of_range"
        return None
    for entity, marker in (("merchant", "mcc"), ("customer", "first_name")):
        if marker in record:
            if _ID[entity] not in record:
                return "missing_key"
            return None if type(record[_ID[entity]]) is int else "wrong_type"
    raise ValueError(f"not a transaction, customer or merchant record: {sorted(record)}")
