"""The synthetic stores API (the second, declared source), over real HTTP on loopback, and its YAML declaration."""

from __future__ import annotations

import base64
import datetime as dt
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from etr_assets.sources.declaration import ResourceKind, load_declaration
from etr_assets.sources.synthetic_data import EPOCH, LAST_DAY
from etr_assets.sources.synthetic_stores import (
    FORMATS,
    MALFORMED_KINDS,
    StoresConfig,
    StoresFaults,
    checkins_for,
    encode_cursor,
    serve,
    served,
    stores_as_of,
)

ROOT = Path(__file__).resolve().parents[2]
DECLARATION = ROOT / "etr_assets_tests/sources/declared/stores/defs.yaml"
CONFIG = StoresConfig()
DAY = dt.date(2025, 3, 14)
KEY = CONFIG.api_key


def get(url: str, key: str | None = KEY) -> tuple[int, dict]:
    request = urllib.request.Request(url, headers={"X-API-Key": key} if key is not None else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.headers["Content-Type"] == "application/json"
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            assert error.headers["Content-Type"] == "application/json"
            return error.code, json.loads(error.read())


def fetch_all(base: str, query: str, limit: int | None) -> tuple[list, list]:
    """Every item of a list, following next_cursor; and the pages."""
    items, pages, cursor = [], [], None
    while len(pages) < 1000:  # a cursor that never advances fails here rather than hangs
        params = (f"&limit={limit}" if limit else "") + (f"&cursor={urllib.parse.quote(cursor)}" if cursor else "")
        status, body = get(f"{base}{query}{params}")
        assert status == 200, body
        pages.append(body["result"])
        items += body["result"]["items"]
        if (cursor := body["result"]["next_cursor"]) is None:
            return items, pages
    raise AssertionError("the cursor never ended")


@pytest.fixture(scope="module")
def stores_api():
    with serve(CONFIG) as running:
        yield running


def days(first: dt.date, count: int) -> list[dt.date]:
    return [first + dt.timedelta(days=n) for n in range(count)]


# The model.


def test_the_model_is_deterministic_and_seeded():
    assert stores_as_of(CONFIG, DAY) == stores_as_of(StoresConfig(), DAY)
    assert checkins_for(CONFIG, DAY) == checkins_for(StoresConfig(), DAY)
    assert stores_as_of(StoresConfig(seed=12), DAY) != stores_as_of(CONFIG, DAY)
    assert checkins_for(StoresConfig(seed=12), DAY) != checkins_for(CONFIG, DAY)
    # Another process, another hash seed, the far day asked first: the same records.
    script = (
        "import datetime as d, json; from etr_assets.sources.synthetic_stores import *; c = StoresConfig();"
        "checkins_for(c, d.date(2033, 1, 1));"
        "print(json.dumps([stores_as_of(c, d.date(2025, 3, 14)), checkins_for(c, d.date(2025, 3, 14))]))"
    )
    env = {"PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, check=True, text=True)
    assert json.loads(out.stdout) == [stores_as_of(CONFIG, DAY), checkins_for(CONFIG, DAY)]


def test_stores_are_nested_records_without_an_update_time():
    for day in (EPOCH, DAY, LAST_DAY):
        stores = stores_as_of(CONFIG, day)
        assert 40 <= len(stores) <= 80
        assert [s["store_id"] for s in stores] == sorted({s["store_id"] for s in stores})
        for store in stores:
            assert set(store) == {"store_id", "name", "address", "format", "opened_on"}
            assert type(store["store_id"]) is int and store["name"] and store["format"] in FORMATS
            assert set(store["address"]) == {"city", "country"} and store["address"]["country"] in ("MY", "SG", "TH")
            assert dt.date.fromisoformat(store["opened_on"]) <= day


def test_the_store_count_stays_between_40_and_80_for_ten_years():
    counts = [len(stores_as_of(CONFIG, day)) for day in days(EPOCH, 3653)[::30]]
    assert 40 <= min(counts) and max(counts) <= 80


def test_stores_change_open_close_and_flip_back_over_days():
    changed, opened, closed, history = Counter(), set(), set(), {}
    before = {s["store_id"]: s for s in stores_as_of(CONFIG, DAY)}
    for day in days(DAY + dt.timedelta(days=1), 90):
        now = {s["store_id"]: s for s in stores_as_of(CONFIG, day)}
        opened |= now.keys() - before.keys()
        closed |= before.keys() - now.keys()
        for store_id in now.keys() & before.keys():
            old, new = before[store_id], now[store_id]
            assert old["opened_on"] == new["opened_on"]
            for field in ("name", "format"):
                changed[field] += old[field] != new[field]
            changed["city"] += old["address"] != new["address"]
        for store_id, store in now.items():
            states = history.setdefault(store_id, [])
            if not states or states[-1] != store:
                states.append(store)
        before = now
    assert min(changed.values()) >= 3, changed  # names, cities and formats all change
    assert len(opened) >= 5 and len(closed) >= 3
    flips = [a == c for states in history.values() for a, _, c in zip(states, states[1:], states[2:])]
    assert sum(flips) >= 10  # A -> B -> A: a store's values flip back (by chance alone, far fewer do)
    for store_id in opened:  # a new store opened on the day it first appears
        first = next(d for d in days(DAY, 92) if store_id in {s["store_id"] for s in stores_as_of(CONFIG, d)})
        assert history[store_id][0]["opened_on"] == first.isoformat()


def test_checkins_are_on_their_day_with_unique_ids_and_bnpl_customers():
    seen, emails = set(), {}
    for day in days(DAY, 5) + [EPOCH, LAST_DAY]:
        checkins, stores = checkins_for(CONFIG, day), {s["store_id"] for s in stores_as_of(CONFIG, day)}
        assert 100 <= len(checkins) <= 300
        bnpl_customers = CONFIG.customers.base_customers + CONFIG.customers.signups_per_day * (day - EPOCH).days
        for c in checkins:
            assert c["day"] == day.isoformat() and c["checked_in_at"].startswith(f"{day.isoformat()}T")
            assert dt.datetime.strptime(c["checked_in_at"], "%Y-%m-%dT%H:%M:%SZ").date() == day
            assert c["store_id"] in stores and 100001 <= c["customer_id"] < 100001 + bnpl_customers
            assert c["device"]["os"] in ("ios", "android", "web") and len(c["device"]["app_version"].split(".")) == 3
            assert "@" in c["email"] and emails.setdefault(c["customer_id"], c["email"]) == c["email"]
            assert c["checkin_id"] not in seen
            seen.add(c["checkin_id"])


# Over HTTP.


def test_health_needs_no_key_and_data_needs_the_right_key(stores_api):
    assert get(f"{stores_api.url}/health", key=None) == (200, {"status": "ok"})
    assert stores_api.url.startswith("http://127.0.0.1:")
    for key in (None, "", "wrong", KEY + "x"):
        status, body = get(f"{stores_api.url}/api/v2/stores?snapshot=20250314", key=key)
        assert status == 401 and "error" in body
    assert get(f"{stores_api.url}/api/v2/nothing")[0] == 404


@pytest.mark.parametrize("limit", [None, 1, 7, 50, 500])
def test_cursor_pages_cover_each_list_exactly_once(stores_api, limit):
    stores, pages = fetch_all(stores_api.url, "/api/v2/stores?snapshot=20250314", limit)
    assert stores == stores_as_of(CONFIG, DAY)
    size = limit or 50  # the default limit
    assert [len(p["items"]) for p in pages[:-1]] == [size] * (len(pages) - 1) and 0 < len(pages[-1]["items"]) <= size
    checkins, _ = fetch_all(stores_api.url, "/api/v2/checkins?day=2025-03-14", limit)
    assert checkins == checkins_for(CONFIG, DAY)


def test_the_cursor_is_opaque_and_a_bad_one_is_refused(stores_api):
    status, body = get(f"{stores_api.url}/api/v2/checkins?day=2025-03-14&limit=10")
    cursor = body["result"]["next_cursor"]
    assert status == 200 and isinstance(cursor, str) and not cursor.isdigit()
    assert (
        get(f"{stores_api.url}/api/v2/checkins?day=2025-03-14&limit=10&cursor={cursor}")[1]["result"]["items"]
        == (checkins_for(CONFIG, DAY)[10:20])
    )
    total = len(checkins_for(CONFIG, DAY))
    bad = [
        "",
        "10",
        "!!!",
        base64.b64encode(b"\xff\xfe").decode(),
        encode_cursor("checkins", DAY + dt.timedelta(days=1), 10),  # another day's
        encode_cursor("stores", DAY, 10),  # another list's
        encode_cursor("checkins", DAY, total + 1),  # past the end
        base64.urlsafe_b64encode(b"checkins|2025-03-14|-1").decode(),
    ]
    for text in bad:
        status, body = get(f"{stores_api.url}/api/v2/checkins?day=2025-03-14&cursor={urllib.parse.quote(text)}")
        assert status == 400 and "cursor" in body["error"], text


def test_an_empty_day_and_the_last_page_have_no_next_cursor():
    with serve(StoresConfig(min_checkins=0, max_checkins=0)) as running:
        assert get(f"{running.url}/api/v2/checkins?day=2025-03-14") == (
            200,
            {"result": {"items": [], "next_cursor": None}},
        )


@pytest.mark.parametrize(
    ("query", "status"),
    [
        ("/api/v2/stores?snapshot=20250314", 200),
        ("/api/v2/stores?snapshot=2025-03-14", 400),  # the stores' day has no dashes
        ("/api/v2/stores?snapshot=20251399", 400),
        ("/api/v2/stores?snapshot=20231231", 400),  # before the API's first day
        ("/api/v2/stores", 400),
        ("/api/v2/checkins?day=2025-03-14", 200),
        ("/api/v2/checkins?day=20250314", 400),  # the check-ins' day has dashes
        ("/api/v2/checkins?date=2025-03-14", 400),
        ("/api/v2/stores?snapshot=20250314&limit=0", 400),
        ("/api/v2/stores?snapshot=20250314&limit=501", 400),
        ("/api/v2/stores?snapshot=20250314&limit=abc", 400),
    ],
)
def test_day_formats_and_limits(stores_api, query, status):
    assert get(f"{stores_api.url}{query}")[0] == status


# Faults.


def test_malformed_records_are_deterministic_and_of_every_kind():
    for endpoint, model, key in (("stores", stores_as_of, "store_id"), ("checkins", checkins_for, "checkin_id")):
        truth = model(CONFIG, DAY)
        assert served(CONFIG, endpoint, DAY) == truth
        low, high = served(CONFIG, endpoint, DAY, 0.1), served(CONFIG, endpoint, DAY, 0.3)
        bad_low = {i for i, (a, b) in enumerate(zip(truth, low)) if a != b}
        bad_high = {i for i, (a, b) in enumerate(zip(truth, high)) if a != b}
        assert len(bad_low) == int(len(truth) * 0.1 + 0.5) and bad_low <= bad_high  # a higher rate: a superset
        kinds = Counter()
        for i in bad_high:
            record, good = high[i], truth[i]
            if key not in record:
                kinds["missing_key"] += 1
            elif record[key] == "abc":
                kinds["wrong_type"] += 1
            elif endpoint == "stores":
                assert isinstance(record["address"], str)
                kinds["flat_address"] += 1
            elif record["day"] != good["day"]:
                assert record["day"] == (DAY - dt.timedelta(days=1)).isoformat()
                kinds["wrong_day"] += 1
            else:
                assert record["device"]["os"] not in ("ios", "android", "web")
                kinds["unknown_os"] += 1
        assert set(kinds) == set(MALFORMED_KINDS[endpoint])


def test_malformed_records_are_served_over_http():
    with serve(CONFIG, faults=StoresFaults(malformed_rate=0.2)) as running:
        checkins, _ = fetch_all(running.url, "/api/v2/checkins?day=2025-03-14", 40)
        assert checkins == served(CONFIG, "checkins", DAY, 0.2) != checkins_for(CONFIG, DAY)
        running.set_faults(StoresFaults())
        assert fetch_all(running.url, "/api/v2/checkins?day=2025-03-14", 40)[0] == checkins_for(CONFIG, DAY)


def test_pages_after_fail_after_pages_answer_503_until_the_faults_change():
    with serve(CONFIG, faults=StoresFaults(fail_after_pages=2)) as running:
        url = f"{running.url}/api/v2/checkins?day=2025-03-14&limit=10"
        first = get(url)
        assert first[0] == 200
        cursor = first[1]["result"]["next_cursor"]
        assert get(f"{url}&cursor={cursor}")[0] == 200
        for _ in range(3):  # forever, whichever page
            status, body = get(f"{url}&cursor={cursor}")
            assert status == 503 and "error" in body
            assert get(url)[0] == 503
        assert get(f"{running.url}/health", key=None)[0] == 200
        running.set_faults(StoresFaults())
        assert get(f"{url}&cursor={cursor}")[0] == 200
    with serve(CONFIG, faults=StoresFaults(fail_after_pages=0)) as running:
        assert get(f"{running.url}/api/v2/stores?snapshot=20250314")[0] == 503


def test_page_delay_slows_each_page_and_stop_wakes_sleepers():
    with serve(CONFIG, faults=StoresFaults(page_delay_seconds=0.2)) as running:
        started = time.monotonic()
        fetch_all(running.url, "/api/v2/stores?snapshot=20250314", 25)  # 3 pages
        assert time.monotonic() - started >= 0.6
        running.set_faults(StoresFaults(page_delay_seconds=30))
        answers = []
        waiting = threading.Thread(target=lambda: answers.append(_get_or_error(running.url)), daemon=True)
        waiting.start()
        time.sleep(0.2)
        started = time.monotonic()
        running.stop()
        waiting.join(5)
        assert time.monotonic() - started < 3 and not waiting.is_alive()


def _get_or_error(url: str):
    try:
        return get(f"{url}/api/v2/stores?snapshot=20250314")
    except OSError as error:
        return error


def test_serve_stops_its_thread_and_stop_twice_is_harmless():
    before = set(threading.enumerate())
    with serve(CONFIG) as running:
        assert get(f"{running.url}/health", key=None)[0] == 200
    running.stop()
    time.sleep(0.1)
    assert not [t for t in set(threading.enumerate()) - before if t.is_alive()]
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{running.url}/health", timeout=1)


@pytest.mark.parametrize(
    "faults",
    [dict(malformed_rate=1.5), dict(malformed_rate=-0.1), dict(fail_after_pages=-1), dict(page_delay_seconds=-1)],
)
def test_bad_faults_are_refused(faults):
    with pytest.raises(ValueError):
        StoresFaults(**faults)


# The declaration.


def test_the_declaration_parses_and_matches_the_api():
    source = load_declaration(DECLARATION)
    assert source.name == "stores" and source.client.data_selector == ("result", "items")
    assert source.client.paginator.options == {"cursor_path": "result.next_cursor", "cursor_param": "cursor"}
    assert source.client.auth.fields["name"] == "X-API-Key" and source.client.auth.fields["location"] == "header"
    assert (source.client.page_size_param, source.client.page_size) == ("limit", 50)
    stores, checkins = source.resource("stores"), source.resource("checkins")
    assert stores.kind == ResourceKind.ENTITIES and stores.sequence is None and stores.key == "store_id"
    assert stores.day_value(DAY) == "20250314" and checkins.day_value(DAY) == "2025-03-14"
    assert checkins.kind == ResourceKind.EVENTS and checkins.subject == "customer_id"
    for resource, records in ((stores, stores_as_of(CONFIG, DAY)), (checkins, checkins_for(CONFIG, DAY))):
        assert resource.path.endswith(f"/{resource.name}")
        leaves = set()  # every value's path in the records
        for key, value in (item for record in records for item in record.items()):
            leaves |= {(key, sub) for sub in value} if isinstance(value, dict) else {(key,)}
        assert {column.path or (column.name,) for column in resource.columns} == leaves  # all of them, no other
