"""A small client for paginated JSON APIs: bearer token, timeouts, retries with backoff and jitter.
`iter_record_texts` gives each record's exact text as sent, so the raw zone keeps what arrived."""

from __future__ import annotations

import dataclasses
import datetime as dt
import email.utils
import http.client
import json
import math
import random
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

from etr_assets.errors import EtrError

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
# About ten times the largest synthetic day's pages: an API that never stops paging is a fault, not a big day.
MAX_PAGES = 10_000


class ApiError(EtrError, RuntimeError):
    """The API refused or failed; the message names the endpoint, the status and the attempts made."""

    def __init__(self, message: str, *, endpoint: str, status: int | None = None):
        super().__init__(message)
        self.endpoint, self.status = endpoint, status


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5
    base_delay: float = 0.5  # seconds; doubles each attempt
    max_delay: float = 30.0

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_delay)
        # Full jitter: spreads retries of parallel partitions instead of synchronizing them.
        return rng.uniform(0, min(self.max_delay, self.base_delay * 2 ** (attempt - 1)))


@dataclasses.dataclass
class ApiClient:
    base_url: str
    token: str
    page_size: int = 1000
    timeout: float = 30.0
    retry: RetryPolicy = dataclasses.field(default_factory=RetryPolicy)
    max_pages: int = MAX_PAGES
    _rng: random.Random = dataclasses.field(default_factory=random.Random, repr=False)

    def get_json(self, path: str, params: dict[str, object]) -> dict:
        """GET one JSON object, retrying 429/5xx and connection errors; any other body is an ApiError."""
        return self._get(path, params)[0]

    def _get(self, path: str, params: dict[str, object]) -> tuple[dict, str]:
        """(the JSON object, the body's text) of one GET."""
        where = f"{self.base_url.rstrip('/')}/{path.lstrip('/')}"
        endpoint, headers = f"GET {where}", {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        request = urllib.request.Request(f"{where}?{urllib.parse.urlencode(params)}", headers=headers)
        last, status = "no attempt made", None
        for attempt in range(1, self.retry.attempts + 1):
            retry_after = None
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    body = response.read()
                try:
                    text = body.decode(json.detect_encoding(body))
                    document = json.loads(text)
                except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                    raise ApiError(f"{endpoint} returned a body that is not JSON ({exc})", endpoint=endpoint) from None
                if not isinstance(document, dict):
                    shown, kind = ", ".join(f"{k}={v}" for k, v in params.items()), type(document).__name__
                    message = f"{endpoint} ({shown}) returned a JSON {kind}, not an object with a 'data' list"
                    raise ApiError(message, endpoint=endpoint)
                return document, text
            except urllib.error.HTTPError as exc:
                status, detail = exc.code, _error_detail(exc)
                if status not in RETRYABLE_STATUS:
                    raise ApiError(
                        f"{endpoint} answered {status}: {detail}", endpoint=endpoint, status=status
                    ) from None
                last = f"{status}: {detail}"
                retry_after = _retry_after_seconds(exc.headers.get("Retry-After"))
            except (urllib.error.URLError, http.client.HTTPException, TimeoutError, ConnectionError) as exc:
                # HTTPException covers a body cut short (IncompleteRead): as retryable as a dropped connection.
                status, last = None, f"connection failed: {getattr(exc, 'reason', exc)}"
            if attempt < self.retry.attempts:
                time.sleep(self.retry.delay(attempt, retry_after, self._rng))
        raise ApiError(
            f"{endpoint} failed after {self.retry.attempts} attempts; last: {last}", endpoint=endpoint, status=status
        )

    def iter_record_texts(self, path: str, params: dict[str, object]) -> Iterator[list[str]]:
        """Yield each page's records as the exact JSON text the API sent for each (`record_texts`)."""
        for _, text in self._pages(path, params):
            yield record_texts(text)

    def _pages(self, path: str, params: dict[str, object]) -> Iterator[tuple[dict, str]]:
        """Each page's (document, body text) until the API says there is no next page; a `next_page` that points
        back, or paging past `max_pages`, is an ApiError instead of a loop."""
        page, seen = 1, set()

        def fail(why: str) -> ApiError:
            return ApiError(f"GET {path} page {page}: {why}", endpoint=path)

        while True:
            seen.add(page)
            doc, text = self._get(path, {**params, "page": page, "page_size": self.page_size})
            if not isinstance(doc.get("data"), list):
                raise fail("response has no 'data' list")
            yield doc, text
            if not (next_page := doc.get("next_page")):
                return
            try:
                following = int(next_page)
            except (TypeError, ValueError):
                raise fail(f"next_page {next_page!r} is not a page number") from None
            if following in seen or following < 1:
                raise fail(f"next_page {following} was already read (or is not a page): the API's pagination loops")
            if len(seen) >= self.max_pages:
                raise fail(
                    f"still a next_page ({following}) after {self.max_pages} pages (the client's max_pages); "
                    "the batch is left unsealed and the day is fetched again next run"
                )
            page = following


_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
# raw_decode's scanner without its wrapper: (value, end) of the JSON value starting exactly at a position.
_SCAN = _DECODER.scan_once


def record_texts(body: str) -> list[str]:
    """The exact text of each element of the (valid) body's last `data` array, in order; a line break between a
    record's tokens (a pretty-printed body) becomes a space, the one change JSON Lines needs."""

    def skip(position: int) -> int:
        return _SPACE.match(body, position).end()

    position, records = skip(0) + 1, []  # past the object's "{"
    while True:
        position = skip(position)
        if body[position] == "}":
            return records
        name, position = json.decoder.scanstring(body, position + 1)
        position = skip(skip(position) + 1)  # past the ":"
        if name == "data":
            records, position = [], skip(position + 1)  # past the "["
            while body[position] != "]":
                _, end = _SCAN(body, position)
                records.append(body[position:end])
                position = skip(end)
                if body[position] == ",":
                    position = skip(position + 1)
            position += 1
            if "\r" in body or "\n" in body:  # only a pretty-printed body has line breaks, and only between tokens
                records = [record.replace("\r", " ").replace("\n", " ") for record in records]
        else:
            _, position = _DECODER.raw_decode(body, position)
        position = skip(position)
        if body[position] == ",":
            position += 1


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        body = exc.read().decode("utf-8", "replace")
        return json.loads(body).get("error", body)[:300]
    except Exception:
        return exc.reason if isinstance(exc.reason, str) else "no detail"


def _retry_after_seconds(value: str | None) -> float | None:
    """Seconds from a Retry-After header (seconds or an HTTP date); None (the client's own backoff) for junk."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            parsed = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.UTC)
        return max(0.0, parsed.timestamp() - time.time())
    return max(0.0, seconds) if math.isfinite(seconds) else None
