"""A deterministic synthetic BNPL API on loopback, for local runs and tests.

Every response is a pure function of (config, day): the same request returns byte-identical JSON from any
server instance in any process. Randomness comes only from ``random.Random`` seeded with strings (seeded via
SHA-512, so PYTHONHASHSEED cannot change it), never from the global generator or ``hash()``.

Run on its own with ``python -m etr_assets.sources.synthetic_api --port 8765``. Stdlib only, on purpose:
the pipeline and the tests start it without Dagster or Spark.

Fault switches (``ApiFaults``, logic in ``synthetic_faults``) make it fail, stall, corrupt records, drift its
schema or cut pages off, for tests of ingestion robustness: pass ``faults=`` to ``serve``, call
``RunningApi.set_faults``, or ``POST /admin/faults`` to a server in another process.
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import datetime
import functools
import hmac
import http.server
import json
import math
import random
import re
import signal
import sys
import threading
import urllib.parse

from etr_assets.sources.synthetic_faults import (  # noqa: F401 - MALFORMED_KINDS, malformed_kind re-exported
    MALFORMED_KINDS,
    ApiFaults,
    FaultSwitch,
    apply_record_faults,
    failure_response,
    malformed_kind,
    truncates,
)

EPOCH = datetime.date(2024, 1, 1)
# Served horizon (10 years): a typo'd year must not make the server build millions of customers.
LAST_DAY = EPOCH + datetime.timedelta(days=3652)


@dataclasses.dataclass(frozen=True)
class ApiConfig:
    seed: int = 7
    transactions_per_day: int = 200  # exact number of distinct transactions per day
    token: str = "etr-local-token"  # bearer token clients must send
    base_customers: int = 300  # customers existing at EPOCH
    signups_per_day: int = 3  # new customers each day after EPOCH
    merchants: int = 60
    max_page_size: int = 1000

    def __post_init__(self) -> None:
        if not 0 <= self.transactions_per_day <= 999_999:  # seq is six digits of transaction_id
            raise ValueError(f"transactions_per_day must be 0..999999, got {self.transactions_per_day}")
        if self.base_customers < 0 or self.signups_per_day < 0 or self.merchants < 0 or self.max_page_size < 1:
            raise ValueError("base_customers, signups_per_day and merchants must be >= 0, max_page_size >= 1")
        if self.transactions_per_day and (self.base_customers < 1 or self.merchants < 1):
            raise ValueError("transactions need at least one base customer and one merchant")


# --- shared helpers ----------------------------------------------------------------------------------------

_STATUSES = ("PENDING", "APPROVED", "PROCESSED", "DECLINED", "REFUNDED")
_STATUS_WEIGHTS = (3, 46, 44, 4, 3)
_FIRST = (
    "Aisyah",
    "Ahmad",
    "Mei Ling",
    "Wei Jie",
    "Priya",
    "Arjun",
    "Nurul",
    "Hafiz",
    "Siti",
    "Jun Hao",
    "Kavitha",
    "Daniel",
    "Farah",
    "Ravi",
    "Li Ting",
    "Amir",
    "Sarah",
    "Hui Min",
    "Zul",
    "Chloe",
)
_LAST = (
    "Abdullah",
    "Tan",
    "Lim",
    "Lee",
    "Wong",
    "Ng",
    "Rahman",
    "Ismail",
    "Kumar",
    "Raj",
    "Chua",
    "Goh",
    "Hassan",
    "Ong",
    "Yusof",
    "Teo",
    "Pillai",
    "Chan",
    "Koh",
    "Aziz",
)
_CITIES = {
    "MY": (
        "Kuala Lumpur",
        "Petaling Jaya",
        "Shah Alam",
        "George Town",
        "Johor Bahru",
        "Ipoh",
        "Kota Kinabalu",
        "Kuching",
        "Melaka",
    ),
    "SG": ("Singapore", "Tampines", "Jurong West", "Woodlands", "Ang Mo Kio", "Bedok"),
}
_MCC = {"FASHION": "5651", "ELECTRONICS": "5732", "TRAVEL": "4722", "GROCERY": "5411", "BEAUTY": "5977", "HOME": "5712"}
_BRAND = ("Batik", "Lumen", "Harbour", "Kopi", "Orchid", "Nova", "Merdeka", "Jade", "Sunway", "Tiger", "Lotus", "Pixel")


def _ts(ordinal: int, seconds: int) -> str:
    """ISO-8601 UTC text for a second offset (may exceed one day) from the start of a day ordinal."""
    days, secs = divmod(seconds, 86400)  # formatted by hand: strftime dominated customers_as_of's cost
    day = datetime.date.fromordinal(ordinal + days).isoformat()
    return f"{day}T{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}Z"


def _money(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"  # integer cents: no float rounding in the text


def _check_day(day: datetime.date) -> None:
    if not isinstance(day, datetime.date) or isinstance(day, datetime.datetime):
        raise TypeError(f"expected a datetime.date, got {day!r}")
    if not EPOCH <= day <= LAST_DAY:
        raise ValueError(f"day {day} is outside {EPOCH}..{LAST_DAY}")


# --- slowly changing entities: an initial record plus change events on a few days --------------------------


class _Timeline:
    """One entity's history, drawn lazily from its own Random so a far day costs only that entity's events.

    Draw order is fixed (gap, then per event: time, change, next gap), so extending in any number of steps
    gives the same events: results never depend on which days were asked for first.
    """

    def __init__(self, rng: random.Random, initial: dict, start: int, mean_gap: float, mutate) -> None:
        self.initial, self.days, self.changes = initial, [], []
        self._rng, self._mean_gap, self._mutate, self._state = rng, mean_gap, mutate, dict(initial)
        self._next = start + self._gap()

    def _gap(self) -> int:
        return 1 + int(self._rng.expovariate(1 / self._mean_gap))  # exponential gaps ~ a fixed daily change rate

    def as_of(self, ordinal: int) -> dict:
        while self._next <= ordinal:
            change = {"updated_at": _ts(self._next, self._rng.randrange(86400))}
            change.update(self._mutate(self._rng, self._state))
            self._state.update(change)
            self.days.append(self._next)
            self.changes.append(change)
            self._next += self._gap()
        record = dict(self.initial)
        for change in self.changes[: bisect.bisect_right(self.days, ordinal)]:
            record.update(change)
        return record


def _email(rng: random.Random, first: str, last: str) -> str:
    domain = rng.choice(("gmail.com", "yahoo.com", "outlook.com", "hotmail.my"))
    return f"{first.replace(' ', '').lower()}.{last.lower()}{rng.randrange(1, 999)}@{domain}"


def _phone(rng: random.Random, country: str) -> str:
    if country == "SG":
        return f"+65 {rng.choice('89')}{rng.randrange(1000):03d} {rng.randrange(10000):04d}"
    return f"+601{rng.randrange(10)}-{rng.randrange(1000000, 9999999)}"


def _mutate_customer(rng: random.Random, state: dict) -> dict:
    field = rng.choices(("email", "phone", "city", "risk_segment", "credit_limit"), (2, 2, 1, 1, 2))[0]
    if field in ("email", "phone"):
        # A present value is sometimes withdrawn (NULL); a missing one is always supplied again later.
        if state[field] is not None and rng.random() < 0.15:
            return {field: None}
        if field == "email":
            return {field: _email(rng, state["first_name"], state["last_name"])}
        return {field: _phone(rng, state["country"])}
    if field == "city":
        return {"city": rng.choice([c for c in _CITIES[state["country"]] if c != state["city"]])}
    if field == "risk_segment":
        return {"risk_segment": rng.choice([r for r in ("LOW", "MEDIUM", "HIGH") if r != state["risk_segment"]])}
    return {"credit_limit": _money(rng.randrange(1, 41) * 50000)}


def _new_customer(config: ApiConfig, index: int) -> _Timeline:
    customer_id = 100001 + index
    rng = random.Random(f"etr:{config.seed}:customer:{customer_id}")
    if index < config.base_customers:
        created = EPOCH.toordinal() - rng.randint(1, 730)
        start = EPOCH.toordinal()  # history before EPOCH is folded into the initial record
    else:
        created = start = EPOCH.toordinal() + 1 + (index - config.base_customers) // config.signups_per_day
    created_at = _ts(created, rng.randrange(86400))
    first, last, country = rng.choice(_FIRST), rng.choice(_LAST), rng.choices(("MY", "SG"), (85, 15))[0]
    initial = {
        "customer_id": customer_id,
        "first_name": first,
        "last_name": last,
        "email": None if rng.random() < 0.05 else _email(rng, first, last),
        "phone": None if rng.random() < 0.08 else _phone(rng, country),
        "date_of_birth": datetime.date.fromordinal(
            datetime.date(1955, 1, 1).toordinal() + rng.randrange(50 * 365)
        ).isoformat(),
        "city": rng.choice(_CITIES[country]),
        "country": country,
        "credit_limit": _money(rng.randrange(1, 41) * 50000),
        "risk_segment": rng.choices(("LOW", "MEDIUM", "HIGH"), (50, 35, 15))[0],
        "created_at": created_at,
        "updated_at": created_at,
    }
    return _Timeline(rng, initial, start, 70.0, _mutate_customer)  # ~1.4% of days change


def _new_merchant(config: ApiConfig, index: int) -> _Timeline:
    merchant_id = 500001 + index
    rng = random.Random(f"etr:{config.seed}:merchant:{merchant_id}")
    category = rng.choice(tuple(_MCC))
    created_at = _ts(EPOCH.toordinal() - rng.randint(30, 1500), rng.randrange(86400))
    initial = {
        "merchant_id": merchant_id,
        "name": f"{rng.choice(_BRAND)} {category.title()} {rng.choice(('Sdn Bhd', 'Pte Ltd', 'Store', 'Co'))}",
        "category": category,
        "mcc": _MCC[category],
        "country": rng.choices(("MY", "SG"), (80, 20))[0],
        "status": "ACTIVE",
        "created_at": created_at,
        "updated_at": created_at,
    }
    flip = lambda rng, state: {"status": "SUSPENDED" if state["status"] == "ACTIVE" else "ACTIVE"}  # noqa: E731
    return _Timeline(rng, initial, EPOCH.toordinal(), 333.0, flip)  # ~0.3% of days change


# Timelines are cached per (config, kind, index); the lock serialises the server's request threads.
_LOCK = threading.RLock()
_TIMELINES: dict[tuple, _Timeline] = {}


def _as_of(config: ApiConfig, kind: str, count: int, day: datetime.date) -> list[dict]:
    make = _new_customer if kind == "customer" else _new_merchant
    with _LOCK:
        if len(_TIMELINES) > 200_000:  # many configs in one long process: start over rather than grow forever
            _TIMELINES.clear()
        records = []
        for index in range(count):
            timeline = _TIMELINES.get((config, kind, index))
            if timeline is None:
                timeline = _TIMELINES[(config, kind, index)] = make(config, index)
            records.append(timeline.as_of(day.toordinal()))
        return records


def _customer_count(config: ApiConfig, day: datetime.date) -> int:
    return config.base_customers + config.signups_per_day * (day - EPOCH).days


def customers_as_of(config: ApiConfig, day: datetime.date) -> list[dict]:
    """Every customer as of the end of ``day``, sorted by customer_id."""
    _check_day(day)
    return _as_of(config, "customer", _customer_count(config, day), day)


def merchants_as_of(config: ApiConfig, day: datetime.date) -> list[dict]:
    """Every merchant as of the end of ``day``, sorted by merchant_id."""
    _check_day(day)
    return _as_of(config, "merchant", config.merchants, day)


def transactions_for(config: ApiConfig, day: datetime.date) -> list[dict]:
    """The day's feed in served order: one final record per transaction, plus ~3% stale PENDING copies."""
    _check_day(day)
    rng = random.Random(f"etr:{config.seed}:transactions:{day.isoformat()}")
    n, ordinal, prefix = config.transactions_per_day, day.toordinal(), day.strftime("%Y%m%d")
    customers = _customer_count(config, day)
    finals = []
    for seq, created in enumerate(sorted(rng.randrange(86400) for _ in range(n)), 1):
        status = rng.choices(_STATUSES, _STATUS_WEIGHTS)[0]
        lag = 0 if status == "PENDING" else min(60 + int(rng.expovariate(1 / 7200)), 2 * 86400)
        cents = round(math.exp(rng.gauss(4.4, 1.0)) * 100)  # log-normal: many small baskets, a long tail
        finals.append(
            {
                "transaction_id": int(f"{prefix}{seq:06d}"),
                "customer_id": 100001 + int(customers * rng.random() ** 1.3),  # some customers buy more often
                "merchant_id": 500001 + rng.randrange(config.merchants),
                "amount": _money(min(max(cents, 500), 250000)),
                "currency": rng.choices(("MYR", "SGD", "USD"), (80, 12, 8))[0],
                "instalments": rng.choices((3, 4, 6, 12), (50, 25, 15, 10))[0],
                "payment_method": rng.choices(("CARD", "FPX", "EWALLET", "DIRECT_DEBIT"), (45, 20, 25, 10))[0],
                "status": status,
                "transaction_date": day.isoformat(),
                "created_at": _ts(ordinal, created),
                "updated_at": _ts(ordinal, created + lag),
            }
        )
    # Re-sent transactions: the stale copy goes after the final one for every other pick, so consumers
    # must deduplicate on updated_at, not on position in the feed.
    eligible = [i for i, record in enumerate(finals) if record["status"] != "PENDING"]
    picks = sorted(rng.sample(eligible, min(len(eligible), max(1, round(n * 0.03))))) if eligible else []
    keyed = [(float(i), 0, record) for i, record in enumerate(finals)]
    for j, i in enumerate(picks):
        stale = dict(finals[i], status="PENDING", updated_at=finals[i]["created_at"])
        key = rng.uniform(i + 0.01, n) if j % 2 == 0 else rng.uniform(-1.0, i - 0.01)
        keyed.append((key, 1, stale))
    return [record for _, _, record in sorted(keyed, key=lambda item: item[:2])]


# --- HTTP ---------------------------------------------------------------------------------------------------

_ROUTES = {
    "/v1/transactions": ("date", transactions_for),
    "/v1/customers": ("as_of", customers_as_of),
    "/v1/merchants": ("as_of", merchants_as_of),
}
_ENTITIES = {"/v1/transactions": "transaction", "/v1/customers": "customer", "/v1/merchants": "merchant"}


class _BadRequest(ValueError):
    pass


@functools.lru_cache(maxsize=8)
def _feed(config: ApiConfig, path: str, day: datetime.date) -> list[dict]:
    return _ROUTES[path][1](config, day)  # a client paging through a day asks for the same list many times


@functools.lru_cache(maxsize=8)
def _served_feed(config: ApiConfig, path: str, day: datetime.date, malformed_rate: float, drift: bool) -> list:
    if not malformed_rate and not drift:
        return _feed(config, path, day)
    return apply_record_faults(
        _feed(config, path, day),
        seed=config.seed,
        entity=_ENTITIES[path],
        day=day,
        malformed_rate=malformed_rate,
        drift=drift,
    )


def _served(config: ApiConfig, faults: ApiFaults, path: str, day: datetime.date) -> list:
    return apply_record_faults(
        _ROUTES[path][1](config, day),
        seed=config.seed,
        entity=_ENTITIES[path],
        day=day,
        malformed_rate=faults.malformed_rate,
        drift=faults.drift,
    )


def transactions_served(config: ApiConfig, faults: ApiFaults, day: datetime.date) -> list:
    """Exactly the list the server serves for ``date=day`` under ``faults`` (before paging): the truth a
    test needs without HTTP. Items are dicts, except the string ``"#corrupted#"`` for kind not_an_object;
    ``malformed_kind(item)`` tells which items were corrupted. Only malformed_rate and drift matter here."""
    return _served(config, faults, "/v1/transactions", day)


def customers_served(config: ApiConfig, faults: ApiFaults, day: datetime.date) -> list[dict]:
    """Like ``transactions_served``, for ``/v1/customers?as_of=day``."""
    return _served(config, faults, "/v1/customers", day)


def merchants_served(config: ApiConfig, faults: ApiFaults, day: datetime.date) -> list[dict]:
    """Like ``transactions_served``, for ``/v1/merchants?as_of=day``."""
    return _served(config, faults, "/v1/merchants", day)


def _param_date(params: dict, name: str) -> datetime.date:
    text = params.get(name, [None])[-1]
    if text is None:
        raise _BadRequest(f"missing required parameter {name} (YYYY-MM-DD)")
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            raise ValueError
        day = datetime.date.fromisoformat(text)
    except ValueError:
        raise _BadRequest(f"parameter {name}={text!r} is not a date YYYY-MM-DD") from None
    if not EPOCH <= day <= LAST_DAY:
        raise _BadRequest(f"parameter {name}={text!r} is outside {EPOCH}..{LAST_DAY}")
    return day


def _param_int(params: dict, name: str, default: int, low: int, high: int) -> int:
    text = params.get(name, [None])[-1]
    if text is None:
        return default
    if not re.fullmatch(r"[0-9]{1,10}", text) or not low <= int(text) <= high:
        raise _BadRequest(f"parameter {name}={text!r} must be an integer in {low}..{high}")
    return int(text)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # listen backlog; the default 5 drops bursts of parallel clients for a second

    def __init__(self, address: tuple[str, int], config: ApiConfig, faults: ApiFaults) -> None:
        self.config, self.faults = config, FaultSwitch(faults)
        self.stopping = threading.Event()  # wakes requests sleeping for delay_seconds when the server stops
        super().__init__(address, _Handler)

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return  # the client hung up (e.g. timed out waiting for a delayed answer): nothing to report
        super().handle_error(request, client_address)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    server_version = "EtrSyntheticApi/1.0"

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - quiet: tests and runs read stderr
        pass

    def _send(self, code: int, body: dict, headers: dict | None = None) -> None:
        payload = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _authorized(self) -> bool:
        expected = f"Bearer {self.server.config.token}".encode()
        if hmac.compare_digest(self.headers.get("Authorization", "").encode(), expected):
            return True
        self._send(401, {"error": "missing or invalid bearer token"}, {"WWW-Authenticate": "Bearer"})
        return False

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/health":
            return self._send(200, {"status": "ok"})
        if not self._authorized():
            return None
        if url.path == "/admin/faults":
            return self._send(200, self.server.faults.get().to_json())
        if url.path not in _ROUTES:
            return self._send(404, {"error": f"unknown path {url.path}"})
        config, faults = self.server.config, self.server.faults.get()
        if faults.delay_seconds:
            self.server.stopping.wait(faults.delay_seconds)
        failed = self.server.faults.take_failure(url.path)
        if failed is not None:
            return self._send(*failure_response(failed, url.path))
        try:
            params = urllib.parse.parse_qs(url.query, keep_blank_values=True)
            day = _param_date(params, _ROUTES[url.path][0])
            page = _param_int(params, "page", 1, 1, 10**9)
            size = _param_int(params, "page_size", min(100, config.max_page_size), 1, config.max_page_size)
        except _BadRequest as exc:
            return self._send(400, {"error": str(exc)})
        rows = _served_feed(config, url.path, day, faults.malformed_rate, faults.drift)
        start = (page - 1) * size
        more = start + size < len(rows)
        body = {
            "data": rows[start : start + size],
            "page": page,
            "page_size": size,
            "total": len(rows),
            "next_page": page + 1 if more else None,
        }
        if truncates(faults, url.path, page):
            return self._send_truncated(body)
        return self._send(200, body)

    def _send_truncated(self, body: dict) -> None:
        """A mid-download failure: headers promise the whole body, half is sent, then the connection closes."""
        payload = json.dumps(body, separators=(",", ":")).encode()
        self.close_connection = True  # handle() then returns and the server closes the socket; thread lives on
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload[: len(payload) // 2])

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        url = urllib.parse.urlsplit(self.path)
        length = self.headers.get("Content-Length", "")
        if not re.fullmatch(r"[0-9]{1,5}", length) or int(length) > 65536:
            self.close_connection = True  # the unread body must not be parsed as the next request
            return self._send(400 if length else 411, {"error": "a JSON body with Content-Length <= 65536 is needed"})
        raw = self.rfile.read(int(length))
        if not self._authorized():
            return None
        if url.path != "/admin/faults":
            if url.path in _ROUTES or url.path == "/health":
                return self._send(405, {"error": f"POST is not allowed on {url.path}"}, {"Allow": "GET"})
            return self._send(404, {"error": f"unknown path {url.path}"})
        try:
            faults = ApiFaults.from_json(raw)
        except (TypeError, ValueError) as exc:
            return self._send(400, {"error": str(exc)})
        self.server.faults.set(faults)
        return self._send(200, faults.to_json())


class RunningApi:
    """A server started by ``serve``; ``stop()`` (or leaving the ``with`` block) shuts it down."""

    def __init__(self, server: _Server, thread: threading.Thread, config: ApiConfig) -> None:
        host, port = server.server_address[:2]
        host = "127.0.0.1" if host in ("0.0.0.0", "") else host
        self.url, self.config = f"http://{host}:{port}", config
        self._server, self._thread, self._lock, self._stopped = server, thread, threading.Lock(), False

    @property
    def faults(self) -> ApiFaults:
        """The current faults; ``fail_requests`` is what is left of the countdown."""
        return self._server.faults.get()

    def set_faults(self, faults: ApiFaults) -> None:
        """Replace all faults at once (fields left out of ``faults`` are off); takes effect on the next request."""
        self._server.faults.set(faults)

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            self._server.stopping.set()
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()

    def __enter__(self) -> RunningApi:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


def serve(
    config: ApiConfig = ApiConfig(), host: str = "127.0.0.1", port: int = 0, faults: ApiFaults = ApiFaults()
) -> RunningApi:
    """Start the server in a daemon thread and return once it accepts connections (port 0: any free port)."""
    server = _Server((host, port), config, faults)  # bound and listening here: connections queue until served
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.05},
        name=f"synthetic-api-{server.server_address[1]}",
        daemon=True,
    )
    thread.start()
    return RunningApi(server, thread, config)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m etr_assets.sources.synthetic_api",
        description="Serve deterministic synthetic BNPL data over HTTP.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port (printed)")
    parser.add_argument("--seed", type=int, default=ApiConfig.seed)
    parser.add_argument("--per-day", type=int, default=ApiConfig.transactions_per_day)
    parser.add_argument("--token", default=ApiConfig.token)
    faults = parser.add_argument_group("faults (also switchable at run time: POST /admin/faults)")
    faults.add_argument("--fail-requests", type=int, default=0, metavar="N", help="fail the next N data requests")
    faults.add_argument("--fail-status", type=int, default=ApiFaults.fail_status, metavar="S")
    faults.add_argument(
        "--retry-after",
        type=float,
        default=ApiFaults.retry_after_seconds,
        metavar="S",
        help="Retry-After seconds sent with --fail-status 429",
    )
    faults.add_argument("--fail-path-prefix", default="", metavar="PATH", help="fail only paths starting so")
    faults.add_argument("--delay", type=float, default=0.0, metavar="S", help="sleep before each data answer")
    faults.add_argument("--malformed-rate", type=float, default=0.0, metavar="R", help="fraction of bad records")
    faults.add_argument("--drift", action="store_true", help="add unknown fields to every record")
    faults.add_argument("--truncate-after-pages", type=int, default=0, metavar="N", help="cut off pages after N")
    args = parser.parse_args(argv)
    try:
        config = ApiConfig(seed=args.seed, transactions_per_day=args.per_day, token=args.token)
        initial = ApiFaults(
            fail_requests=args.fail_requests,
            fail_status=args.fail_status,
            retry_after_seconds=args.retry_after,
            fail_path_prefix=args.fail_path_prefix,
            delay_seconds=args.delay,
            malformed_rate=args.malformed_rate,
            drift=args.drift,
            truncate_after_pages=args.truncate_after_pages,
        )
    except ValueError as exc:
        parser.error(str(exc))
    stopping = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stopping.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with serve(config, args.host, args.port, initial) as api:
            print(f"Synthetic BNPL API on {api.url} (token: {config.token}). Ctrl-C stops it.", flush=True)
            if initial != ApiFaults():
                print(f"Faults: {json.dumps(initial.to_json())}", flush=True)
            while not stopping.wait(0.2):  # a timed wait lets the signal handler run promptly
                pass
    except OSError as exc:
        print(f"cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
