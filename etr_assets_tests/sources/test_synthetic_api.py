"""The synthetic BNPL API, exercised over real HTTP on loopback."""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from etr_assets.sources.synthetic_api import (
    EPOCH,
    ApiConfig,
    customers_as_of,
    merchants_as_of,
    serve,
    transactions_for,
)

ROOT = Path(__file__).resolve().parents[2]
DAY = dt.date(2025, 1, 1)
CONFIG = ApiConfig()
TS = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")


def get(url: str, token: str | None = CONFIG.token) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, dict(error.headers), error.read()


def get_json(url: str, token: str | None = CONFIG.token) -> tuple[int, dict]:
    status, headers, body = get(url, token)
    assert headers["Content-Type"] == "application/json"
    return status, json.loads(body)


def fetch_all(base: str, path: str, page_size: int) -> tuple[list[dict], list[dict]]:
    rows, pages, page = [], [], 1
    while page is not None:
        status, body = get_json(f"{base}{path}&page={page}&page_size={page_size}")
        assert status == 200
        pages.append(body)
        rows.extend(body["data"])
        page = body["next_page"]
    return rows, pages


def ts(text: str) -> dt.datetime:
    assert TS.fullmatch(text), text
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def api():
    with serve(CONFIG) as running:
        yield running


def test_health_needs_no_token(api):
    assert get_json(f"{api.url}/health", token=None) == (200, {"status": "ok"})
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", api.url)


@pytest.mark.parametrize("page_size", [37, 100, 1000])
def test_pages_concatenate_to_the_feed(api, page_size):
    truth = transactions_for(CONFIG, DAY)
    rows, pages = fetch_all(api.url, f"/v1/transactions?date={DAY}", page_size)
    assert rows == truth
    assert all(page["total"] == len(truth) and page["page_size"] == page_size for page in pages)
    assert [page["page"] for page in pages] == list(range(1, len(pages) + 1))
    assert pages[-1]["next_page"] is None and all(page["next_page"] for page in pages[:-1])
    assert len(pages) == -(-len(truth) // page_size)
    status, past = get_json(f"{api.url}/v1/transactions?date={DAY}&page={len(pages) + 1}&page_size={page_size}")
    assert status == 200 and past["data"] == [] and past["next_page"] is None and past["total"] == len(truth)


def test_customers_and_merchants_page_like_transactions(api):
    rows, _ = fetch_all(api.url, f"/v1/customers?as_of={DAY}", 250)
    assert rows == customers_as_of(CONFIG, DAY)
    rows, _ = fetch_all(api.url, f"/v1/merchants?as_of={DAY}", 7)
    assert rows == merchants_as_of(CONFIG, DAY)
    status, body = get_json(f"{api.url}/v1/customers?as_of={DAY}")  # default page
    assert status == 200 and body["page"] == 1 and body["page_size"] == 100 and body["next_page"] == 2


def test_two_instances_serve_identical_bytes_and_another_seed_differs(api):
    paths = [f"/v1/transactions?date={DAY}&page=2&page_size=50", f"/v1/customers?as_of={DAY}&page_size=1000",
             f"/v1/merchants?as_of={DAY}"]
    with serve(CONFIG) as other, serve(ApiConfig(seed=8)) as reseeded:
        for path in paths:
            first, second = get(api.url + path)[2], get(other.url + path)[2]
            assert first == second
            assert get(reseeded.url + path)[2] != first


def _digest() -> str:
    # Ask for a late day first so cached history cannot hide an order dependence.
    late = EPOCH + dt.timedelta(days=400)
    parts = [customers_as_of(CONFIG, late), transactions_for(CONFIG, DAY), customers_as_of(CONFIG, DAY),
             merchants_as_of(CONFIG, late)]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def test_data_is_identical_in_another_process_with_another_hash_seed():
    code = "from etr_assets_tests.sources.test_synthetic_api import _digest; print(_digest())"
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=30, check=True)
    assert out.stdout.strip() == _digest()


@pytest.mark.parametrize("day", [EPOCH, DAY, dt.date(2025, 6, 30)])
def test_feed_has_exact_distinct_ids_and_stale_pending_duplicates(day):
    feed = transactions_for(CONFIG, day)
    ids = [row["transaction_id"] for row in feed]
    assert len(set(ids)) == CONFIG.transactions_per_day
    assert set(ids) == {int(f"{day:%Y%m%d}{seq:06d}") for seq in range(1, CONFIG.transactions_per_day + 1)}
    duplicated = [tid for tid, count in Counter(ids).items() if count > 1]
    assert 1 <= len(duplicated) <= 0.06 * CONFIG.transactions_per_day
    assert all(Counter(ids)[tid] == 2 for tid in duplicated)
    stale_after_final = 0
    for tid in duplicated:
        first, second = [(pos, row) for pos, row in enumerate(feed) if row["transaction_id"] == tid]
        (stale_pos, stale), (final_pos, final) = sorted([first, second], key=lambda item: item[1]["updated_at"])
        assert ts(stale["updated_at"]) < ts(final["updated_at"])
        assert stale["status"] == "PENDING" and stale["updated_at"] == stale["created_at"]
        assert final["status"] != "PENDING"
        assert {k: v for k, v in stale.items() if k not in ("status", "updated_at")} == \
            {k: v for k, v in final.items() if k not in ("status", "updated_at")}
        stale_after_final += stale_pos > final_pos
    assert 0 < stale_after_final < len(duplicated) or len(duplicated) == 1


def test_transaction_fields_have_the_contract_types():
    feed = transactions_for(CONFIG, DAY)
    customer_ids = {row["customer_id"] for row in customers_as_of(CONFIG, DAY)}
    merchant_ids = {row["merchant_id"] for row in merchants_as_of(CONFIG, DAY)}
    for row in feed:
        assert list(row) == ["transaction_id", "customer_id", "merchant_id", "amount", "currency", "instalments",
                             "payment_method", "status", "transaction_date", "created_at", "updated_at"]
        assert type(row["transaction_id"]) is int and row["customer_id"] in customer_ids
        assert row["merchant_id"] in merchant_ids
        amount = decimal.Decimal(row["amount"])
        assert amount.as_tuple().exponent == -2 and decimal.Decimal("5.00") <= amount <= decimal.Decimal("2500.00")
        assert row["currency"] in {"MYR", "SGD", "USD"} and row["instalments"] in {3, 4, 6, 12}
        assert row["payment_method"] in {"CARD", "FPX", "EWALLET", "DIRECT_DEBIT"}
        assert row["status"] in {"PENDING", "APPROVED", "PROCESSED", "DECLINED", "REFUNDED"}
        assert dt.date.fromisoformat(row["transaction_date"]) == DAY
        created, updated = ts(row["created_at"]), ts(row["updated_at"])
        assert created.date() == DAY and created <= updated <= created + dt.timedelta(days=2)
    amounts = sorted(decimal.Decimal(row["amount"]) for row in feed)
    assert amounts[len(amounts) // 2] < 250  # skewed to small baskets
    assert Counter(row["currency"] for row in feed).most_common(1)[0][0] == "MYR"


def test_customer_and_merchant_fields():
    for row in customers_as_of(CONFIG, DAY):
        assert type(row["customer_id"]) is int and row["country"] in {"MY", "SG"}
        assert row["email"] is None or "@" in row["email"]
        assert row["phone"] is None or row["phone"].startswith("+")
        dt.date.fromisoformat(row["date_of_birth"])
        assert decimal.Decimal(row["credit_limit"]).as_tuple().exponent == -2
        assert row["risk_segment"] in {"LOW", "MEDIUM", "HIGH"} and ts(row["created_at"]) <= ts(row["updated_at"])
    for row in merchants_as_of(CONFIG, DAY):
        assert re.fullmatch(r"\d{4}", row["mcc"]) and row["status"] in {"ACTIVE", "SUSPENDED"}
        assert row["name"] and row["category"] and ts(row["created_at"]) <= ts(row["updated_at"])


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_requests_without_the_right_token_are_refused(api, token):
    for path in (f"/v1/transactions?date={DAY}", f"/v1/customers?as_of={DAY}", "/nowhere"):
        status, headers, body = get(api.url + path, token=token)
        assert status == 401 and headers["WWW-Authenticate"] == "Bearer" and json.loads(body)["error"]


@pytest.mark.parametrize(
    ("query", "name", "value"),
    [
        ("/v1/transactions", "date", ""),
        ("/v1/transactions?date=2025-13-01", "date", "2025-13-01"),
        ("/v1/transactions?date=20250101", "date", "20250101"),
        ("/v1/transactions?date=2023-12-31", "date", "2023-12-31"),
        ("/v1/customers?as_of=yesterday", "as_of", "yesterday"),
        ("/v1/merchants", "as_of", ""),
        ("/v1/transactions?date=2025-01-01&page_size=0", "page_size", "0"),
        ("/v1/transactions?date=2025-01-01&page_size=1001", "page_size", "1001"),
        ("/v1/transactions?date=2025-01-01&page_size=ten", "page_size", "ten"),
        ("/v1/transactions?date=2025-01-01&page=0", "page", "0"),
        ("/v1/transactions?date=2025-01-01&page=-1", "page", "-1"),
    ],
)
def test_bad_parameters_are_400_naming_the_parameter(api, query, name, value):
    status, body = get_json(api.url + query)
    assert status == 400
    assert name in body["error"] and value in body["error"]


def test_unknown_path_is_404_json(api):
    status, body = get_json(f"{api.url}/v1/refunds?date={DAY}")
    assert status == 404 and "/v1/refunds" in body["error"]


def test_customers_grow_by_signups_per_day(api):
    sizes = [len(customers_as_of(CONFIG, EPOCH + dt.timedelta(days=n))) for n in range(5)]
    assert sizes == [CONFIG.base_customers + n * CONFIG.signups_per_day for n in range(5)]
    totals = [get_json(f"{api.url}/v1/customers?as_of={day}&page_size=1")[1]["total"]
              for day in (DAY, DAY + dt.timedelta(days=1))]
    assert totals[1] - totals[0] == CONFIG.signups_per_day
    new = customers_as_of(CONFIG, DAY)[-CONFIG.signups_per_day:]
    assert all(ts(row["created_at"]).date() == DAY for row in new)


def test_customers_change_a_little_each_day_with_nulls_coming_and_going():
    transitions = Counter()
    changed_days = 0
    previous = customers_as_of(CONFIG, EPOCH)
    for n in range(1, 121):
        day = EPOCH + dt.timedelta(days=n)
        current = customers_as_of(CONFIG, day)
        assert [row["customer_id"] for row in current] == list(range(100001, 100001 + len(current)))
        changed = [(old, new) for old, new in zip(previous, current) if old != new]
        assert len(changed) < 0.05 * len(previous)
        changed_days += bool(changed)
        for old, new in changed:
            assert old["customer_id"] == new["customer_id"] and old["created_at"] == new["created_at"]
            assert ts(new["updated_at"]).date() == day
            for field in ("email", "phone"):
                if old[field] is not None and new[field] is None:
                    transitions["to_null"] += 1
                if old[field] is None and new[field] is not None:
                    transitions["from_null"] += 1
        previous = current
    assert changed_days > 60
    assert transitions["to_null"] >= 1 and transitions["from_null"] >= 1


def test_merchants_are_stable_and_change_rarely():
    lists = [merchants_as_of(CONFIG, EPOCH + dt.timedelta(days=n)) for n in range(0, 365, 5)]
    assert {len(merchants) for merchants in lists} == {CONFIG.merchants}
    assert [row["merchant_id"] for row in lists[-1]] == list(range(500001, 500001 + CONFIG.merchants))
    flips = sum(a["status"] != b["status"] for x, y in zip(lists, lists[1:]) for a, b in zip(x, y))
    assert flips < 0.01 * CONFIG.merchants * 365


def test_generators_are_fast():
    import time

    late = EPOCH + dt.timedelta(days=730)
    started = time.perf_counter()
    customers_as_of(ApiConfig(seed=99), late)  # cold: fresh config, nothing cached
    assert time.perf_counter() - started < 0.5
    started = time.perf_counter()
    transactions_for(CONFIG, late)
    assert time.perf_counter() - started < 0.05


def test_generators_reject_days_before_epoch():
    with pytest.raises(ValueError):
        transactions_for(CONFIG, EPOCH - dt.timedelta(days=1))
    with pytest.raises(ValueError):
        customers_as_of(CONFIG, EPOCH - dt.timedelta(days=1))


def test_stop_is_idempotent_and_closes_the_port():
    running = serve(ApiConfig(seed=3))
    assert get_json(f"{running.url}/health")[0] == 200
    running.stop()
    running.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{running.url}/health", timeout=2)


def test_main_serves_until_sigint():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    process = subprocess.Popen(
        [sys.executable, "-m", "etr_assets.sources.synthetic_api", "--port", "0", "--seed", "11", "--token", "t0k"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = process.stdout.readline()
        match = re.fullmatch(r"Synthetic BNPL API on (http://127\.0\.0\.1:(\d+)) \(token: t0k\)\. Ctrl-C stops it\.\n",
                             line)
        assert match and int(match.group(2)) > 0, line
        assert get_json(f"{match.group(1)}/health", token=None) == (200, {"status": "ok"})
        status, body = get_json(f"{match.group(1)}/v1/transactions?date={DAY}&page_size=1", token="t0k")
        assert status == 200 and body["data"] == transactions_for(ApiConfig(seed=11), DAY)[:1]
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=10) == 0
        assert process.stderr.read() == ""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
        process.stderr.close()
