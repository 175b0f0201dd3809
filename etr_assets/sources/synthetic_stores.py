"""A second synthetic API on loopback, unlike the BNPL one on every axis: retail stores and their check-ins, an API
key header, an opaque cursor in the body, a snapshot day as YYYYMMDD, nested records and no update time. Every
response is a pure function of (config, day). Stdlib only: tests start it without Dagster or Spark."""

from __future__ import annotations

import base64
import binascii
import bisect
import dataclasses
import datetime
import functools
import hashlib
import hmac
import math
import random
import re
import urllib.parse

from etr_assets.sources.loopback import JsonHandler, LoopbackServer
from etr_assets.sources.synthetic_data import EPOCH, LAST_DAY, ApiConfig, check_day

FORMATS = ("MALL", "STREET", "KIOSK")
OPENING_EVERY_DAYS = 7  # one new store opens every 7 days after EPOCH...
MEAN_LIFE_DAYS = 420.0  # ...and each closes after an exponential lifetime: about 60 stay open
MEAN_CHANGE_GAP_DAYS = 30.0  # a store's name, city or format changes about this often
FLIP_BACK = 0.2  # share of changes that restore the store's previous values (A -> B -> A)
_CITIES = {
    "MY": ("Kuala Lumpur", "Petaling Jaya", "Penang", "Johor Bahru", "Ipoh", "Kuching"),
    "SG": ("Singapore", "Tampines", "Jurong East", "Woodlands"),
    "TH": ("Bangkok", "Chiang Mai", "Phuket"),
}
_NAMES = ("Kedai", "Lotus", "Mango", "Pandan", "Rattan", "Saga", "Tropika", "Wau", "Zen", "Harimau")
_KINDS = ("Mart", "Corner", "Express", "Outlet", "Hub", "Studio")
MALFORMED_KINDS = {  # kinds cycle in this order over the corrupted records of one day
    "stores": ("wrong_type", "missing_key", "flat_address"),
    "checkins": ("wrong_type", "missing_key", "wrong_day", "unknown_os"),
}
_KEY = {"stores": "store_id", "checkins": "checkin_id"}


@dataclasses.dataclass(frozen=True)
class StoresConfig:
    seed: int = 11
    api_key: str = "stores-local-key"  # clients send it in the X-API-Key header
    base_stores: int = 60  # stores open at EPOCH
    min_checkins: int = 100  # check-ins per day: uniform in min..max
    max_checkins: int = 300
    customers: ApiConfig = ApiConfig()  # the BNPL API whose customer ids check in (erasure reaches both)

    def __post_init__(self) -> None:
        if self.base_stores < 1 or not 0 <= self.min_checkins <= self.max_checkins <= 999:
            raise ValueError("base_stores must be >= 1 and 0 <= min_checkins <= max_checkins <= 999")


@dataclasses.dataclass(frozen=True)
class StoresFaults:
    malformed_rate: float = 0.0  # share (0..1) of each day's records served malformed, deterministically
    fail_after_pages: int | None = None  # data pages after the first N (since set) answer 503, forever
    page_delay_seconds: float = 0.0  # sleep before answering each data page

    def __post_init__(self) -> None:
        pages = self.fail_after_pages
        if not (0 <= self.malformed_rate <= 1 and 0 <= self.page_delay_seconds <= 3600 and (pages or 0) >= 0):
            raise ValueError(f"faults out of range (rate 0..1, delay 0..3600 s, fail_after_pages >= 0): {self}")


# The model: the truth the tests compare with.


def _changed(rng: random.Random, state: dict) -> dict:
    field = rng.choice(("name", "city", "format"))
    if field == "name":
        names = [n for n in (f"{a} {b}" for a in _NAMES for b in _KINDS) if n != state["name"]]
        return {**state, "name": rng.choice(names)}
    if field == "city":
        country = state["address"]["country"]
        city = rng.choice([c for c in _CITIES[country] if c != state["address"]["city"]])
        return {**state, "address": {"city": city, "country": country}}
    return {**state, "format": rng.choice([f for f in FORMATS if f != state["format"]])}


@functools.lru_cache(maxsize=4096)
def _store(config: StoresConfig, index: int) -> tuple[int, int, tuple[int, ...], tuple[dict, ...]]:
    """One store's whole life: (opening ordinal, closing ordinal, first day of each state, the states)."""
    rng = random.Random(f"stores:{config.seed}:store:{index}")
    if index < config.base_stores:
        opens, start = EPOCH.toordinal() - rng.randint(1, 2000), EPOCH.toordinal()
    else:
        opens = start = EPOCH.toordinal() + 1 + (index - config.base_stores) * OPENING_EVERY_DAYS
    closes = start + 1 + int(rng.expovariate(1 / MEAN_LIFE_DAYS))  # the first day it is gone
    country = rng.choices(tuple(_CITIES), (60, 25, 15))[0]
    state = {
        "name": f"{rng.choice(_NAMES)} {rng.choice(_KINDS)}",
        "address": {"city": rng.choice(_CITIES[country]), "country": country},
        "format": rng.choice(FORMATS),
        "opened_on": datetime.date.fromordinal(opens).isoformat(),
    }
    days, states = [opens], [state]
    day = start + 1 + int(rng.expovariate(1 / MEAN_CHANGE_GAP_DAYS))
    while day < closes:
        flip_back = len(states) > 1 and rng.random() < FLIP_BACK
        days.append(day)
        states.append(states[-2] if flip_back else _changed(rng, states[-1]))
        day += 1 + int(rng.expovariate(1 / MEAN_CHANGE_GAP_DAYS))
    return opens, closes, tuple(days), tuple(states)


def stores_as_of(config: StoresConfig, day: datetime.date) -> list[dict]:
    """Every store open at the end of ``day``, by store_id, exactly as served (before faults)."""
    check_day(day)
    ordinal, records = day.toordinal(), []
    for index in range(config.base_stores + (ordinal - EPOCH.toordinal() - 1) // OPENING_EVERY_DAYS + 1):
        opens, closes, days, states = _store(config, index)
        if opens <= ordinal < closes:
            state = states[bisect.bisect_right(days, ordinal) - 1]
            records.append({"store_id": 1001 + index, **state, "address": dict(state["address"])})
    return records


def _email(config: StoresConfig, customer_id: int) -> str:
    rng = random.Random(f"stores:{config.seed}:member:{customer_id}")  # one address per customer
    return f"{rng.choice(_NAMES).lower()}.{rng.randrange(100, 10000)}@{rng.choice(('gmail.com', 'proton.me'))}"


def checkins_for(config: StoresConfig, day: datetime.date) -> list[dict]:
    """The day's check-ins by time, exactly as served (before faults); ids are unique across days."""
    check_day(day)
    ordinal, text = day.toordinal(), day.isoformat()
    stores = [store["store_id"] for store in stores_as_of(config, day)]
    bnpl = config.customers
    customers = bnpl.base_customers + bnpl.signups_per_day * (ordinal - EPOCH.toordinal())  # ids 100001..
    rng = random.Random(f"stores:{config.seed}:checkins:{text}")
    count = rng.randint(config.min_checkins, config.max_checkins) if customers > 0 else 0
    records = []
    for seq, second in enumerate(sorted(rng.randrange(86400) for _ in range(count)), 1):
        customer_id = 100001 + rng.randrange(customers)
        os_ = rng.choices(("ios", "android", "web"), (45, 40, 15))[0]
        record = {
            "checkin_id": int(day.strftime("%y%j")) * 1000 + seq,  # yyddd and seq: unique across days
            "store_id": rng.choice(stores),
            "customer_id": customer_id,
            "email": _email(config, customer_id),
            "device": {"os": os_, "app_version": f"{rng.randint(3, 5)}.{rng.randrange(10)}.{rng.randrange(20)}"},
            "checked_in_at": f"{text}T{second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}Z",
            "day": text,
        }
        records.append(record)
    return records


@functools.lru_cache(maxsize=16)  # a client paging through a day asks for the same list many times: don't mutate it
def served(config: StoresConfig, endpoint: str, day: datetime.date, malformed_rate: float = 0.0) -> list:
    """The records served for ``endpoint`` ("stores" or "checkins") on ``day``: the rate's share of them, those with
    the lowest SHA-256 of (seed, endpoint, day, index), replaced by malformed variants (a higher rate: a superset)."""
    records = list((stores_as_of if endpoint == "stores" else checkins_for)(config, day))
    kinds = MALFORMED_KINDS[endpoint]
    rank = lambda i: hashlib.sha256(f"stores:{config.seed}:malformed:{endpoint}:{day}:{i}".encode()).digest()
    for k, i in enumerate(sorted(range(len(records)), key=rank)[: math.floor(len(records) * malformed_rate + 0.5)]):
        records[i] = _malformed(records[i], _KEY[endpoint], kinds[k % len(kinds)], day)
    return records


def _malformed(record: dict, key: str, kind: str, day: datetime.date) -> dict:
    if kind == "wrong_type":
        return {**record, key: "abc"}
    if kind == "missing_key":
        return {name: value for name, value in record.items() if name != key}
    if kind == "flat_address":
        return {**record, "address": f"{record['address']['city']}, {record['address']['country']}"}
    if kind == "wrong_day":
        before = (day - datetime.timedelta(days=1)).isoformat()
        return {**record, "day": before, "checked_in_at": before + record["checked_in_at"][10:]}
    return {**record, "device": {**record["device"], "os": "symbian"}}  # unknown_os


# The cursor: opaque to clients, base64 of (endpoint, day, offset).


def encode_cursor(endpoint: str, day: datetime.date, offset: int) -> str:
    return base64.urlsafe_b64encode(f"{endpoint}|{day}|{offset}".encode()).decode().rstrip("=")


def _decode_cursor(text: str, endpoint: str, day: datetime.date, total: int) -> int:
    try:
        plain = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        plain = ""
    if not (match := re.fullmatch(rf"{endpoint}\|{day}\|([0-9]{{1,9}})", plain)) or int(match[1]) > total:
        raise ValueError(f"cursor {text!r} is not a cursor of this {endpoint} list")
    return int(match[1])


# The server.

_ROUTES = {  # path -> (endpoint, day parameter, its pattern, its format)
    "/api/v2/stores": ("stores", "snapshot", r"[0-9]{8}", "%Y%m%d"),
    "/api/v2/checkins": ("checkins", "day", r"[0-9]{4}-[0-9]{2}-[0-9]{2}", "%Y-%m-%d"),
}


def _day(text: str, name: str, pattern: str, format_: str) -> datetime.date:
    try:
        day = datetime.datetime.strptime(text, format_).date() if re.fullmatch(pattern, text) else None
    except ValueError:
        day = None
    if day is None or not EPOCH <= day <= LAST_DAY:
        raise ValueError(f"parameter {name}={text!r} must be a day {format_} in {EPOCH}..{LAST_DAY}")
    return day


def _checked(faults: StoresFaults) -> StoresFaults:
    if not isinstance(faults, StoresFaults):
        raise TypeError(f"expected StoresFaults, got {type(faults).__name__}")
    return faults


class RunningStoresApi(LoopbackServer):
    """The server, serving from its own thread once made; ``stop()`` or leaving the ``with`` block shuts it down."""

    def __init__(self, address: tuple[str, int], config: StoresConfig, faults: StoresFaults) -> None:
        self.config, self.faults, self._pages = config, _checked(faults), 0
        self.requests_served = 0  # every request answered, /health included: what a client asked, for tests
        super().__init__(address, _Handler, "synthetic-stores")

    def set_faults(self, faults: StoresFaults) -> None:
        """Replace the faults; the fail_after_pages count starts again."""
        with self._lock:
            self.faults, self._pages = _checked(faults), 0

    def take_page(self) -> bool:
        """Count one data page; False once fail_after_pages pages were served."""
        with self._lock:
            if self.faults.fail_after_pages is not None and self._pages >= self.faults.fail_after_pages:
                return False
            self._pages += 1
            return True


class _Handler(JsonHandler):
    server: RunningStoresApi
    server_version = "EtrSyntheticStores/1.0"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        with self.server._lock:
            self.server.requests_served += 1
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/health":
            return self.send_json(200, {"status": "ok"})
        if not hmac.compare_digest(self.headers.get("X-API-Key", "").encode(), self.server.config.api_key.encode()):
            return self.send_json(401, {"error": "missing or invalid API key (header X-API-Key)"})
        if url.path not in _ROUTES:
            return self.send_json(404, {"error": f"unknown path {url.path}"})
        endpoint, name, pattern, format_ = _ROUTES[url.path]
        params = {key: values[-1] for key, values in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        try:
            day = _day(params.get(name, ""), name, pattern, format_)
            limit = params.get("limit", "50")
            if not re.fullmatch(r"[0-9]{1,3}", limit) or not 1 <= int(limit) <= 500:
                raise ValueError(f"parameter limit={limit!r} must be an integer in 1..500")
            faults = self.server.faults
            records = served(self.server.config, endpoint, day, float(faults.malformed_rate))
            start = _decode_cursor(params["cursor"], endpoint, day, len(records)) if "cursor" in params else 0
        except ValueError as exc:
            return self.send_json(400, {"error": str(exc)})
        if faults.page_delay_seconds:
            self.server.stopping.wait(faults.page_delay_seconds)
        if not self.server.take_page():
            return self.send_json(503, {"error": f"injected fault: failing every page after {faults.fail_after_pages}"})
        end = start + int(limit)
        following = encode_cursor(endpoint, day, end) if end < len(records) else None
        return self.send_json(200, {"result": {"items": records[start:end], "next_cursor": following}})


def serve(
    config: StoresConfig | None = None, host: str = "127.0.0.1", port: int = 0, faults: StoresFaults | None = None
) -> RunningStoresApi:
    """Start the server in a daemon thread and return once it accepts connections (port 0: any free port)."""
    return RunningStoresApi((host, port), config or StoresConfig(), faults or StoresFaults())
