"""A deterministic synthetic BNPL API on loopback, for local runs and tests: the HTTP server (docs/raw-zone.md).

Every response is a pure function of (config, day), so any server instance in any process answers a request
byte for byte the same. Stdlib only: the pipeline and the tests start it without Dagster or Spark.
"""

from __future__ import annotations

import datetime
import functools
import hmac
import http.server
import json
import re
import sys
import threading
import urllib.parse

from etr_assets.sources.synthetic_data import (
    EPOCH,
    LAST_DAY,
    ApiConfig,
    customers_as_of,
    merchants_as_of,
    transactions_for,
)
from etr_assets.sources.synthetic_faults import (
    MALFORMED_KINDS,
    ApiFaults,
    FaultSwitch,
    apply_record_faults,
    failure_response,
    malformed_kind,
    truncates,
)

__all__ = [
    "EPOCH",
    "LAST_DAY",
    "MALFORMED_KINDS",
    "ApiConfig",
    "ApiFaults",
    "RunningApi",
    "customers_as_of",
    "customers_served",
    "malformed_kind",
    "merchants_as_of",
    "merchants_served",
    "serve",
    "transactions_for",
    "transactions_served",
]

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
