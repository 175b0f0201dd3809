"""The gdpr_erasure job through Dagster, in process, on a lake the pipeline's functions built from the synthetic API."""

from __future__ import annotations

import datetime as dt

import pytest
from dagster import DagsterInstance

from etr_assets.definitions import build_definitions
from etr_assets.lake.bookkeeping import GDPR_ACTIONS
from etr_assets.lake.erasure import LOCAL_AUDIT_KEY, subject_hash
from etr_assets.pipeline import entities, transactions
from etr_assets.sources.api_client import ApiClient
from etr_assets.sources.fetch import fetch_day
from etr_assets.sources.raw_zone import local_raw_zone
from etr_assets.tables import personal_data_specs
from etr_assets.tables.transactions import SILVER_TRANSACTIONS

DAY = dt.date(2025, 1, 3)


def run_erasure(defs, ids, reference="GDPR-TEST-1"):
    config = {"ops": {"gdpr_request": {"config": {"customer_ids": ids, "request_reference": reference}}}}
    job = defs.get_job_def("gdpr_erasure")
    return job.execute_in_process(run_config=config, instance=DagsterInstance.ephemeral(), raise_on_error=False)


def output_metadata(result) -> dict[str, dict]:
    return {
        e.step_key: {k: v.value for k, v in e.event_specific_data.metadata.items()}
        for e in result.all_events
        if e.event_type_value == "STEP_OUTPUT"
    }


@pytest.mark.slow
def test_the_job_erases_a_customer_records_it_and_puts_the_proof_on_the_run(lake, settings, api, monkeypatch):
    monkeypatch.delenv("ETR_AUDIT_KEY", raising=False)  # the local profile's documented development key
    spark, catalog, raw = lake, settings.catalog, local_raw_zone(settings.raw_root)
    client = ApiClient(api.url, api.config.token, page_size=500)
    for endpoint in ("transactions", "customers"):
        fetch_day(client, raw, endpoint, DAY)
    transactions.load_bronze(spark, catalog, raw, [DAY])
    transactions.build_silver(spark, catalog, [DAY])
    entities.load_bronze(spark, catalog, raw, entities.CUSTOMERS, [DAY])
    entities.build_landing(spark, catalog, entities.CUSTOMERS, [DAY])
    silver = SILVER_TRANSACTIONS.qualified(catalog)
    counts = dict(spark.table(silver).groupBy("customer_id").count().collect())
    customer = max(counts, key=lambda c: (counts[c], c))
    total = sum(counts.values())
    defs = build_definitions(settings)

    invalid = run_erasure(defs, [customer, -3])
    assert not invalid.success
    failure = next(e for e in invalid.all_events if e.event_type_value == "STEP_FAILURE")
    assert failure.step_key == "gdpr_request" and "customer_ids[1]: -3 is not a customer id" in str(
        failure.event_specific_data.error
    )
    assert spark.table(silver).count() == total  # nothing was touched

    result = run_erasure(defs, [customer, 888_888_888])
    assert result.success
    assert spark.table(silver).count() == total - counts[customer]
    assert spark.table(silver).where(f"customer_id = {customer}").count() == 0

    metadata = output_metadata(result)
    assert metadata["erase_silver_bnpl_transactions_clean"]["rows_removed"] == counts[customer]
    assert metadata["erase_silver_bnpl_transactions_clean"]["table"] == silver
    assert metadata["erase_gold_customer_profiles"]["rows_removed"] == 0  # never built: skipped
    assert metadata["erase_raw_zone"]["records_removed"] > 0
    proof = metadata["prove_erasure"]
    assert proof["proof"] == "VERIFIED" and proof["copies_found"] == 0 and proof["customers_not_found_anywhere"] == 1
    assert proof["rows_removed_by_table"][SILVER_TRANSACTIONS.identifier] == counts[customer]
    assert proof["raw_files_scanned"] >= 2 and proof["data_files_scanned"] >= 1

    # Table steps ran upstream first and each held its table writer's pool.
    order = [e.step_key for e in result.all_events if e.event_type_value == "STEP_START"]
    assert order[:2] == ["gdpr_request", "erase_raw_zone"] and order[-1] == "prove_erasure"
    assert order.index("erase_bronze_bnpl_transactions_raw") < order.index("erase_silver_bnpl_transactions_clean")
    job = defs.get_job_def("gdpr_erasure")
    assert (
        job.graph.node_named("erase_bronze_quarantine_transactions").definition.pool
        == "iceberg_bronze_bnpl_transactions_raw"
    )
    assert {n.name for n in job.graph.nodes} >= {f"erase_{s.namespace}_{s.name}" for s in personal_data_specs()}

    observed = {
        e.asset_key.to_user_string(): e.asset_observation_data.asset_observation
        for e in result.get_asset_observation_events()
    }
    assert set(observed) == {
        "bronze/bnpl_transactions_raw",
        "silver/bnpl_transactions_clean",
        "bronze/bnpl_customers_raw",
        "landing/customers",
    }  # the table assets it changed
    assert observed["silver/bnpl_transactions_clean"].metadata["rows_removed"].value == counts[customer]

    audit = spark.table(GDPR_ACTIONS.qualified(catalog)).where("request_id = 'GDPR-TEST-1'").collect()
    key = LOCAL_AUDIT_KEY.encode()
    verified = {(r["subject_hash"], r["outcome"]) for r in audit if r["action"] == "GDPR_VERIFY"}
    assert verified == {(subject_hash(key, customer), "VERIFIED"), (subject_hash(key, 888_888_888), "VERIFIED")}
    assert {r["run_id"] for r in audit} == {result.run_id}
