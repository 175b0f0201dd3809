"""A declared source's client (dlt's REST client) against a real HTTP server on loopback: every auth kind, every
paginator, data selectors, exact record texts, retries and the faults that must end in an ApiError, not a loop."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import http.server
import json
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable

import pytest
import yaml

from etr_assets.errors import ApiError, SourceConfigError
from etr_assets.sources.declaration import COMPONENT_TYPE, SourceDeclaration, load_declaration
from etr_assets.sources.http_fetch import SourceClient, connect, record_texts

ITEMS = [{"id": n, "name": f"item {n}"} for n in range(1, 13)]
DAY = "2025-03-04"
QUICK = {"attempts": 3, "backoff": 0.01, "max_delay": 0.05}


@dataclasses.dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: str
    at: float


# An answer: (status, headers, body); a body that is not bytes is sent as JSON.
Answer = tuple[int, dict[str, str], object]


class Server:
    """Answers each path with its route (a function of the request seen and how many requests that path had);
    remembers every request, with its time."""

    def __init__(self):
        self.requests: list[Seen] = []
        self.routes: dict[str, Callable[[Seen, int], Answer]] = {}
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def answer(self, method: str) -> None:
                url = urllib.parse.urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                seen = Seen(
                    method,
                    url.path,
                    dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True)),
                    dict(self.headers.items()),
                    self.rfile.read(length).decode() if length else "",
                    time.monotonic(),
                )
                outer.requests.append(seen)
                route = outer.routes.get(url.path)
                count = sum(1 for r in outer.requests if r.path == url.path)
                status, headers, body = route(seen, count) if route else (404, {}, {"error": "no such path"})
                payload = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                headers = {"Content-Length": str(len(payload)), **headers}
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload[: int(headers["Content-Length"])])

            def do_GET(self):  # noqa: N802 - http.server's naming
                self.answer("GET")

            def do_POST(self):  # noqa: N802
                self.answer("POST")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def of(self, path: str) -> list[Seen]:
        return [r for r in self.requests if r.path == path]


@pytest.fixture
def server():
    running = Server()
    running.thread.start()
    yield running
    running.server.shutdown()
    running.server.server_close()
    running.thread.join()


def declare(tmp_path, client: dict, endpoint: dict | None = None) -> SourceDeclaration:
    """A one-resource source (`items`) with this client, through a component file as a run reads one."""
    attributes = {
        "name": "shop",
        "client": {"base_url": {"env": "SHOP_URL"}, **client},
        "resources": [
            {
                "name": "items",
                "endpoint": endpoint or {"path": "/items", "day": {"param": "as_of"}},
                "kind": "entities",
                "key": "id",
                "columns": [{"name": "id", "type": "bigint", "required": True}, {"name": "name", "type": "string"}],
            }
        ],
    }
    path = tmp_path / "shop" / "defs.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"type": COMPONENT_TYPE, "attributes": attributes}, sort_keys=False))
    return load_declaration(path)


def fetch(client: SourceClient, day: str | None = DAY) -> list[list[dict]]:
    resource = client.declaration.resource("items")
    pages = client.iter_record_texts(resource, dt.date.fromisoformat(day) if day else None)
    return [[json.loads(text) for text in page] for page in pages]


def client_for(server: Server, declaration: SourceDeclaration, secrets=None, **overrides) -> SourceClient:
    return dataclasses.replace(connect(declaration, {}, base_url=server.url, secrets=secrets or {}), **overrides)


def bearer(tmp_path, paginator: dict | str, **client) -> SourceDeclaration:
    auth = {"type": "bearer", "token": {"env": "SHOP_TOKEN"}}
    return declare(tmp_path, {"auth": auth, "paginator": paginator, "data_selector": "data", **client})


# Auth


def test_a_bearer_token_from_the_environment_is_sent(server, tmp_path):
    server.routes["/items"] = lambda seen, n: (200, {}, {"data": ITEMS[:2]})
    declaration = bearer(tmp_path, "single_page")
    client = connect(declaration, {"SHOP_URL": server.url, "SHOP_TOKEN": "t0k3n"})
    assert fetch(client) == [ITEMS[:2]]
    (seen,) = server.requests
    assert seen.headers["Authorization"] == "Bearer t0k3n" and seen.query == {"as_of": DAY}
    assert seen.headers["Accept"] == "application/json"


@pytest.mark.parametrize("location", ["header", "query"])
def test_an_api_key_goes_in_a_header_or_the_query_and_never_into_an_error(server, tmp_path, location):
    auth = {"type": "api_key", "name": "X-Api-Key", "location": location, "api_key": {"env": "SHOP_KEY"}}
    declaration = declare(tmp_path, {"auth": auth, "paginator": "single_page", "data_selector": "data"})
    server.routes["/items"] = lambda seen, n: (200, {}, {"data": ITEMS[:1]})
    client = client_for(server, declaration, {"api_key": "k-123456"})
    assert fetch(client) == [ITEMS[:1]]
    (seen,) = server.requests
    if location == "header":
        assert seen.headers["X-Api-Key"] == "k-123456" and "X-Api-Key" not in seen.query
    else:
        assert seen.query == {"as_of": DAY, "X-Api-Key": "k-123456"} and "X-Api-Key" not in seen.headers

    server.routes["/items"] = lambda seen, n: (403, {}, {"error": "key k-123456 is revoked"})
    with pytest.raises(ApiError, match="answered 403") as refused:
        fetch(client)
    assert "k-123456" not in str(refused.value) and "***" in str(refused.value)


def test_http_basic_sends_the_user_and_password(server, tmp_path):
    auth = {"type": "http_basic", "username": "etl", "password": {"env": "SHOP_PASSWORD"}}
    declaration = declare(tmp_path, {"auth": auth, "paginator": "single_page", "data_selector": "data"})
    server.routes["/items"] = lambda seen, n: (200, {}, {"data": []})
    assert fetch(connect(declaration, {"SHOP_URL": server.url, "SHOP_PASSWORD": "pa:ss"})) == [[]]
    assert server.requests[0].headers["Authorization"] == "Basic " + base64.b64encode(b"etl:pa:ss").decode()


def test_oauth2_client_credentials_get_one_token_for_every_page(server, tmp_path):
    auth = {
        "type": "oauth2_client_credentials",
        "access_token_url": "/oauth/token",  # relative: on the base URL
        "client_id": {"env": "SHOP_CLIENT_ID"},
        "client_secret": {"env": "SHOP_CLIENT_SECRET"},
        "scopes": ["items:read", "items:list"],
    }
    paginator = {"type": "page_number", "total_path": "total_pages"}
    declaration = declare(tmp_path, {"auth": auth, "paginator": paginator, "data_selector": "data"})
    server.routes["/oauth/token"] = lambda seen, n: (200, {}, {"access_token": f"issued-{n}", "expires_in": 600})
    server.routes["/items"] = lambda seen, n: (200, {}, {"data": [ITEMS[n]], "total_pages": 3})
    environ = {"SHOP_URL": server.url, "SHOP_CLIENT_ID": "etr", "SHOP_CLIENT_SECRET": "s3cret"}
    assert fetch(connect(declaration, environ)) == [[ITEMS[1]], [ITEMS[2]], [ITEMS[3]]]
    (token,) = server.of("/oauth/token")
    assert token.method == "POST" and urllib.parse.parse_qs(token.body) == {
        "client_id": ["etr"],
        "client_secret": ["s3cret"],
        "grant_type": ["client_credentials"],
        "scope": ["items:read items:list"],
    }
    assert [r.headers["Authorization"] for r in server.of("/items")] == ["Bearer issued-1"] * 3


def test_a_refused_oauth2_token_is_an_api_error_naming_the_token_endpoint(server, tmp_path):
    auth = {
        "type": "oauth2_client_credentials",
        "access_token_url": f"{server.url}/oauth/token",
        "client_id": {"env": "SHOP_CLIENT_ID"},
        "client_secret": {"env": "SHOP_CLIENT_SECRET"},
    }
    declaration = declare(tmp_path, {"auth": auth, "paginator": "single_page", "data_selector": "data"})
    server.routes["/oauth/token"] = lambda seen, n: (401, {}, {"error": "invalid_client"})
    client = client_for(server, declaration, {"client_id": "etr", "client_secret": "wrong"})
    with pytest.raises(ApiError) as refused:
        fetch(client)
    assert str(refused.value) == f"POST {server.url}/oauth/token answered 401: invalid_client"
    assert refused.value.status == 401 and server.of("/items") == []


# Paginators


def pages_of(size: int) -> list[list[dict]]:
    return [ITEMS[i : i + size] for i in range(0, len(ITEMS), size)]


def test_single_page_asks_once(server, tmp_path):
    server.routes["/items"] = lambda seen, n: (200, {}, {"data": ITEMS, "next_page": 2, "next": "/items?x=2"})
    assert fetch(client_for(server, bearer(tmp_path, "single_page"), {"token": "t"})) == [ITEMS]
    assert len(server.requests) == 1


@pytest.mark.parametrize("total", [True, False])
def test_page_number_stops_at_the_total_or_at_an_empty_page(server, tmp_path, total):
    def route(seen, n):
        page = int(seen.query["p"])
        body = {"data": ITEMS[(page - 1) * 5 : page * 5]}
        return 200, {}, ({**body, "meta": {"pages": 3}} if total else body)

    server.routes["/items"] = route
    options = {"type": "page_number", "page_param": "p", **({"total_path": "meta.pages"} if total else {})}
    declaration = bearer(tmp_path, options, page_size={"param": "per_page", "value": 5})
    assert fetch(client_for(server, declaration, {"token": "t"})) == [*pages_of(5), *([] if total else [[]])]
    assert [r.query for r in server.requests] == [
        {"as_of": DAY, "per_page": "5", "p": str(p)} for p in range(1, 4 if total else 5)
    ]


def test_offset_takes_the_page_size_as_its_limit(server, tmp_path):
    def route(seen, n):
        offset, limit = int(seen.query["skip"]), int(seen.query["take"])
        return 200, {}, {"data": ITEMS[offset : offset + limit], "count": len(ITEMS)}

    server.routes["/items"] = route
    paginator = {"type": "offset", "offset_param": "skip", "limit_param": "take", "total_path": "count"}
    declaration = bearer(tmp_path, paginator, page_size={"param": "per_page", "value": 100})
    assert fetch(client_for(server, declaration, {"token": "t"}, page_size=5)) == pages_of(5)
    assert [r.query for r in server.requests] == [{"as_of": DAY, "skip": str(s), "take": "5"} for s in (0, 5, 10)]


def test_a_cursor_is_sent_back_until_there_is_none(server, tmp_path):
    cursors = {None: ("c1", 0), "c1": ("c2", 4), "c2": (None, 8)}

    def route(seen, n):
        following, start = cursors[seen.query.get("after")]
        return 200, {}, {"data": ITEMS[start : start + 4], "paging": {"next": following}}

    server.routes["/items"] = route
    paginator = {"type": "cursor", "cursor_path": "paging.next", "cursor_param": "after"}
    declaration = bearer(tmp_path, paginator, page_size={"param": "limit", "value": 4})
    assert fetch(client_for(server, declaration, {"token": "t"})) == pages_of(4)
    assert [r.query.get("after") for r in server.requests] == [None, "c1", "c2"]
    assert all(r.query["limit"] == "4" and r.query["as_of"] == DAY for r in server.requests)


def test_a_json_link_is_followed_relative_or_absolute(server, tmp_path):
    def route(seen, n):
        page = int(seen.query.get("page", 1))
        following = {1: "/items?page=2", 2: f"{server.url}/items?page=3", 3: None}[page]
        return 200, {}, {"data": pages_of(4)[page - 1], "links": {"next": following}}

    server.routes["/items"] = route
    declaration = bearer(tmp_path, {"type": "json_link", "next_url_path": "links.next"})
    assert fetch(client_for(server, declaration, {"token": "t"})) == pages_of(4)
    # The link is the whole next request: the first request's parameters are not added to it.
    assert [r.query for r in server.requests] == [{"as_of": DAY}, {"page": "2"}, {"page": "3"}]
    assert all(r.headers["Authorization"] == "Bearer t" for r in server.requests)


def test_a_header_link_is_followed(server, tmp_path):
    def route(seen, n):
        page = int(seen.query.get("page", 1))
        link = {"Link": f'<{server.url}/items?page={page + 1}>; rel="next", <{server.url}/items>; rel="first"'}
        return 200, link if page < 3 else {}, pages_of(4)[page - 1]

    server.routes["/items"] = route
    declaration = declare(tmp_path, {"paginator": "header_link"})  # no auth; the body is the list
    assert fetch(client_for(server, declaration)) == pages_of(4)
    assert [r.query.get("page") for r in server.requests] == [None, "2", "3"]
    assert "Authorization" not in server.requests[0].headers


# Data selectors and record texts


def test_a_nested_data_selector_and_a_top_level_list(server, tmp_path):
    server.routes["/items"] = lambda seen, n: (200, {}, {"result": {"count": 2, "items": ITEMS[:2]}, "items": [0]})
    nested = declare(tmp_path, {"paginator": "single_page", "data_selector": "result.items"})
    assert fetch(client_for(server, nested)) == [ITEMS[:2]]
    server.routes["/items"] = lambda seen, n: (200, {}, ITEMS[:3])
    assert fetch(client_for(server, declare(tmp_path, {"paginator": "single_page", "data_selector": "$"}))) == [
        ITEMS[:3]
    ]


def test_record_texts_are_kept_exactly_as_sent(server, tmp_path):
    """Escapes, key order, duplicate keys and number spellings stay as sent; only the line breaks of a pretty-printed
    body become spaces (JSON Lines needs one record per line)."""
    records = [
        '{"name":"caf\\u00e9 \\ud800","id":1}',
        '{"id": 2, "id": 3, "price": 1.50, "tags": ["x", {"n": [1, 2]}]}',
        '{\n    "z": null,\n    "id": 4\n  }',
        '"not an object"',
    ]
    body = '{"result": {"items": [0], "items": [\n  ' + ",\n  ".join(records) + '\n], "more": {"items": []}}}'
    assert json.loads(body)["result"]["items"][1] == {"id": 3, "price": 1.5, "tags": ["x", {"n": [1, 2]}]}
    server.routes["/items"] = lambda seen, n: (200, {"Content-Type": "application/json"}, body.encode())
    client = client_for(server, declare(tmp_path, {"paginator": "single_page", "data_selector": "result.items"}))
    (page,) = client.iter_record_texts(client.declaration.resource("items"), dt.date.fromisoformat(DAY))
    assert page == [*records[:2], records[2].replace("\n", " "), records[3]]
    assert record_texts('[ {"a" : 1} ,2,"\\"]"]', ()) == ['{"a" : 1}', "2", '"\\"]"']
    assert record_texts('{"data":[],"data":[{"id":1}]}') == ['{"id":1}']


# Retries


def test_429_waits_the_retry_after_it_gives(server, tmp_path):
    server.routes["/items"] = lambda seen, n: (
        (429, {"Retry-After": "1"}, {"error": "slow down"})
        if n == 1
        else (
            200,
            {},
            {"data": ITEMS[:1]},
        )
    )
    client = client_for(server, bearer(tmp_path, "single_page"), {"token": "t"}, attempts=2, backoff=0.01, max_delay=5)
    assert fetch(client) == [ITEMS[:1]]
    first, second = server.requests
    assert second.at - first.at >= 0.95  # the server's second, not the 0.01 s backoff


def test_a_retry_after_past_max_delay_or_junk_falls_to_the_backoff(server, tmp_path):
    answers = iter([(429, {"Retry-After": "3600"}, {}), (429, {"Retry-After": "soon"}, {}), (200, {}, {"data": []})])
    server.routes["/items"] = lambda seen, n: next(answers)
    assert fetch(client_for(server, bearer(tmp_path, "single_page"), {"token": "t"}, **QUICK)) == [[]]
    assert server.requests[-1].at - server.requests[0].at < 1


def test_5xx_is_retried_then_reported_with_the_endpoint_status_and_attempts(server, tmp_path):
    server.routes["/items"] = lambda seen, n: (503 if n < 3 else 200, {}, {"error": "busy", "data": ITEMS[:1]})
    client = client_for(server, bearer(tmp_path, "single_page"), {"token": "t"}, **QUICK)
    assert fetch(client) == [ITEMS[:1]] and len(server.requests) == 3

    server.requests.clear()
    server.routes["/items"] = lambda seen, n: (500, {}, {"error": "database down"})
    with pytest.raises(ApiError) as failure:
        fetch(client)
    assert str(failure.value) == f"GET {server.url}/items failed after 3 attempts; last: 500: database down"
    assert failure.value.status == 500 and failure.value.endpoint == f"GET {server.url}/items"
    assert len(server.requests) == 3


def test_a_client_error_is_not_retried(server, tmp_path):
    server.routes["/items"] = lambda seen, n: (404, {}, b"no such shop")
    with pytest.raises(ApiError, match=r"GET .*/items answered 404: no such shop") as failure:
        fetch(client_for(server, bearer(tmp_path, "single_page"), {"token": "t"}, **QUICK))
    assert failure.value.status == 404 and len(server.requests) == 1


def test_a_body_cut_short_is_retried(server, tmp_path):
    whole = json.dumps({"data": ITEMS}).encode()

    def route(seen, n):  # the first answer promises the whole body, sends half and closes the connection
        return 200, {"Content-Length": str(len(whole))}, whole if n > 1 else whole[: len(whole) // 2]

    server.routes["/items"] = route
    assert fetch(client_for(server, bearer(tmp_path, "single_page"), {"token": "t"}, **QUICK)) == [ITEMS]
    assert len(server.requests) == 2


def test_a_timeout_is_retried_then_reported_in_one_line(server, tmp_path):
    def route(seen, n):
        time.sleep(0.3)
        return 502, {}, b"<html>\n<body>bad\n gateway</body>\n</html>"

    server.routes["/items"] = route
    client = client_for(server, bearer(tmp_path, "single_page"), {"token": "t"}, timeout=0.1, **QUICK)
    with pytest.raises(ApiError, match=r"/items failed after 3 attempts; last: connection failed: .*Read timed out"):
        fetch(client)
    assert len(server.requests) == 3
    server.routes["/items"] = lambda seen, n: (502, {}, b"<html>\n<body>bad\n gateway</body>\n</html>")
    with pytest.raises(ApiError) as failure:
        fetch(dataclasses.replace(client, timeout=5))
    assert str(failure.value).endswith("last: 502: <html> <body>bad gateway</body> </html>")


def test_a_refused_connection_is_retried_then_reported(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    declaration = bearer(tmp_path, "single_page")
    client = SourceClient(declaration, f"http://127.0.0.1:{port}", {"token": "t"}, timeout=2, **QUICK)
    with pytest.raises(ApiError, match=r"/items failed after 3 attempts; last: connection failed: .*refused"):
        fetch(client)


# Faults that end in an ApiError, never in a loop


def test_a_body_that_is_not_json_or_has_no_list_at_the_selector_is_an_error(server, tmp_path):
    client = client_for(server, declare(tmp_path, {"paginator": "single_page", "data_selector": "result.items"}))
    server.routes["/items"] = lambda seen, n: (200, {}, b"<html>down for maintenance</html>")
    with pytest.raises(ApiError, match=r"GET .*/items returned a body that is not JSON"):
        fetch(client)
    server.routes["/items"] = lambda seen, n: (200, {}, {"result": {"items": {"id": 1}}})
    with pytest.raises(ApiError, match=r"/items page 1: response has no list at result.items \(as_of=2025-03-04\)"):
        fetch(client)
    server.routes["/items"] = lambda seen, n: (200, {}, [ITEMS[0]])
    with pytest.raises(ApiError, match=r"response has no list at result.items \(as_of=2025-03-04; the body is a JSON "):
        fetch(client)


def test_a_cursor_pointing_back_fails_instead_of_looping(server, tmp_path):
    server.routes["/items"] = lambda seen, n: (200, {}, {"data": [ITEMS[n]], "next_page": 2 if n % 2 else 1})
    declaration = bearer(tmp_path, {"type": "cursor", "cursor_path": "next_page", "cursor_param": "page"})
    with pytest.raises(ApiError, match=r"/items page 3: next_page 2 was already read: the API's pagination loops"):
        fetch(client_for(server, declaration, {"token": "t"}))
    assert [r.query.get("page") for r in server.requests] == [None, "2", "1"]


def test_a_link_pointing_at_itself_fails_instead_of_looping(server, tmp_path):
    server.routes["/items"] = lambda seen, n: (200, {}, {"data": [], "next": f"{server.url}/items?as_of={DAY}"})
    declaration = bearer(tmp_path, {"type": "json_link"})
    with pytest.raises(ApiError, match=r"page 1: next http://.*/items\?as_of=2025-03-04 was already read"):
        fetch(client_for(server, declaration, {"token": "t"}))
    assert len(server.requests) == 1


def test_paging_past_max_pages_is_an_error(server, tmp_path):
    server.routes["/items"] = lambda seen, n: (200, {}, {"data": [ITEMS[0]], "next_page": n + 1})
    declaration = bearer(tmp_path, {"type": "cursor", "cursor_path": "next_page", "cursor_param": "page"}, max_pages=4)
    pages = []
    with pytest.raises(ApiError, match=r"page 4: still a next page \(next_page 5\) after 4 pages"):
        for page in client_for(server, declaration, {"token": "t"}).iter_record_texts(
            declaration.resource("items"), dt.date.fromisoformat(DAY)
        ):
            pages.append(page)
    assert len(pages) == 4 and len(server.requests) == 4


# Configuration


def test_a_missing_variable_is_named_before_any_request(server, tmp_path):
    declaration = bearer(tmp_path, "single_page")
    with pytest.raises(SourceConfigError) as missing:
        connect(declaration, {"SHOP_URL": server.url})
    named = (
        r"defs.yaml:\d+: attributes.client.auth.token: the environment variable SHOP_TOKEN is not set \(source shop\)"
    )
    assert re.fullmatch(re.escape(str(tmp_path)) + r"/shop/" + named, str(missing.value))
    with pytest.raises(SourceConfigError, match=r"defs.yaml:\d+: attributes.client.base_url: .* SHOP_URL is not set"):
        connect(declaration, {"SHOP_TOKEN": "t"})
    assert server.requests == []
    client = connect(declaration, {}, base_url=server.url, secrets={"token": "given"}, page_size=9)
    assert (client.base_url, client.secrets, client.page_size) == (server.url, {"token": "given"}, 9)
    assert "given" not in repr(client)


def test_an_offset_paginator_needs_a_page_size(tmp_path):
    declared = declare(tmp_path, {"paginator": "offset", "page_size": {"value": 10}})
    unsized = dataclasses.replace(declared, client=dataclasses.replace(declared.client, page_size=None))
    with pytest.raises(SourceConfigError, match="offset paginator .* declare client.page_size"):
        SourceClient(unsized, "http://127.0.0.1:9")
    assert SourceClient(unsized, "http://127.0.0.1:9", page_size=5).page_size == 5


def test_get_json_is_one_get_of_an_object(server, tmp_path):
    server.routes["/health"] = lambda seen, n: (200, {}, {"status": "ok"} if n == 1 else ["ok"])
    client = client_for(server, bearer(tmp_path, "single_page"), {"token": "t"})
    assert client.get_json("/health", {"deep": 1}) == {"status": "ok"}
    assert server.requests[0].query == {"deep": "1"}
    with pytest.raises(ApiError, match=r"GET .*/health returned a JSON list, not an object"):
        client.get_json("/health", {})
