"""Which malformed kind a record the synthetic API served is: the tests' oracle for its record faults."""

from __future__ import annotations

import decimal
import re

_ID = {"transaction": "transaction_id", "customer": "customer_id", "merchant": "merchant_id"}
_INSTALMENTS = (3, 4, 6, 12)
_MONEY = re.compile(r"-?[0-9]+\.[0-9]{2}")


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
