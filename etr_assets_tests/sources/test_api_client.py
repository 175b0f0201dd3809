"""The BNPL source's client (its declaration on dlt's REST client) against real HTTP servers on loopback: the synthetic
API, and a scripted flaky one. Every declared auth kind and paginator: test_http_fetch.py."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import socket
import threading
import time

import pytest

from etr_assets.errors import ApiError
from etr_assets.sources.synthetic_api import transactions_for
from etr_assets_tests.sources.clients import bnpl_client, bnpl_declaration

FAST = {"attempts": 4, "backoff": 0.01, "max_delay": 0.05}
DAY = dt.date(2025, 1, 1)


def pages(client, resource: str = "transactions", day: dt.date = DAY):
    return client.iter_record_texts(bnpl_declaration().resource(resource), day)


class ScriptedServer:
    """Answers each request with the next scripted (status, headers, body); the last one repeats."""

    def __init__(self, script):
        self.script, self.requests = list(script), []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.requests.append((self.path, self.headers.get("Authorization"), time.monotonic()))
                status, headers, body = outer.script[min(len(outer.requests), len(outer.script)) - 1]
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body if isinstance(body, bytes) else json.dumps(body).encode())

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


PAGE = (200, {}, {"data": [{"id": 1}], "next_page": None})


def test_pages_are_followed_until_the_last(api):
    day = dt.date(2025, 2, 1)
    received = [[json.loads(r) for r in p] for p in pages(bnpl_client(api.url, api.config.token, page_size=7), day=day)]
    assert len(received) > 1 and all(len(p) <= 7 for p in received)
    assert [r for p in received for r in p] == transactions_for(api.config, day)


def test_5xx_is_retried_then_succeeds_and_the_token_is_sent():
    with ScriptedServer([(503, {}, {"error": "busy"}), (502, {}, {}), PAGE]) as server:
        doc = bnpl_client(server.url, "s3cret", **FAST).get_json("/v1/x", {"a": 1})
    assert doc["data"] == [{"id": 1}]
    assert len(server.requests) == 3
    assert all(auth == "Bearer s3cret" and path == "/v1/x?a=1" for path, auth, _ in server.requests)


# A 429's Retry-After honoured (dlt's session reads whole seconds and HTTP dates): test_http_fetch.py.


def test_retry_after_is_capped_by_the_policy():
    with ScriptedServer([(429, {"Retry-After": "3600"}, {}), PAGE]) as server:
        bnpl_client(server.url, "t", **FAST).get_json("/v1/x", {})
    (_, _, first), (_, _, second) = server.requests
    assert second - first < 1


def test_last_retry_failure_names_endpoint_status_and_attempts():
    with ScriptedServer([(500, {}, {"error": "database down"})]) as server:
        with pytest.raises(ApiError) as failure:
            list(pages(bnpl_client(server.url, "t", **FAST)))
    message = str(failure.value)
    assert f"GET {server.url}/v1/transactions failed after 4 attempts" in message
    assert "500: database down" in message and failure.value.status == 500
    assert len(server.requests) == 4


def test_client_errors_are_not_retried(api):
    with pytest.raises(ApiError, match="answered 401") as failure:
        list(pages(bnpl_client(api.url, "wrong-token", **FAST)))
    assert failure.value.status == 401


def test_connection_refused_is_retried_then_reported():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ApiError, match="failed after 4 attempts; last: connection failed"):
        bnpl_client(f"http://127.0.0.1:{port}", "t", timeout=2, **FAST).get_json("/v1/x", {})


def test_a_page_without_data_is_an_error():
    with ScriptedServer([(200, {}, {"items": []})]) as server:
        with pytest.raises(ApiError, match=r"/v1/transactions page 1: response has no list at data \(date=2025-01-01"):
            list(pages(bnpl_client(server.url, "t", **FAST)))


@pytest.mark.parametrize("junk", ["soon", "1e999", "nan", "Mon, 99 Foo 2025 99:99:99 GMT"])
def test_a_retry_after_that_is_no_number_or_date_falls_back_to_the_backoff(junk):
    with ScriptedServer([(429, {"Retry-After": junk}, {"error": "slow down"}), PAGE]) as server:
        document = bnpl_client(server.url, "t", **FAST).get_json("/v1/x", {})
    assert document["data"] == [{"id": 1}] and len(server.requests) == 2
    (_, _, first), (_, _, second) = server.requests
    assert second - first < 1  # the policy's 0.05 s cap, not a wait the header never gave


def test_a_body_that_is_not_a_json_object_is_an_error_naming_the_endpoint_and_page():
    with ScriptedServer([(200, {}, [{"transaction_id": 1}])]) as server:
        with pytest.raises(ApiError) as failure:
            list(pages(bnpl_client(server.url, "t", **FAST)))
    message = str(failure.value)
    assert f"GET {server.url}/v1/transactions page 1" in message and "date=2025-01-01" in message
    assert "the body is a JSON list" in message
    assert failure.value.endpoint == f"GET {server.url}/v1/transactions"


def test_a_next_page_pointing_back_fails_instead_of_looping():
    looping = (200, {}, {"data": [{"id": 1}], "next_page": 2})
    back = (200, {}, {"data": [{"id": 2}], "next_page": 1})
    with ScriptedServer([looping, back]) as server:
        with pytest.raises(ApiError, match=r"page 3: next_page 1 was already read: the API's pagination loops"):
            list(pages(bnpl_client(server.url, "t", **FAST)))
    # The first page is asked for without a cursor: page=1 is read once, as the third page, before the loop shows.
    assert [path.partition("page=")[2] for path, _, _ in server.requests] == ["", "2", "1"]


def test_pagination_that_never_ends_stops_at_the_page_limit():
    script = [(200, {}, {"data": [{"id": n}], "next_page": n + 1}) for n in range(1, 10)]
    with ScriptedServer(script) as server:
        received = []
        with pytest.raises(ApiError, match=r"page 5: still a next page \(next_page 6\) after 5 pages"):
            for page in pages(bnpl_client(server.url, "t", max_pages=5, **FAST)):
                received.append(page)
    assert len(received) == 5 and len(server.requests) == 5


def test_the_raw_zone_keeps_each_record_as_the_api_sent_it(tmp_path):
    """Duplicate keys, escapes, number spellings and a lone surrogate are kept as sent; only the line breaks of a
    pretty-printed body become spaces (JSON Lines needs one record per line)."""
    from etr_assets.sources.fetch import fetch_day
    from etr_assets.sources.raw_zone import local_raw_zone

    records = [
        '{"customer_id":100001,"customer_id":100002,"name":"A"}',
        '{"customer\\u005fid": 100003, "amount": 1.50, "note": "caf\\u00e9 \\ud800"}',
        '{"customer_id":100004,\n  "tags":["x",{"nested":[1,2]}]}',
        '"#corrupted#"',
    ]
    body = ('{"next_page": null, "data": [\n  ' + ",\n  ".join(records) + '\n], "meta": {"data": [0]}}').encode()
    assert json.loads(body)["data"][0] == {"customer_id": 100002, "name": "A"}  # a reader keeps the last key only
    raw = local_raw_zone(tmp_path)
    with ScriptedServer([(200, {}, body)]) as server:
        batch, manifest = fetch_day(bnpl_client(server.url, "t", **FAST), raw, "customers", DAY)

    stored = raw.storage.read_bytes(f"{batch.key}/{manifest.files[0]}").decode()
    assert stored.splitlines() == [*records[:2], records[2].replace("\n", " "), records[3]]
    assert manifest.records == 4
