"""A declared HTTP source's client (etr_assets/sources/declaration.py) on dlt's REST client: its auth classes and
paginators, and the session of `dlt.sources.helpers.requests` (429, 5xx and dropped connections retried with backoff,
honouring Retry-After). `iter_record_texts` gives each record's exact text as sent, so the raw zone keeps what
arrived. dlt is imported inside the functions that use it: loading the Dagster definitions never imports it."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from etr_assets.errors import ApiError, SourceConfigError
from etr_assets.sources.declaration import AuthType, FromEnv, PaginatorType, Resource, SourceDeclaration

if TYPE_CHECKING:
    from requests import Request, Response

BACKOFF_SECONDS = 0.5  # the first retry's wait (without a Retry-After); doubles each attempt up to max_delay_seconds
RETRY_STATUS = (429, *range(500, 600))  # what dlt's session retries
_JSON_KINDS = {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}  # else a number


@dataclasses.dataclass
class SourceClient:
    """A declared source's client; `secrets` (auth field -> value) and the other fields override the declaration's."""

    declaration: SourceDeclaration = dataclasses.field(repr=False)
    base_url: str
    secrets: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)
    page_size: int | None = None
    attempts: int | None = None
    backoff: float = BACKOFF_SECONDS
    max_delay: float | None = None
    timeout: float | None = None
    max_pages: int | None = None
    _rest: Any = dataclasses.field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        declared = self.declaration.client
        self.page_size = self.page_size or declared.page_size
        self.attempts = self.attempts or declared.attempts
        self.max_delay = declared.max_delay_seconds if self.max_delay is None else self.max_delay
        self.timeout = self.timeout or declared.timeout_seconds
        self.max_pages = self.max_pages or declared.max_pages
        if declared.paginator.type == PaginatorType.OFFSET and not self.page_size:
            raise SourceConfigError(
                f"{self.declaration.file}: client.paginator: an offset paginator asks for page_size records a "
                "page (its limit): declare client.page_size"
            )

    def get_json(self, path: str, params: Mapping[str, object]) -> dict:
        """One GET of a JSON object (a health check), retrying 429/5xx and dropped connections; any other body is
        an ApiError."""
        response, document, _ = self._get(self._url(path), dict(params))
        if not isinstance(document, dict):
            endpoint = _endpoint(response.url)
            message = f"{endpoint} returned a JSON {_kind(document)}, not an object"
            raise ApiError(self._redact(message), endpoint=endpoint)
        return document

    def iter_record_texts(self, resource: Resource, day: dt.date | None) -> Iterator[list[str]]:
        """Each page's records, as the exact JSON text the API sent, until the paginator finds no next page; a next
        page already read, or paging past max_pages, is an ApiError instead of a loop."""
        from dlt.sources.helpers.rest_client import paginators
        from requests import Request

        kind, selector = self.declaration.client.paginator.type, self.declaration.client.data_selector
        request = Request("GET", self._url(resource.path), params=self._params(resource, day))
        page = {"limit": self.page_size} if kind == PaginatorType.OFFSET else {}  # options in dlt's names
        paginator = getattr(paginators, _PAGINATORS[kind])(**self.declaration.client.paginator.options, **page)
        paginator.init_request(request)
        endpoint, seen, number = _endpoint(request.url), set(), 0

        def fail(why: str) -> ApiError:
            return ApiError(self._redact(f"{endpoint} page {number}: {why}"), endpoint=endpoint)

        while True:
            number += 1
            seen.add(_identity(request))
            shown = ", ".join(f"{k}={v}" for k, v in (request.params or {}).items())
            response, document, text = self._get(request.url, request.params)
            records = _at(document, selector)
            if records is None:
                body = f"; the body is a JSON {_kind(document)}" if not isinstance(document, dict) else ""
                raise fail(f"response has no list at {'.'.join(selector) or '$'} ({shown}{body})")
            texts = record_texts(text, selector)
            if len(texts) != len(records):  # never: the scan and the parser read the same valid body
                raise fail(f"{len(texts)} record texts for {len(records)} records at {'.'.join(selector) or '$'}")
            try:
                paginator.update_state(response, records)
                if paginator.has_next_page:
                    paginator.update_request(request)
            except (ValueError, TypeError, AttributeError) as exc:  # dlt's: a total or next link it cannot read
                raise fail(f"the {kind} paginator cannot read the next page: {exc}") from None
            yield texts
            if not paginator.has_next_page:
                return
            following = _reference(self.declaration, request)
            if kind == PaginatorType.CURSOR:
                cursor = (request.params or {}).get(self.declaration.client.paginator.options["cursor_param"])
                if isinstance(cursor, bool) or not isinstance(cursor, (str, int, float)):
                    raise fail(f"{following} is not a cursor (text or a number)")
            if _identity(request) in seen:
                raise fail(f"{following} was already read: the API's pagination loops")
            if number >= self.max_pages:
                raise fail(
                    f"still a next page ({following}) after {self.max_pages} pages (the source's max_pages); "
                    "the batch is left unsealed and the day is fetched again next run"
                )

    def _url(self, path: str) -> str:
        if urllib.parse.urlsplit(path).scheme in ("http", "https"):
            return path
        return f"{self.base_url.rstrip('/')}/{path.lstrip('/')}" if path else self.base_url

    def _params(self, resource: Resource, day: dt.date | None) -> dict[str, object]:
        params: dict[str, object] = dict(resource.params)
        if resource.day_param:
            if day is None:
                raise ValueError(f"resource {resource.name} is asked for a day ({resource.day_param}): give one")
            params[resource.day_param] = resource.day_value(day)
        client = self.declaration.client
        if self.page_size and client.page_size_param and client.paginator.type != PaginatorType.OFFSET:
            params[client.page_size_param] = self.page_size
        return params

    def _get(self, url: str, params: Mapping[str, object] | None) -> tuple[Response, object, str]:
        """(the response, its JSON document, the body's text) of one GET, retried by the session."""
        import requests

        endpoint = _endpoint(url)
        try:
            response = self._client().request(url, method="GET", params=params)
        except requests.HTTPError as exc:  # raised by an auth's own request (the OAuth2 token)
            raise self._failure(exc.response) from None
        except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError) as exc:
            # a body cut short is as retryable as a dropped connection; the session retried both
            message = f"{endpoint} failed after {self.attempts} attempts; last: connection failed: {_reason(exc)}"
            raise ApiError(self._redact(message), endpoint=endpoint) from None
        except requests.RequestException as exc:
            raise ApiError(self._redact(f"{endpoint} failed: {_reason(exc)}"), endpoint=endpoint) from None
        if response.status_code >= 400:
            raise self._failure(response)
        body = response.content
        try:
            text = body.decode(json.detect_encoding(body))
            document = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ApiError(f"{endpoint} returned a body that is not JSON ({exc})", endpoint=endpoint) from None
        response.json = lambda **_: document  # the paginators read the body again: parsed once
        return response, document, text

    def _failure(self, response: Response) -> ApiError:
        endpoint, status = _endpoint(response.url, response.request.method), response.status_code
        tried = f"failed after {self.attempts} attempts; last:" if status in RETRY_STATUS else "answered"
        message = f"{endpoint} {tried} {status}: {_error_detail(response)}"
        return ApiError(self._redact(message), endpoint=endpoint, status=status)

    def _redact(self, message: str) -> str:
        for secret in self.secrets.values():
            if isinstance(secret, str) and len(secret) >= 3:
                message = message.replace(secret, "***")
        return message

    def _client(self):
        """dlt's REST client on a retrying session, made on first use."""
        if self._rest is None:
            from dlt.common.configuration.specs import RuntimeConfiguration
            from dlt.sources.helpers.requests import Client
            from dlt.sources.helpers.rest_client import RESTClient

            session = Client(
                request_timeout=self.timeout,
                raise_for_status=False,  # the last answer comes back, to be reported with its status and body
                status_codes=RETRY_STATUS,
                request_max_attempts=self.attempts,
                request_backoff_factor=self.backoff,
                request_max_retry_delay=self.max_delay,
                respect_retry_after_header=True,
            ).session
            if not any(name.lower().endswith("_proxy") for name in os.environ):
                # requests reads the proxy and CA bundle variables again for every request (about 1 ms a page): with
                # no proxy set, the CA bundle is read once, here (and no .netrc is consulted, as urllib never did)
                session.trust_env = False
                session.verify = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True
            self._rest = RESTClient(
                base_url=self.base_url,
                headers={"Accept": "application/json"},
                auth=self._auth(session),
                session=session,
                config=RuntimeConfiguration(),  # dlt's defaults, not its config files: nothing here is configured there
            )
        return self._rest

    def _auth(self, session):
        from dlt.sources.helpers.rest_client import auth

        declared = self.declaration.client.auth

        def field(name: str, default: object = None):
            value = self.secrets.get(name, declared.fields.get(name, default))
            if isinstance(value, FromEnv):
                raise SourceConfigError(
                    f"{value.where}: no value for {name}: connect() reads {value.variable} from the environment"
                )
            return value

        match declared.type:
            case AuthType.NONE:
                return None
            case AuthType.BEARER:
                return auth.BearerTokenAuth(token=field("token"))
            case AuthType.API_KEY:
                return auth.APIKeyAuth(
                    name=field("name", "Authorization"), api_key=field("api_key"), location=field("location", "header")
                )
            case AuthType.HTTP_BASIC:
                return auth.HttpBasicAuth(username=field("username"), password=field("password"))
            case AuthType.OAUTH2_CLIENT_CREDENTIALS:
                scopes = field("scopes", ())
                return auth.OAuth2ClientCredentials(
                    access_token_url=self._url(field("access_token_url")),
                    client_id=field("client_id"),
                    client_secret=field("client_secret"),
                    access_token_request_data={"scope": " ".join(scopes)} if scopes else {},
                    session=session,
                )
        raise AssertionError(declared.type)


# Each declared paginator type's class in dlt.sources.helpers.rest_client.paginators.
_PAGINATORS = {
    PaginatorType.SINGLE_PAGE: "SinglePagePaginator",
    PaginatorType.PAGE_NUMBER: "PageNumberPaginator",
    PaginatorType.OFFSET: "OffsetPaginator",
    PaginatorType.CURSOR: "JSONResponseCursorPaginator",
    PaginatorType.JSON_LINK: "JSONLinkPaginator",
    PaginatorType.HEADER_LINK: "HeaderLinkPaginator",
}


def connect(
    declaration: SourceDeclaration,
    environ: Mapping[str, str],
    *,
    base_url: str | None = None,
    secrets: Mapping[str, str] | None = None,
    page_size: int | None = None,
) -> SourceClient:
    """The declared source's client, its `{env: VARIABLE}` values read from `environ` (`base_url` and `secrets`,
    auth field name -> value, win over them). A variable unset is a SourceConfigError before any request."""

    def resolve(value: object) -> object:
        if not isinstance(value, FromEnv):
            return value
        if not (found := environ.get(value.variable)):
            raise SourceConfigError(
                f"{value.where}: the environment variable {value.variable} is not set (source {declaration.name})"
            )
        return found

    url = base_url or resolve(declaration.client.base_url)  # first, as in the file
    given = dict(secrets or {})
    resolved = {
        name: resolve(value)
        for name, value in declaration.client.auth.fields.items()
        if isinstance(value, FromEnv) and name not in given
    }
    return SourceClient(declaration, str(url), {**resolved, **given}, page_size=page_size)


_SPACE = re.compile(r"[ \t\n\r]*")
_WHITESPACE = " \t\n\r"
# raw_decode's scanner without its wrapper: (value, end) of the JSON value starting exactly at a position.
_SCAN = json.JSONDecoder().scan_once


def record_texts(body: str, selector: tuple[str, ...] = ("data",)) -> list[str]:
    """The exact text of each element of the (valid JSON) body's list at `selector` (keys from the top; (): the body
    is the list), in order; of a key given twice the last counts, as for a JSON parser. A line break between a
    record's tokens (a pretty-printed body) becomes a space, the one change JSON Lines needs."""
    records, _ = _texts_at(body, _SPACE.match(body, 0).end(), selector)
    if records is None:
        raise ValueError(f"the body has no list at {'.'.join(selector) or '$'}")
    if "\r" in body or "\n" in body:  # only a pretty-printed body has line breaks, and only between tokens
        records = [record.replace("\r", " ").replace("\n", " ") for record in records]
    return records


def _texts_at(body: str, position: int, path: tuple[str, ...]) -> tuple[list[str] | None, int]:
    """(the texts of the list at `path` in the value at `position`, or None; the value's end)."""

    def skip(at: int) -> int:
        return _SPACE.match(body, at).end()

    if not path:
        if body[position] != "[":
            return None, _SCAN(body, position)[1]
        records, position = [], skip(position + 1)
        if body[position] == "]":
            return records, position + 1
        append, scan = records.append, _SCAN
        while True:  # the hot loop: a whitespace check before any regular expression (a compact body has none)
            end = scan(body, position)[1]
            append(body[position:end])
            if body[end] in _WHITESPACE:
                end = skip(end)
            if body[end] == "]":
                return records, end + 1
            position = end + 1  # past the ","
            if body[position] in _WHITESPACE:
                position = skip(position)
    if body[position] != "{":
        return None, _SCAN(body, position)[1]
    found, position = None, skip(position + 1)
    while body[position] != "}":
        name, position = json.decoder.scanstring(body, position + 1)
        position = skip(skip(position) + 1)  # past the ":"
        if name == path[0]:
            found, position = _texts_at(body, position, path[1:])
        else:
            position = _SCAN(body, position)[1]
        position = skip(position)
        if body[position] == ",":
            position = skip(position + 1)
    return found, position + 1


def _at(document: object, selector: tuple[str, ...]) -> list | None:
    for key in selector:
        if not isinstance(document, dict) or key not in document:
            return None
        document = document[key]
    return document if isinstance(document, list) else None


def _kind(document: object) -> str:
    return _JSON_KINDS.get(type(document), "number")


def _endpoint(url: str, method: str = "GET") -> str:
    """The method and the URL without its query (which may hold an API key)."""
    parts = urllib.parse.urlsplit(url)
    return f"{method} {urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, '', ''))}"


def _identity(request: Request) -> tuple:
    """What a request asks for: its URL and its query's pairs in order of name (a link may order them otherwise)."""
    from requests import PreparedRequest

    prepared = PreparedRequest()
    prepared.prepare_url(request.url, request.params)
    parts = urllib.parse.urlsplit(prepared.url)
    return parts.scheme, parts.netloc, parts.path, tuple(sorted(urllib.parse.parse_qsl(parts.query, True)))


def _reference(declaration: SourceDeclaration, request: Request) -> str:
    """The next page as the paginator found it: `next_page 3`, `page=4`, `next http://...`."""
    kind, options = declaration.client.paginator.type, declaration.client.paginator.options
    params = request.params or {}
    match kind:
        case PaginatorType.CURSOR:
            return f"{options['cursor_path']} {params.get(options['cursor_param'])}"
        case PaginatorType.PAGE_NUMBER:
            return f"{options['page_param']}={params.get(options['page_param'])}"
        case PaginatorType.OFFSET:
            return f"{options['offset_param']}={params.get(options['offset_param'])}"
        case PaginatorType.JSON_LINK:
            return f"{options['next_url_path']} {request.url}"
        case PaginatorType.HEADER_LINK:
            return f"Link rel={options['links_next_key']} {request.url}"
    return "a next page"


def _reason(exc: BaseException) -> str:
    """What failed, in one line without the request's URL (its query may hold an API key): urllib3's reason."""
    reason = exc.args[0] if exc.args else exc
    reason = getattr(reason, "reason", reason)  # a MaxRetryError wraps the connection's error
    if isinstance(reason, BaseException) and reason.args and isinstance(reason.args[0], str):
        reason = reason.args[0]  # a ProtocolError's text without its repr of the cause
    return " ".join(str(reason).split()) or type(exc).__name__


def _error_detail(response: Response) -> str:
    """The body's `error` (or its text), in one line of at most 300 characters."""
    text = response.content.decode("utf-8", "replace")
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    detail = str(document.get("error", text)) if isinstance(document, dict) else text
    return " ".join(detail.split())[:300] or response.reason or "no detail"
