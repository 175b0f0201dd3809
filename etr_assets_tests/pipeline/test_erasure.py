"""GDPR erasure on a real lake built by the pipeline's own functions from the synthetic API, and its proof."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from etr_assets.errors import ErasureError
from etr_assets.lake.bookkeeping import GDPR_ACTIONS
from etr_assets.lake.erasure import (
    DELETE,
    NOT_FOUND,
    VERIFIED,
    VERIFY,
    ErasureRequest,
    audit_key,
    matches_by_id,
    subject_hash,
    validate_customer_ids,
)
from etr_assets.lake.frames import conform, local_frame
from etr_assets.pipeline import entities, transactions
from etr_assets.pipeline.erasure import erase_customers, prove_erased
from etr_assets.sources.fetch import fetch_day
from etr_assets.sources.raw_zone import local_raw_zone
from etr_assets.sources.synthetic_faults import ApiFaults
from etr_assets.tables import personal_data_specs
from etr_assets.tables.entities import (
    BRONZE_CUSTOMERS,
    GOLD_CUSTOMER_PROFILES,
    LANDING_CUSTOMERS,
)
from etr_assets.tables.feeds import QUARANTINE_TRANSACTIONS
from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, SILVER_TRANSACTIONS
from etr_assets_tests.sources.clients import bnpl_client

DAYS = [dt.date(2025, 1, 1), dt.date(2025, 1, 2)]
KEY = b"test-audit-key"


def build_lake(spark, settings, api):
    """Two days through raw, bronze (with quarantined records), landing, silver, gold and profiles."""
    catalog, raw = settings.catalog, local_raw_zone(settings.raw_root)
    client = bnpl_client(api.url, api.config.token, page_size=500)
    api.set_faults(ApiFaults(malformed_rate=0.04))
    try:
        for day in DAYS:
            fetch_day(client, raw, "transactions", day)
    finally:
        api.set_faults(ApiFaults())
    for day in DAYS:
        fetch_day(client, raw, "customers", day)
    transactions.load_bronze(spark, catalog, raw, DAYS)
    entities.load_bronze(spark, catalog, raw, entities.CUSTOMERS, DAYS)
    entities.build_landing(spark, catalog, entities.CUSTOMERS, DAYS)
    transactions.build_silver(spark, catalog, DAYS)
    transactions.build_gold(spark, catalog, DAYS)
    entities.build_customer_profiles(spark, catalog, DAYS)
    return raw


def raw_lines(raw, batch) -> list[str]:
    lines = []
    for uri in raw.file_uris(batch):
        with open(uri) as handle:
            lines += [line for line in handle if line.strip()]
    return lines


def built_personal_data_specs(spark, catalog):
    """The personal-data tables this lake has: the suite's second source (declared, never loaded here) has none."""
    return [spec for spec in personal_data_specs() if spark.catalog.tableExists(spec.qualified(catalog))]


def counts_by_customer(spark, catalog, column="customer_id"):
    return {
        spec.identifier: dict(spark.table(spec.qualified(catalog)).groupBy(column).count().collect())
        for spec in built_personal_data_specs(spark, catalog)
    }


def audit_rows(spark, catalog, request_id):
    return [
        r.asDict() for r in spark.table(GDPR_ACTIONS.qualified(catalog)).where(f"request_id = '{request_id}'").collect()
    ]


@pytest.mark.slow
def test_erasure_removes_exactly_the_customer_everywhere_and_proves_it(lake, settings, api):
    spark, catalog = lake, settings.catalog
    raw = build_lake(spark, settings, api)
    quarantine = spark.table(QUARANTINE_TRANSACTIONS.qualified(catalog)).where("customer_id IS NOT NULL")
    in_quarantine = {r[0] for r in quarantine.select("customer_id").collect()}
    silver_counts = dict(spark.table(SILVER_TRANSACTIONS.qualified(catalog)).groupBy("customer_id").count().collect())
    # Two customers: one with a refused record in quarantine, and silver's most frequent buyer.
    quarantined = min(in_quarantine)
    day_two = dict(
        spark.table(SILVER_TRANSACTIONS.qualified(catalog))
        .where(f"transaction_date = DATE'{DAYS[1]}'")
        .groupBy("customer_id")
        .count()
        .collect()
    )
    buyer = max(set(day_two) - {quarantined}, key=lambda c: (day_two[c], c))
    targets = (quarantined, buyer)
    before = counts_by_customer(spark, catalog)
    assert before[QUARANTINE_TRANSACTIONS.identifier].get(quarantined)
    for spec in (BRONZE_TRANSACTIONS, SILVER_TRANSACTIONS, BRONZE_CUSTOMERS, LANDING_CUSTOMERS, GOLD_CUSTOMER_PROFILES):
        assert before[spec.identifier].get(buyer), spec.identifier

    # Refs that pin old snapshots: a failed write-audit-publish branch, a tag, and a branch someone keeps.
    silver, landing, bronze = (
        s.qualified(catalog) for s in (SILVER_TRANSACTIONS, LANDING_CUSTOMERS, BRONZE_TRANSACTIONS)
    )
    spark.sql(f"ALTER TABLE {silver} CREATE BRANCH audit_failed_run")
    spark.sql(f"ALTER TABLE {bronze} CREATE TAG before_erasure")
    spark.sql(f"ALTER TABLE {landing} CREATE BRANCH analysis")
    # A newer download of day 2 that is not loaded yet: a pending batch must stay loadable after the erasure.
    pending = fetch_day(bnpl_client(api.url, api.config.token, page_size=500), raw, "transactions", DAYS[1])[0]
    assert any(f'"customer_id":{buyer},' in line for line in raw_lines(raw, pending))

    request = ErasureRequest.create("REQ-1", [quarantined, buyer, 999_999_999], KEY, run_id="test-run")
    report = erase_customers(spark, catalog, raw, request)

    # Counts drop by exactly the customer's rows; every other customer is untouched.
    after = counts_by_customer(spark, catalog)
    for spec in built_personal_data_specs(spark, catalog):
        name, removed = spec.identifier, report.table(spec.identifier).removed
        assert {c: n for c, n in after[name].items() if c is not None} == {
            c: n for c, n in before[name].items() if c not in (*targets, None)
        }, name
        for target in targets:
            if spec is QUARANTINE_TRANSACTIONS:  # refused lines naming the customer only in their text go too
                assert removed.get(target, 0) >= before[name].get(target, 0)
            else:
                assert removed.get(target, 0) == before[name].get(target, 0) and None not in after[name], name
        assert after[name].get(None, 0) <= before[name].get(None, 0)
    assert report.table(SILVER_TRANSACTIONS.identifier).rows_removed == silver_counts[buyer] + silver_counts.get(
        quarantined, 0
    )

    # Refs: the audit branch and the tag are gone, the kept branch was erased too, history is expired.
    refs = {r[0] for r in spark.sql(f"SELECT name FROM {silver}.refs").collect()}
    assert refs == {"main"}
    assert {r[0] for r in spark.sql(f"SELECT name FROM {bronze}.refs").collect()} == {"main"}
    branch = spark.read.format("iceberg").option("branch", "analysis").load(landing)
    assert branch.where(f"customer_id IN {targets}").count() == 0 and branch.count() > 0
    assert spark.sql(f"SELECT count(*) FROM {silver}.snapshots").first()[0] == 1

    # The proof: nothing in any data file, raw file, or read as of before the erasure.
    proof = report.proof
    assert proof.passed, proof.findings
    built = built_personal_data_specs(spark, catalog)
    assert proof.tables_scanned == len(built) and proof.raw_files_scanned > 0
    assert set(proof.time_travel) == {s.identifier for s in built}

    # Raw zone: rewritten without the customer, manifests consistent, the pending batch still loads.
    assert report.raw.removed[buyer] > 0 and report.raw.removed[quarantined] > 0
    for endpoint in ("transactions", "customers"):
        for batch in raw.batches("bnpl", endpoint):
            lines = raw_lines(raw, batch)
            assert raw.manifest(batch).records == len(lines)
            assert not any(f'"customer_id":{t},' in line for line in lines for t in targets)
    assert not raw.is_complete(pending)
    loaded = transactions.load_bronze(spark, catalog, raw, [DAYS[1]])
    assert pending.batch_id in loaded.extra["batches"] and raw.is_complete(pending)
    assert spark.table(bronze).where(f"customer_id IN {targets}").count() == 0

    # The audit: hashes, never the id; the unknown customer recorded as NOT_FOUND; one VERIFIED row each.
    rows = audit_rows(spark, catalog, "REQ-1")
    values = {str(v) for r in rows for v in r.values()}
    assert not values & {str(t) for t in targets} and not any(
        f'"customer_id":{t}' in v for v in values for t in targets
    )
    by_subject = {subject_hash(KEY, c): [] for c in request.customer_ids}
    for row in rows:
        by_subject[row["subject_hash"]].append(row)
    deletes = {
        r["table_name"]: r["rows_removed"] for r in by_subject[subject_hash(KEY, buyer)] if r["action"] == DELETE
    }
    assert deletes[SILVER_TRANSACTIONS.identifier] == silver_counts[buyer]
    assert {r["outcome"] for r in by_subject[subject_hash(KEY, buyer)] if r["action"] == VERIFY} == {VERIFIED}
    assert any(name.startswith(str(settings.raw_root)) for name in deletes)  # the raw zone's row
    unknown = by_subject[subject_hash(KEY, 999_999_999)]
    assert {(r["action"], r["outcome"]) for r in unknown} == {(DELETE, NOT_FOUND), (VERIFY, VERIFIED)}
    assert {r["run_id"] for r in rows} == {"test-run"}

    # The proof itself: a copy planted after the erasure is found and named.
    planted = pending.key.replace(pending.batch_id, "2025-01-02_20990101T000000000000Z_planted")
    raw.storage.write_bytes(f"{planted}/part-00001.jsonl", (json.dumps({"customer_id": buyer}) + "\n").encode())
    silver_row = spark.table(silver).where("customer_id IS NOT NULL").limit(1).selectExpr("*")
    from pyspark.sql import functions as F

    silver_row.withColumn("customer_id", F.lit(buyer)).writeTo(silver).append()  # one more Parquet file
    failed = prove_erased(spark, catalog, raw, request)
    assert not failed.passed and failed.found_ids == (buyer,)
    where = "\n".join(failed.findings)
    assert f"{planted}/part-00001.jsonl" in where
    silver_files = [f for f in failed.findings if f.startswith(SILVER_TRANSACTIONS.identifier + " data file ")]
    assert len(silver_files) == 1 and silver_files[0].endswith(".parquet: 1 row(s) of 1 subject(s)")

    # Deleting without expiring is not erasing: the row lives on in the older snapshot's file, and the proof says so.
    planted_file = silver_files[0].removeprefix(SILVER_TRANSACTIONS.identifier + " data file ").rsplit(": ", 1)[0]
    spark.sql(f"DELETE FROM {silver} WHERE customer_id = {int(buyer)}")
    assert spark.table(silver).where(f"customer_id = {int(buyer)}").count() == 0
    history = prove_erased(spark, catalog, None, request, specs=(SILVER_TRANSACTIONS,))
    assert not history.passed and history.findings == (
        f"{SILVER_TRANSACTIONS.identifier} data file {planted_file}: 1 row(s) of 1 subject(s)",
    )


def test_an_id_inside_a_refused_line_is_matched_even_when_its_column_is_empty(spark):
    df = conform(
        local_frame(
            spark,
            [
                ("b", None, "f", 1, '{"customer_id":"123", "amount": broken', "not a JSON object", None, None),
                ("b", None, "f", 2, '{"customer_id": 4567}', "wrong type", None, None),
                ("b", None, "f", 3, "#corrupted#", "not a JSON object", None, None),
                ("b", None, "f", 4, '{"customer\\u005fid": 891}', "wrong type", None, None),
            ],  # an escaped key
            "_batch_id string, _batch_day date, source_file string, line_number long, raw_text string, reason string, "
            "customer_id long, quarantined_at timestamp",
        ),
        QUARANTINE_TRANSACTIONS,
    )
    from etr_assets.lake.erasure import ids_frame

    assert matches_by_id(df, QUARANTINE_TRANSACTIONS, ids_frame(spark, (123, 4567, 8, 891))) == {
        123: 1,
        4567: 1,
        891: 1,
    }


@pytest.mark.parametrize(
    "ids, problem",
    [
        ([], "empty"),
        (["12a"], "customer_ids[0]: '12a'"),
        ([5, -1], "customer_ids[1]: -1"),
        ([0], "customer_ids[0]: 0"),
        ([True], "customer_ids[0]: True"),
        (["1; DROP TABLE x"], "customer_ids[0]"),
        ([2**63], "customer_ids[0]"),
        ("123", "must be a list"),
    ],
)
def test_invalid_ids_are_refused_naming_the_value(ids, problem):
    with pytest.raises(ErasureError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        validate_customer_ids(ids)


def test_ids_are_normalised_and_the_audit_key_is_required_outside_local():
    assert validate_customer_ids([" 42", 7, "42"]) == (42, 7)
    assert audit_key("local", {}) and audit_key("s3", {"ETR_AUDIT_KEY": "k"}) == b"k"
    with pytest.raises(ErasureError, match="ETR_AUDIT_KEY is not set"):
        audit_key("aws", {})
    with pytest.raises(ErasureError, match="request_reference is empty"):
        ErasureRequest.create("  ", [1], b"k")
    assert subject_hash(b"a", 1) != subject_hash(b"b", 1) and len(subject_hash(b"a", 1)) == 64
