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
def bnpl_api():
    with serve(CONFIG) as running:
        yield running


def test_health_needs_no_token(bnpl_api):
    assert get_json(f"{bnpl_api.url}/health", token=None) == (200, {"status": "ok"})
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", bnpl_api.url)


@pytest.mark.parametrize("page_size", [37, 100, 1000])
def test_pages_concatenate_to_the_feed(bnpl_api, page_size):
    truth = transactions_for(CONFIG, DAY)
    rows, pages = fetch_all(bnpl_api.url, f"/v1/transactions?date={DAY}", page_size)
    assert rows == truth
    assert all(page["total"] == len(truth) and page["page_size"] == page_size for page in pages)
    assert [page["page"] for page in pages] == list(range(1, len(pages) + 1))
    assert pages[-1]["next_page"] is None and all(page["next_page"] for page in pages[:-1])
    assert len(pages) == -(-len(truth) // page_size)
    status, past = get_json(f"{bnpl_api.url}/v1/transactions?date={DAY}&page={len(pages) + 1}&page_size={page_size}")
    assert status == 200 and past["data"] == [] and past["next_page"] is None and past["total"] == len(truth)


def test_customers_and_merchants_page_like_transactions(bnpl_api):
    rows, _ = fetch_all(bnpl_api.url, f"/v1/customers?as_of={DAY}", 250)
    assert rows == customers_as_of(CONFIG, DAY)
    rows, _ = fetch_all(bnpl_api.url, f"/v1/merchants?as_of={DAY}", 7)
    assert rows == merchants_as_of(CONFIG, DAY)
    status, body = get_json(f"{bnpl_api.url}/v1/customers?as_of={DAY}")  # default page
    assert status == 200 and body["page"] == 1 and body["page_size"] == 100 and body["next_page"] == 2


def test_two_instances_serve_identical_bytes_and_another_seed_differs(bnpl_api):
    paths = [
        f"/v1/transactions?date={DAY}&page=2&page_size=50",
        f"/v1/customers?as_of={DAY}&page_size=1000",
        f"/v1/merchants?as_of={DAY}",
    ]
    with serve(CONFIG) as other, serve(ApiConfig(seed=8)) as reseeded:
        for path in paths:
            first, second = get(bnpl_api.url + path)[2], get(other.url + path)[2]
            assert first == second
            assert get(reseeded.url + path)[2] != first


def _digest() -> str:
    # Ask for a late day first so cached history cannot hide an order dependence.
    late = EPOCH + dt.timedelta(days=400)
    parts = [
        customers_as_of(CONFIG, late),
        transactions_for(CONFIG, DAY),
        customers_as_of(CONFIG, DAY),
        merchants_as_of(CONFIG, late),
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def test_data_is_identical_in_another_process_with_another_hash_seed():
    code = "from etr_assets_tests.sources.test_synthetic_api import _digest; print(_digest())"
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30, check=True
    )
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
        assert {k: v for k, v in stale.items() if k not in ("status", "updated_at")} == {
            k: v for k, v in final.items() if k not in ("status", "updated_at")
        }
        stale_after_final += stale_pos > final_pos
    assert 0 < stale_after_final < len(duplicated) or len(duplicated) == 1


def test_transaction_fields_have_the_contract_types():
    feed = transactions_for(CONFIG, DAY)
    customer_ids = {row["customer_id"] for row in customers_as_of(CONFIG, DAY)}
    merchant_ids = {row["merchant_id"] for row in merchants_as_of(CONFIG, DAY)}
    for row in feed:
        assert list(row) == [
            "transaction_id",
            "customer_id",
            "merchant_id",
            "amount",
            "currency",
            "instalments",
            "payment_method",
            "status",
            "transaction_date",
            "created_at",
            "updated_at",
        ]
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
def test_requests_without_the_right_token_are_refused(bnpl_api, token):
    for path in (f"/v1/transactions?date={DAY}", f"/v1/customers?as_of={DAY}", "/nowhere"):
        status, headers, body = get(bnpl_api.url + path, token=token)
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
def test_bad_parameters_are_400_naming_the_parameter(bnpl_api, query, name, value):
    status, body = get_json(bnpl_api.url + query)
    assert status == 400
    assert name in body["error"] and value in body["error"]


def test_unknown_path_is_404_json(bnpl_api):
    status, body = get_json(f"{bnpl_api.url}/v1/refunds?date={DAY}")
    assert status == 404 and "/v1/refunds" in body["error"]


def test_customers_grow_by_signups_per_day(bnpl_api):
    sizes = [len(customers_as_of(CONFIG, EPOCH + dt.timedelta(days=n))) for n in range(5)]
    assert sizes == [CONFIG.base_customers + n * CONFIG.signups_per_day for n in range(5)]
    totals = [
        get_json(f"{bnpl_api.url}/v1/customers?as_of={day}&page_size=1")[1]["total"]
        for day in (DAY, DAY + dt.timedelta(days=1))
    ]
    assert totals[1] - totals[0] == CONFIG.signups_per_day
    new = customers_as_of(CONFIG, DAY)[-CONFIG.signups_per_day :]
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


def test_the_server_module_never_imports_its_command_line():
    # The CLI imports the server; the reverse would make a circle (even a deferred import counts).
    import ast

    tree = ast.parse((ROOT / "etr_assets/sources/synthetic_api.py").read_text())
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in modules if m and "synthetic_cli" in m}


def test_main_serves_until_sigint():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    process = subprocess.Popen(
        [sys.executable, "-m", "etr_assets.sources.synthetic_cli", "--port", "0", "--seed", "11", "--token", "t0k"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        match = re.fullmatch(
            r"Synthetic BNPL API on (http://127\.0\.0\.1:(\d+)) \(token: t0k\)\. Ctrl-C stops it\.\n", line
        )
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


# --- fault switches (ApiFaults): failures, delays, malformed records, drift, cut-off pages, admin ----------

import concurrent.futures  # noqa: E402 - this section's own imports
import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import http.client  # noqa: E402
import time  # noqa: E402

from etr_assets.errors import ApiError  # noqa: E402
from etr_assets.sources.synthetic_api import ApiFaults  # noqa: E402
from etr_assets.sources.synthetic_cli import main  # noqa: E402
from etr_assets.sources.synthetic_faults import MALFORMED_KINDS  # noqa: E402
from etr_assets_tests.sources.clients import bnpl_client  # noqa: E402
from etr_assets_tests.sources.malformed import (  # noqa: E402
    customers_served,
    malformed_kind,
    merchants_served,
    transactions_served,
)

TX = f"/v1/transactions?date={DAY}"


@contextlib.contextmanager
def faulty(**fields):
    with serve(CONFIG, faults=ApiFaults(**fields)) as running:
        yield running


def post(url: str, body: bytes | str, token: str | None = CONFIG.token) -> tuple[int, dict]:
    data = body.encode() if isinstance(body, str) else body
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read())


def expected_kinds(entity: str, corrupted: int) -> Counter:
    kinds = MALFORMED_KINDS[entity]
    return Counter({kind: len(range(i, corrupted, len(kinds))) for i, kind in enumerate(kinds) if i < corrupted})


def test_faults_are_off_by_default_and_validated():
    assert serve.__defaults__[-1] == ApiFaults()
    off = ApiFaults()
    assert (
        off.fail_requests,
        off.fail_status,
        off.retry_after_seconds,
        off.fail_path_prefix,
        off.delay_seconds,
        off.malformed_rate,
        off.drift,
        off.truncate_after_pages,
    ) == (0, 503, 0.05, "", 0.0, 0.0, False, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        off.fail_requests = 3
    for field, value in [
        ("fail_requests", -1),
        ("fail_requests", True),
        ("fail_status", 200),
        ("fail_status", 600),
        ("retry_after_seconds", -1.0),
        ("delay_seconds", float("nan")),
        ("malformed_rate", 1.5),
        ("drift", 1),
        ("truncate_after_pages", 2.0),
        ("fail_path_prefix", "v1"),
    ]:
        with pytest.raises(ValueError, match=field):
            ApiFaults(**{field: value})
    assert ApiFaults(delay_seconds=1).delay_seconds == 1.0 and type(ApiFaults(delay_seconds=1).delay_seconds) is float


def test_fail_requests_fails_the_next_n_data_requests_then_recovers():
    with faulty(fail_requests=2) as bnpl_api:
        for left in (1, 0):
            status, headers, body = get(bnpl_api.url + TX)
            assert status == 503 and "Retry-After" not in headers and headers["Content-Type"] == "application/json"
            assert "503" in json.loads(body)["error"]
            assert get_json(f"{bnpl_api.url}/health", token=None) == (
                200,
                {"status": "ok"},
            )  # never failed, never counted
            assert get_json(f"{bnpl_api.url}/admin/faults")[1]["fail_requests"] == left
            assert bnpl_api.faults.fail_requests == left
        status, body = get_json(bnpl_api.url + TX + "&page_size=5")
        assert status == 200 and body["data"] == transactions_for(CONFIG, DAY)[:5]
        assert get(bnpl_api.url + TX, token="wrong")[0] == 401  # auth is checked before faults
        bnpl_api.set_faults(ApiFaults(fail_requests=1, fail_status=500))
        assert get(f"{bnpl_api.url}/v1/merchants?as_of={DAY}")[0] == 500 and get(bnpl_api.url + TX)[0] == 200


def test_fail_requests_counts_down_exactly_under_concurrency():
    with faulty(fail_requests=7) as bnpl_api:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(lambda _: get(bnpl_api.url + TX + "&page_size=1")[0], range(20)))
        assert Counter(statuses) == {503: 7, 200: 13} and bnpl_api.faults.fail_requests == 0


def test_fail_path_prefix_scopes_the_failures():
    with faulty(fail_requests=1, fail_path_prefix="/v1/customers") as bnpl_api:
        assert get(bnpl_api.url + TX)[0] == 200 and get(f"{bnpl_api.url}/v1/merchants?as_of={DAY}")[0] == 200
        assert bnpl_api.faults.fail_requests == 1  # other paths do not use up the count
        assert get(f"{bnpl_api.url}/v1/customers?as_of={DAY}")[0] == 503
        assert get(f"{bnpl_api.url}/v1/customers?as_of={DAY}")[0] == 200


@pytest.mark.parametrize(("seconds", "text"), [(0.05, "0.05"), (2, "2"), (0.25, "0.25"), (0, "0")])
def test_429_carries_retry_after_as_a_number(seconds, text):
    with faulty(fail_requests=1, fail_status=429, retry_after_seconds=seconds) as bnpl_api:
        status, headers, body = get(bnpl_api.url + TX)
        assert status == 429 and headers["Retry-After"] == text and json.loads(body)["error"]


def test_delay_makes_a_short_timeout_request_time_out():
    with faulty(delay_seconds=1.0) as bnpl_api:  # long against both bounds below, so a slow host cannot blur them
        request = urllib.request.Request(bnpl_api.url + TX, headers={"Authorization": f"Bearer {CONFIG.token}"})
        with pytest.raises((TimeoutError, urllib.error.URLError)) as caught:
            urllib.request.urlopen(request, timeout=0.05)
        assert isinstance(caught.value, TimeoutError) or isinstance(caught.value.reason, TimeoutError)
        started = time.perf_counter()
        assert get_json(f"{bnpl_api.url}/health", token=None)[0] == 200  # health is never delayed
        assert time.perf_counter() - started < 0.9  # not the 1 s delay
        bnpl_api.set_faults(ApiFaults(delay_seconds=0.1))
        started = time.perf_counter()
        assert get(bnpl_api.url + TX)[0] == 200 and time.perf_counter() - started >= 0.1


def test_malformed_rate_corrupts_the_expected_records_deterministically():
    faults = ApiFaults(malformed_rate=0.1)
    truth, served = transactions_for(CONFIG, DAY), transactions_served(CONFIG, faults, DAY)
    assert len(served) == len(truth)
    bad = [i for i, record in enumerate(served) if malformed_kind(record)]
    assert len(bad) == int(len(truth) * 0.1 + 0.5)
    assert Counter(malformed_kind(served[i]) for i in bad) == expected_kinds("transaction", len(bad))
    assert all(served[i] == truth[i] for i in range(len(truth)) if i not in bad)  # good records untouched
    assert all(malformed_kind(record) is None for record in truth)
    variants = {kind: set() for kind in MALFORMED_KINDS["transaction"]}
    for i in bad:
        record, original = served[i], truth[i]
        kind = malformed_kind(record)
        if kind == "not_an_object":
            assert record == "#corrupted#"
            continue
        changed = [key for key in original if original[key] != record.get(key, "<missing>")]
        assert len(changed) == 1 and list(record) == [key for key in original if key in record]
        variants[kind].add((changed[0], record.get(changed[0], "<missing>")))
    assert variants["wrong_type"] == {("customer_id", "not-a-number"), ("amount", "abc")}
    assert variants["missing_key"] == {("transaction_id", "<missing>"), ("customer_id", "<missing>")}
    assert {key for key, _ in variants["out_of_range"]} == {"amount", "instalments", "transaction_date"}
    for key, value in variants["out_of_range"]:
        assert {
            "amount": str(value).startswith("-"),
            "instalments": value == 99,
            "transaction_date": value == str(DAY - dt.timedelta(days=1)),
        }[key]
    # Deterministic: same as a fresh computation, a subset at a lower rate, elsewhere under another seed.
    assert transactions_served(CONFIG, faults, DAY) == served
    fewer = transactions_served(CONFIG, ApiFaults(malformed_rate=0.05), DAY)
    assert {i for i, record in enumerate(fewer) if malformed_kind(record)} < set(bad)
    other = transactions_served(ApiConfig(seed=8), faults, DAY)
    assert {i for i, record in enumerate(other) if malformed_kind(record)} != set(bad)
    everything = transactions_served(CONFIG, ApiFaults(malformed_rate=1.0), DAY)
    assert all(malformed_kind(record) for record in everything)


def test_malformed_customers_and_merchants_use_wrong_type_and_missing_key_only():
    faults = ApiFaults(malformed_rate=0.2)
    for served, truth, entity in [
        (customers_served(CONFIG, faults, DAY), customers_as_of(CONFIG, DAY), "customer"),
        (merchants_served(CONFIG, faults, DAY), merchants_as_of(CONFIG, DAY), "merchant"),
    ]:
        kinds = Counter(malformed_kind(record) for record in served)
        corrupted = int(len(truth) * 0.2 + 0.5)
        assert kinds.pop(None) == len(truth) - corrupted
        assert kinds == expected_kinds(entity, corrupted) and set(kinds) == {"wrong_type", "missing_key"}
        assert all(malformed_kind(record) is None for record in truth)
        assert all(isinstance(record, dict) for record in served)


def test_malformed_and_drifted_feeds_over_http_equal_the_served_truth_on_two_servers():
    faults = ApiFaults(malformed_rate=0.1, drift=True)
    with serve(CONFIG, faults=faults) as one, serve(CONFIG, faults=faults) as two:
        for path, truth in [
            (TX, transactions_served(CONFIG, faults, DAY)),
            (f"/v1/customers?as_of={DAY}", customers_served(CONFIG, faults, DAY)),
            (f"/v1/merchants?as_of={DAY}", merchants_served(CONFIG, faults, DAY)),
        ]:
            rows, _ = fetch_all(one.url, path, 37)
            assert rows == truth
            page = f"{path}&page=2&page_size=50"
            assert get(one.url + page)[2] == get(two.url + page)[2]
        one.set_faults(ApiFaults())
        assert fetch_all(one.url, TX, 100)[0] == transactions_for(CONFIG, DAY)


def test_drift_adds_unknown_fields_and_leaves_the_rest_unchanged():
    faults = ApiFaults(drift=True)
    for served, truth in [
        (transactions_served(CONFIG, faults, DAY), transactions_for(CONFIG, DAY)),
        (customers_served(CONFIG, faults, DAY), customers_as_of(CONFIG, DAY)),
        (merchants_served(CONFIG, faults, DAY), merchants_as_of(CONFIG, DAY)),
    ]:
        assert len(served) == len(truth)
        for record, original in zip(served, truth):
            assert list(record) == [*original, "channel", "loyalty_points"]
            assert {key: record[key] for key in original} == original
            assert record["channel"] in {"APP", "WEB", "POS"} and type(record["loyalty_points"]) is int
            assert malformed_kind(record) is None
        assert len({record["channel"] for record in served}) == 3
    drifted = transactions_served(CONFIG, faults, DAY)
    by_id = {}
    for record in drifted:  # both copies of a re-sent transaction carry the same new values
        assert by_id.setdefault(record["transaction_id"], record["channel"]) == record["channel"]
    assert transactions_served(CONFIG, faults, DAY) == drifted
    with faulty(drift=True) as bnpl_api:
        status, body = get_json(bnpl_api.url + TX + "&page_size=3")
        assert status == 200 and body["data"] == drifted[:3]


def test_truncate_after_pages_cuts_off_the_next_page_and_the_server_keeps_serving():
    with faulty(truncate_after_pages=2) as bnpl_api:
        pages = [get_json(f"{bnpl_api.url}{TX}&page={page}&page_size=50") for page in (1, 2)]
        assert [status for status, _ in pages] == [200, 200]
        assert pages[0][1]["data"] + pages[1][1]["data"] == transactions_for(CONFIG, DAY)[:100]
        request = urllib.request.Request(
            f"{bnpl_api.url}{TX}&page=3&page_size=50", headers={"Authorization": f"Bearer {CONFIG.token}"}
        )
        for _ in range(3):  # the page stays broken; each cut-off leaves the server healthy
            with urllib.request.urlopen(request, timeout=5) as response:
                assert response.status == 200
                with pytest.raises(http.client.IncompleteRead) as caught:
                    response.read()
            assert 0 < len(caught.value.partial) < int(response.headers["Content-Length"])
            assert get_json(f"{bnpl_api.url}/health", token=None)[0] == 200
            assert get_json(f"{bnpl_api.url}{TX}&page=1&page_size=50")[0] == 200
        client = bnpl_client(
            bnpl_api.url, CONFIG.token, page_size=50, timeout=5, attempts=2, backoff=0.01, max_delay=0.02
        )
        received = []
        # the cut-off body is retried like a dropped connection, then reported: the download fails after 2 whole pages
        with pytest.raises(ApiError, match=r"/v1/transactions failed after 2 attempts; last: connection failed: "):
            for page in client.iter_record_texts(client.declaration.resource("transactions"), DAY):
                received.append(page)
        assert len(received) == 2
        bnpl_api.set_faults(ApiFaults(truncate_after_pages=2, fail_path_prefix="/v1/customers"))
        assert get_json(f"{bnpl_api.url}{TX}&page=3&page_size=50")[0] == 200  # scoped like fail_requests
        bnpl_api.set_faults(ApiFaults())
        assert fetch_all(bnpl_api.url, TX, 50)[0] == transactions_for(CONFIG, DAY)


def test_admin_endpoint_sets_and_reads_faults():
    with serve(CONFIG) as bnpl_api:
        assert get_json(f"{bnpl_api.url}/admin/faults") == (200, ApiFaults().to_json())
        assert get(f"{bnpl_api.url}/admin/faults", token=None)[0] == 401
        assert post(f"{bnpl_api.url}/admin/faults", '{"fail_requests": 5}', token="wrong")[0] == 401
        assert bnpl_api.faults == ApiFaults()
        wanted = {"fail_requests": 1, "fail_status": 429, "retry_after_seconds": 1, "drift": True}
        status, body = post(f"{bnpl_api.url}/admin/faults", json.dumps(wanted))
        expected = ApiFaults(fail_requests=1, fail_status=429, retry_after_seconds=1.0, drift=True)
        assert status == 200 and body == expected.to_json() and bnpl_api.faults == expected
        assert get_json(f"{bnpl_api.url}/admin/faults") == (200, expected.to_json())
        status, headers, _ = get(bnpl_api.url + TX)
        assert status == 429 and headers["Retry-After"] == "1"
        assert get_json(f"{bnpl_api.url}/admin/faults")[1]["fail_requests"] == 0
        assert "channel" in get_json(bnpl_api.url + TX + "&page_size=1")[1]["data"][0]
        assert post(f"{bnpl_api.url}/admin/faults", "{}") == (200, ApiFaults().to_json())  # fields left out are off
        assert bnpl_api.faults == ApiFaults()
        assert post(bnpl_api.url + TX, "{}")[0] == 405 and post(f"{bnpl_api.url}/admin/nothing", "{}")[0] == 404
        with pytest.raises(TypeError):
            bnpl_api.set_faults({"fail_requests": 1})


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ('{"fail_requestz": 1}', "fail_requestz"),
        ('{"fail_requests": "2"}', "fail_requests"),
        ('{"fail_requests": true}', "fail_requests"),
        ('{"fail_status": 200}', "fail_status"),
        ('{"delay_seconds": "slow"}', "delay_seconds"),
        ('{"malformed_rate": 2}', "malformed_rate"),
        ('{"drift": 1}', "drift"),
        ('{"fail_path_prefix": 5}', "fail_path_prefix"),
        ('{"truncate_after_pages": -1}', "truncate_after_pages"),
        ("[1, 2]", "JSON object"),
        ("not json", "not JSON"),
    ],
)
def test_admin_endpoint_rejects_bad_input_naming_the_field(bnpl_api, body, named):
    before = bnpl_api.faults
    status, answer = post(f"{bnpl_api.url}/admin/faults", body)
    assert status == 400 and named in answer["error"]
    assert bnpl_api.faults == before == ApiFaults()


def test_the_source_client_recovers_from_failures_and_reports_exhausted_retries():
    with faulty(fail_requests=2) as bnpl_api:
        client = bnpl_client(
            bnpl_api.url, CONFIG.token, page_size=50, timeout=5, attempts=3, backoff=0.01, max_delay=0.05
        )
        assert (
            client.get_json("/v1/transactions", {"date": DAY.isoformat(), "page_size": 3})["data"]
            == transactions_for(CONFIG, DAY)[:3]
        )
        assert bnpl_api.faults.fail_requests == 0
        bnpl_api.set_faults(ApiFaults(fail_requests=2, fail_status=501))  # every 5xx is retried
        assert client.get_json("/v1/merchants", {"as_of": DAY.isoformat()})["data"] == merchants_as_of(CONFIG, DAY)
        assert bnpl_api.faults.fail_requests == 0
        # a fractional Retry-After ("0.5") falls back to the backoff (0.01 s, then 0.02 s), not 2 x 0.5 s
        bnpl_api.set_faults(ApiFaults(fail_requests=2, fail_status=429, retry_after_seconds=0.5))
        started = time.perf_counter()
        assert client.get_json("/v1/merchants", {"as_of": DAY.isoformat()})["data"] == merchants_as_of(CONFIG, DAY)
        assert time.perf_counter() - started < 0.9 and bnpl_api.faults.fail_requests == 0
        bnpl_api.set_faults(ApiFaults(fail_requests=100))
        with pytest.raises(ApiError) as caught:
            client.get_json("/v1/transactions", {"date": DAY.isoformat()})
        assert caught.value.endpoint == f"GET {bnpl_api.url}/v1/transactions" and caught.value.status == 503
        assert f"GET {bnpl_api.url}/v1/transactions" in str(caught.value) and "503" in str(caught.value)
        assert "3 attempts" in str(caught.value) and bnpl_api.faults.fail_requests == 97


def test_main_rejects_bad_fault_flags(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["--port", "0", "--malformed-rate", "2"])
    assert caught.value.code == 2 and "malformed_rate" in capsys.readouterr().err


def test_main_fault_flags_and_admin_switch_a_subprocess_server():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "etr_assets.sources.synthetic_cli",
            "--port",
            "0",
            "--fail-requests",
            "1",
            "--fail-status",
            "500",
            "--delay",
            "0.01",
            "--malformed-rate",
            "0.1",
            "--drift",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = re.search(r"http://127\.0\.0\.1:\d+", process.stdout.readline()).group(0)
        expected = ApiFaults(fail_requests=1, fail_status=500, delay_seconds=0.01, malformed_rate=0.1, drift=True)
        assert json.loads(process.stdout.readline().removeprefix("Faults: ")) == expected.to_json()
        assert get(url + TX)[0] == 500
        assert fetch_all(url, TX, 100)[0] == transactions_served(CONFIG, expected, DAY)
        assert post(f"{url}/admin/faults", '{"fail_requests": 1}')[0] == 200
        assert get(url + TX)[0] == 503
        assert fetch_all(url, TX, 100)[0] == transactions_for(CONFIG, DAY)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=10) == 0
        assert process.stderr.read() == ""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
        process.stderr.close()
