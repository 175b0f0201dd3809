"""Erased customers stay erased: the suppression list keeps them out of every later load, and can be lifted."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from etr_assets.lake.bookkeeping import GDPR_ACTIONS, record_rows
from etr_assets.lake.erasure import ErasureRequest, subject_hash
from etr_assets.lake.erasure.suppression import (
    LIFT,
    lift_suppression,
    subject_hash_column,
    suppression_list,
)
from etr_assets.lake.frames import local_frame
from etr_assets.pipeline import entities, transactions
from etr_assets.pipeline.erasure import erase_customers, prove_erased, scan_raw_zone
from etr_assets.sources.api_client import ApiClient
from etr_assets.sources.fetch import fetch_day
from etr_assets.sources.raw_zone import local_raw_zone
from etr_assets.tables import personal_data_specs
from etr_assets.tables.entities import GOLD_CUSTOMER_ACTIVITY, GOLD_CUSTOMER_PROFILES, LANDING_CUSTOMERS
from etr_assets.tables.quarantine import QUARANTINE_TRANSACTIONS
from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, SILVER_TRANSACTIONS

DAY1, DAY2 = dt.date(2025, 1, 1), dt.date(2025, 1, 2)
KEY = b"test-audit-key"


@pytest.mark.parametrize("key", [b"k", KEY, b"x" * 100])
def test_the_hash_in_spark_is_the_hash_in_python(spark, key):
    ids = [1, 42, 100001, 2**63 - 1]
    df = local_frame(spark, [(i,) for i in ids], "id bigint")
    from pyspark.sql import functions as F

    in_spark = {r["id"]: r["h"] for r in df.select("id", subject_hash_column(key, F.col("id")).alias("h")).collect()}
    assert in_spark == {i: subject_hash(key, i) for i in ids}


def _customers_in(spark, catalog) -> dict[str, set]:
    return {
        spec.identifier: {r[0] for r in spark.table(spec.qualified(catalog)).select("customer_id").distinct().collect()}
        for spec in personal_data_specs()
    }


def _lines(raw, batch) -> list[str]:
    out = []
    for uri in raw.file_uris(batch):
        with open(uri) as handle:
            out += [line for line in handle if line.strip()]
    return out


def _build(spark, catalog, raw, days):
    transactions_loaded = transactions.load_bronze(spark, catalog, raw, days)
    customers_loaded = entities.load_bronze(spark, catalog, raw, entities.CUSTOMERS, days)
    entities.build_landing(spark, catalog, entities.CUSTOMERS, days)
    transactions.build_silver(spark, catalog, days)
    transactions.build_gold(spark, catalog, days)
    entities.build_customer_profiles(spark, catalog, days)
    return transactions_loaded, customers_loaded


def _balanced(extra) -> bool:
    return extra["records_received"] == (
        extra["records_accepted"] + extra["records_quarantined"] + extra["records_suppressed"]
    )


@pytest.mark.slow
def test_an_erased_customer_served_again_by_the_api_is_never_stored_and_the_lift_lets_them_back(
    lake, settings, api, monkeypatch
):
    monkeypatch.setenv("ETR_AUDIT_KEY", KEY.decode())
    spark, catalog, raw = lake, settings.catalog, local_raw_zone(settings.raw_root)
    client = ApiClient(api.url, api.config.token, page_size=500)
    for endpoint in ("transactions", "customers"):
        fetch_day(client, raw, endpoint, DAY1)
    _build(spark, catalog, raw, [DAY1])

    # Day 2 as the API serves it: pick a customer known on day 1 who buys again on day 2.
    day2 = fetch_day(client, raw, "transactions", DAY2)[0]
    buyers = {json.loads(line)["customer_id"] for line in _lines(raw, day2)}
    known = {r[0] for r in spark.table(LANDING_CUSTOMERS.qualified(catalog)).select("customer_id").collect()}
    target = min(buyers & known)
    request = ErasureRequest.create("REQ-SUP", [target], KEY, run_id="test-run")
    assert erase_customers(spark, catalog, raw, request).proof.passed
    assert suppression_list(spark, catalog).holds(target)

    # The API still serves them: a new download of day 2 (transactions and the full customer list), with one more
    # line refused by validation that names them only inside its text.
    day2 = fetch_day(client, raw, "transactions", DAY2)[0]
    fetch_day(client, raw, "customers", DAY2)
    part = raw.file_uris(day2)[0]
    with open(part, "a") as handle:
        handle.write('{"transaction_id": "broken", "customer_id": "' + str(target) + '", "amount": \n')
    assert sum(f'"customer_id":{target},' in line for line in _lines(raw, day2)) >= 1

    loaded_tx, loaded_cu = _build(spark, catalog, raw, [DAY2])
    assert loaded_tx.extra["records_suppressed"] >= 2  # the purchase(s) and the refused line
    assert loaded_cu.extra["records_suppressed"] == 1
    assert _balanced(loaded_tx.extra) and _balanced(loaded_cu.extra)
    assert loaded_tx.extra["raw_lines_suppressed"] == loaded_tx.extra["records_suppressed"]

    # Nothing of theirs stored anywhere, nor left in the raw zone; no (zombie) version in the SCD2 history.
    for table, customers in _customers_in(spark, catalog).items():
        assert target not in customers, table
    quarantine = spark.table(QUARANTINE_TRANSACTIONS.qualified(catalog))
    assert quarantine.where(f"raw_text LIKE '%{target}%'").count() == 0
    assert scan_raw_zone(raw, (target,))[1] == {}
    landing = spark.table(LANDING_CUSTOMERS.qualified(catalog))
    assert landing.where(f"customer_id = {target}").count() == 0 and landing.where("_is_current").count() > 0

    # Profiles and silver agree: every buyer of day 2 with a current version has a profile of day 2.
    silver = spark.table(SILVER_TRANSACTIONS.qualified(catalog)).where(f"transaction_date = DATE'{DAY2}'")
    silver_buyers = {r[0] for r in silver.select("customer_id").distinct().collect()}
    profiles = spark.table(GOLD_CUSTOMER_PROFILES.qualified(catalog)).where(f"as_of_date = DATE'{DAY2}'")
    profiled = {r[0] for r in profiles.select("customer_id").collect()}
    current = {r[0] for r in landing.where("_is_current").select("customer_id").collect()}
    assert silver_buyers & current <= profiled and silver_buyers
    activity = spark.table(GOLD_CUSTOMER_ACTIVITY.qualified(catalog)).where(f"customer_id = {target}")
    assert activity.count() == 0

    # The proof names every suppressed customer and finds none of their rows.
    proof = prove_erased(spark, catalog, raw, request)
    assert proof.passed, proof.findings
    assert proof.suppressed == {subject_hash(KEY, target): 0}
    assert "1 erased customer(s) on the suppression list: no row of theirs" in proof.summary()

    # A row planted in bronze after the erasure: the proof fails, naming the table.
    bronze = BRONZE_TRANSACTIONS.qualified(catalog)
    row = spark.table(bronze).limit(1)
    from pyspark.sql import functions as F

    row.withColumn("customer_id", F.lit(target).cast("bigint")).select(*row.columns).writeTo(bronze).append()
    planted = prove_erased(spark, catalog, raw, request)
    assert not planted.passed and planted.suppressed == {subject_hash(KEY, target): 1}
    assert any("suppression list" in f and BRONZE_TRANSACTIONS.identifier in f for f in planted.findings)
    spark.sql(f"DELETE FROM {bronze} WHERE customer_id = {target}")

    # The lift: audited with its reason; the next download of the day stores them again.
    lifted = lift_suppression(spark, catalog, KEY, target, "CONSENT-7", "signed up again on 2025-01-03")
    assert lifted["action"] == LIFT and lifted["subject_hash"] == subject_hash(KEY, target)
    assert not suppression_list(spark, catalog).holds(target)
    fetch_day(client, raw, "transactions", DAY2)
    again = transactions.load_bronze(spark, catalog, raw, [DAY2])
    assert again.extra["records_suppressed"] == 0 and _balanced(again.extra)
    assert spark.table(bronze).where(f"customer_id = {target}").count() >= 1


def test_the_newest_audit_row_of_a_hash_decides(lake, settings):
    spark, catalog = lake, settings.catalog
    assert not suppression_list(spark, catalog)  # no audit table yet: an empty list, no key needed
    now = dt.datetime(2025, 1, 5, 12)

    def row(customer_id, action, minutes):
        return {
            "request_id": "R",
            "subject_hash": subject_hash(KEY, customer_id),
            "action": action,
            "table_name": None,
            "rows_removed": None,
            "outcome": "DONE",
            "detail": "",
            "executed_at": now + dt.timedelta(minutes=minutes),
            "run_id": "",
        }

    record_rows(
        spark,
        catalog,
        GDPR_ACTIONS,
        [
            row(1, "GDPR_DELETE", 0),  # erased
            row(2, "GDPR_DELETE", 0),
            row(2, LIFT, 5),  # erased, then lifted
            row(3, "GDPR_VERIFY", 0),
            row(3, LIFT, 5),
            row(3, "GDPR_DELETE", 9),  # lifted, then erased again
        ],
    )
    listed = suppression_list(spark, catalog, KEY)
    assert [listed.holds(i) for i in (1, 2, 3, 4)] == [True, False, True, False]
    with pytest.raises(ValueError, match="reason"):
        lift_suppression(spark, catalog, KEY, 1, "REF", " ")
