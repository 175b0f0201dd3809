"""A deterministic synthetic BNPL API on loopback, for local runs and tests (docs/raw-zone.md): every response is
a pure function of (config, day). Stdlib only: the pipeline and the tests start it without Dagster or Spark."""

from __future__ import annotations

import datetime
import functools
import hmac
import re
import urllib.parse

from etr_assets.sources.loopback import JsonHandler, LoopbackServer
from etr_assets.sources.synthetic_data import (
    EPOCH,
    LAST_DAY,
    ApiConfig,
    customers_as_of,
    merchants_as_of,
    transactions_for,
)
from etr_assets.sources.synthetic_faults import ApiFaults, FaultSwitch, apply_record_faults, failure_response, truncates

# path -> (day parameter, records of a day, entity): what etr_assets/defs/sources/bnpl/defs.yaml declares it serves
_ROUTES = {
    "/v1/transactions": ("date", transactions_for, "transaction"),
    "/v1/customers": ("as_of", customers_as_of, "customer"),
    "/v1/merchants": ("as_of", merchants_as_of, "merchant"),
}


@functools.lru_cache(maxsize=8)  # a client paging through a day asks for the same list many times
def _served(config: ApiConfig, path: str, day: datetime.date, malformed_rate: float, drift: bool) -> list:
    _, records, entity = _ROUTES[path]
    return apply_record_faults(
        records(config, day), seed=config.seed, entity=entity, day=day, malformed_rate=malformed_rate, drift=drift
    )


def _param_date(params: dict, name: str) -> datetime.date:
    if (text := params.get(name, [None])[-1]) is None:
        raise ValueError(f"missing required parameter {name} (YYYY-MM-DD)")
    try:
        day = datetime.date.fromisoformat(text if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text) else "")  # "": no date
    except ValueError:
        raise ValueError(f"parameter {name}={text!r} is not a date YYYY-MM-DD") from None
    if not EPOCH <= day <= LAST_DAY:
        raise ValueError(f"parameter {name}={text!r} is outside {EPOCH}..{LAST_DAY}")
    return day


def _param_int(params: dict, name: str, default: int, low: int, high: int) -> int:
    if (text := params.get(name, [None])[-1]) is None:
        return default
    if not re.fullmatch(r"[0-9]{1,10}", text) or not low <= int(text) <= high:
        raise ValueError(f"parameter {name}={text!r} must be an integer in {low}..{high}")
    return int(text)


class RunningApi(LoopbackServer):
    """The server, serving from its own thread once made; ``stop()`` or leaving the ``with`` block shuts it down."""

    def __init__(self, address: tuple[str, int], config: ApiConfig, faults: ApiFaults) -> None:
        self.config, self.switch = config, FaultSwitch(faults)
        super().__init__(address, _Handler, "synthetic-api")

    @property
    def faults(self) -> ApiFaults:
        """The current faults; ``fail_requests`` is what is left of the countdown."""
        return self.switch.get()

    def set_faults(self, faults: ApiFaults) -> None:
        """Replace all faults at once (fields left out of ``faults`` are off); takes effect on the next request."""
        self.switch.set(faults)


class _Handler(JsonHandler):
    server: RunningApi
    server_version = "EtrSyntheticApi/1.0"

    def _authorized(self) -> bool:
        expected = f"Bearer {self.server.config.token}".encode()
        if hmac.compare_digest(self.headers.get("Authorization", "").encode(), expected):
            return True
        self.send_json(401, {"error": "missing or invalid bearer token"}, {"WWW-Authenticate": "Bearer"})
        return False

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/health":
            return self.send_json(200, {"status": "ok"})
        if not self._authorized():
            return None
        if url.path == "/admin/faults":
            return self.send_json(200, self.server.faults.to_json())
        if url.path not in _ROUTES:
            return self.send_json(404, {"error": f"unknown path {url.path}"})
        config, faults = self.server.config, self.server.faults
        if faults.delay_seconds:
            self.server.stopping.wait(faults.delay_seconds)
        if (failed := self.server.switch.take_failure(url.path)) is not None:
            return self.send_json(*failure_response(failed, url.path))
        try:
            params = urllib.parse.parse_qs(url.query, keep_blank_values=True)
            day = _param_date(params, _ROUTES[url.path][0])
            page = _param_int(params, "page", 1, 1, 10**9)
            size = _param_int(params, "page_size", min(100, config.max_page_size), 1, config.max_page_size)
        except ValueError as exc:  # a bad parameter
            return self.send_json(400, {"error": str(exc)})
        rows = _served(config, url.path, day, faults.malformed_rate, faults.drift)
        start = (page - 1) * size
        following = page + 1 if start + size < len(rows) else None
        body = dict(data=rows[start : start + size], page=page, page_size=size, total=len(rows), next_page=following)
        return self.send_json(200, body, cut_off=truncates(faults, url.path, page))

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        url = urllib.parse.urlsplit(self.path)
        length = self.headers.get("Content-Length", "")
        if not re.fullmatch(r"[0-9]{1,5}", length) or int(length) > 65536:
            self.close_connection = True  # the unread body must not be parsed as the next request
            return self.send_json(
                400 if length else 411, {"error": "a JSON body with Content-Length <= 65536 is needed"}
            )
        raw = self.rfile.read(int(length))
        if not self._authorized():
            return None
        if url.path != "/admin/faults":
            if url.path in _ROUTES or url.path == "/health":
                return self.send_json(405, {"error": f"POST is not allowed on {url.path}"}, {"Allow": "GET"})
            return self.send_json(404, {"error": f"unknown path {url.path}"})
        try:
            faults = ApiFaults.from_json(raw)
        except (TypeError, ValueError) as exc:
            return self.send_json(400, {"error": str(exc)})
        self.server.set_faults(faults)
        return self.send_json(200, faults.to_json())


def serve(
    config: ApiConfig = ApiConfig(), host: str = "127.0.0.1", port: int = 0, faults: ApiFaults = ApiFaults()
) -> RunningApi:
    """Start the server in a daemon thread and return once it accepts connections (port 0: any free port)."""
    return RunningApi((host, port), config, faults)
