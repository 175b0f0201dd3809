"""Fault switches for the synthetic BNPL API: failures, delays, malformed records, schema drift, cut-off pages.
Record faults are deterministic like the data, so the tests compute the exact truth without HTTP."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import http
import json
import math
import random
import threading

_MAX_COUNT = 10**9
_MAX_SECONDS = 3600.0


@dataclasses.dataclass(frozen=True)
class ApiFaults:
    """What the server should get wrong (the default: nothing). ``fail_requests`` is counted down per failed
    request, so ``RunningApi.faults`` / ``GET /admin/faults`` show how many failures are left."""

    fail_requests: int = 0  # the next N data requests (matching fail_path_prefix) answer fail_status
    fail_status: int = 503  # 400..599; 429 also sends Retry-After: retry_after_seconds
    retry_after_seconds: float = 0.05
    fail_path_prefix: str = ""  # "" = every data path; scopes fail_requests and truncate_after_pages
    delay_seconds: float = 0.0  # sleep before answering every data request
    malformed_rate: float = 0.0  # fraction (0..1) of served records replaced by a malformed variant
    drift: bool = False  # every record gains unknown fields "channel" and "loyalty_points"
    truncate_after_pages: int = 0  # > 0: pages after the first N are cut off mid-body

    def __post_init__(self) -> None:
        _check_int(self, "fail_requests", 0, _MAX_COUNT)
        _check_int(self, "fail_status", 400, 599)
        _check_float(self, "retry_after_seconds", 0.0, _MAX_SECONDS)
        if not isinstance(self.fail_path_prefix, str):
            raise ValueError(f"fail_path_prefix must be a string, got {self.fail_path_prefix!r}")
        if self.fail_path_prefix and not self.fail_path_prefix.startswith("/"):
            raise ValueError(f"fail_path_prefix must be empty or start with '/', got {self.fail_path_prefix!r}")
        _check_float(self, "delay_seconds", 0.0, _MAX_SECONDS)
        _check_float(self, "malformed_rate", 0.0, 1.0)
        if not isinstance(self.drift, bool):
            raise ValueError(f"drift must be true or false, got {self.drift!r}")
        _check_int(self, "truncate_after_pages", 0, _MAX_COUNT)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, document: str | bytes | dict) -> ApiFaults:
        """Faults from a JSON object of field names (others default); a ValueError names a bad field or value."""
        if isinstance(document, (str, bytes)):
            try:
                document = json.loads(document)
            except (ValueError, UnicodeDecodeError) as exc:
                raise ValueError(f"faults body is not JSON: {exc}") from None
        if not isinstance(document, dict):
            raise ValueError("faults body must be a JSON object of ApiFaults fields")
        known = [field.name for field in dataclasses.fields(cls)]
        if unknown := [name for name in document if name not in known]:
            raise ValueError(f"unknown fault field {unknown[0]!r}; known: {', '.join(known)}")
        return cls(**document)


def _check_int(faults: ApiFaults, name: str, low: int, high: int) -> None:
    value = getattr(faults, name)
    if type(value) is not int:  # bool is an int subclass: refuse it too
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in {low}..{high}, got {value}")


def _check_float(faults: ApiFaults, name: str, low: float, high: float) -> None:
    value = getattr(faults, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not (math.isfinite(value) and low <= value <= high):
        raise ValueError(f"{name} must be in {low:g}..{high:g}, got {value}")
    object.__setattr__(faults, name, float(value))  # frozen: normalise 1 -> 1.0 so JSON round-trips


# Request faults: the live, thread-safe state of one server.


class FaultSwitch:
    """One server's current faults: replaced atomically, ``fail_requests`` counted down under a lock."""

    def __init__(self, faults: ApiFaults) -> None:
        self._lock = threading.Lock()
        self.set(faults)

    def get(self) -> ApiFaults:
        with self._lock:
            return self._faults

    def set(self, faults: ApiFaults) -> None:
        if not isinstance(faults, ApiFaults):
            raise TypeError(f"expected ApiFaults, got {type(faults).__name__}")
        with self._lock:
            self._faults = faults

    def take_failure(self, path: str) -> ApiFaults | None:
        """If this request must fail, count it and return the faults it failed under; otherwise None."""
        with self._lock:
            faults = self._faults
            if faults.fail_requests <= 0 or not path.startswith(faults.fail_path_prefix):
                return None
            self._faults = dataclasses.replace(faults, fail_requests=faults.fail_requests - 1)
            return faults


def failure_response(faults: ApiFaults, path: str) -> tuple[int, dict, dict]:
    """(status, JSON body, headers) of one injected failure; ``faults`` is what ``take_failure`` returned."""
    status, left = faults.fail_status, faults.fail_requests - 1
    phrase = {s.value: s.phrase for s in http.HTTPStatus}.get(status, "Injected Error")
    body = {"error": f"injected fault on {path}: {status} {phrase} ({left} more to fail)"}
    seconds = f"{faults.retry_after_seconds:.6f}".rstrip("0").rstrip(".") or "0"  # "0.05", "2": never 5e-05
    return status, body, {"Retry-After": seconds} if status == 429 else {}


def truncates(faults: ApiFaults, path: str, page: int) -> bool:
    """Whether this page is cut off: every page after the first ``truncate_after_pages`` of a feed."""
    return 0 < faults.truncate_after_pages < page and path.startswith(faults.fail_path_prefix)


# Record faults: deterministic corruption and schema drift.

MALFORMED_KINDS = {  # kinds cycle in this order over the corrupted records of one feed
    "transaction": ("wrong_type", "missing_key", "out_of_range", "not_an_object"),
    "customer": ("wrong_type", "missing_key"),
    "merchant": ("wrong_type", "missing_key"),
}
CORRUPTED_TEXT = "#corrupted#"  # the "record" served for kind not_an_object
_ID = {"transaction": "transaction_id", "customer": "customer_id", "merchant": "merchant_id"}


def apply_record_faults(
    records: list, *, seed: int, entity: str, day: datetime.date, malformed_rate: float, drift: bool
) -> list:
    """The records as served with these faults: drift, then the rate's share of records with the lowest SHA-256 of
    (seed, entity, day, index) replaced, so any page size sees the same and a higher rate corrupts a superset."""
    served = [_drifted(record, seed, entity) for record in records] if drift else list(records)
    if count := math.floor(len(served) * malformed_rate + 0.5):
        rank = lambda i: hashlib.sha256(f"etr:{seed}:malformed:{entity}:{day.isoformat()}:{i}".encode()).digest()
        kinds = MALFORMED_KINDS[entity]
        for k, index in enumerate(sorted(range(len(served)), key=rank)[:count]):
            served[index] = _malformed(served[index], entity, kinds[k % len(kinds)], k // len(kinds), day)
    return served


def _drifted(record: dict, seed: int, entity: str) -> dict:
    # Keyed by the record's id: both copies of a re-sent transaction agree, a customer keeps its values.
    rng = random.Random(f"etr:{seed}:drift:{entity}:{record[_ID[entity]]}")
    return {**record, "channel": rng.choice(("APP", "WEB", "POS")), "loyalty_points": rng.randrange(5001)}


def _malformed(record: dict, entity: str, kind: str, round_: int, day: datetime.date) -> object:
    """One malformed variant; ``round_`` picks among a kind's variants so they all appear in turn."""
    id_field = "customer_id" if entity == "transaction" else _ID[entity]
    if kind == "not_an_object":
        return CORRUPTED_TEXT
    if kind == "wrong_type":
        if entity == "transaction" and round_ % 2:
            return {**record, "amount": "abc"}
        return {**record, id_field: "not-a-number"}
    if kind == "missing_key":
        drop = "transaction_id" if entity == "transaction" and round_ % 2 == 0 else id_field
        return {key: value for key, value in record.items() if key != drop}
    variant = round_ % 3  # out_of_range: transactions only
    if variant == 0:
        return {**record, "amount": f"-{record['amount']}"}
    if variant == 1:
        return {**record, "instalments": 99}
    return {**record, "transaction_date": (day - datetime.timedelta(days=1)).isoformat()}
