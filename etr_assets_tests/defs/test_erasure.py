"""The gdpr_erasure job through Dagster, in process on an on-disk instance (DAGSTER_HOME in tmp_path), on a lake the
pipeline's functions built from the synthetic API; the request recorded with `etr erase`, the run given the
reference only. Afterwards no byte under DAGSTER_HOME and nothing in the lake names the erased customer."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterInvalidConfigError
from pyspark.sql import functions as F

from etr_assets import cli
from etr_assets.definitions import build_definitions
from etr_assets.defs.run_summary import summarize_run
from etr_assets.lake.bookkeeping import GDPR_ACTIONS
from etr_assets.lake.erasure import LOCAL_AUDIT_KEY, subject_hash
from etr_assets.lake.erasure.store import DONE, open_request_store
from etr_assets.pipeline import entities, transactions
from etr_assets.sources.fetch import fetch_day
from etr_assets.sources.raw_zone import local_raw_zone
from etr_assets.tables import personal_data_specs
from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, SILVER_TRANSACTIONS
from etr_assets_tests.defs.outside_ticks import outside_tick
from etr_assets_tests.sources.clients import bnpl_client

DAY = dt.date(2025, 1, 3)
# The synthetic API's customers are 1000xx: two of them get ids of eight digits, which no other byte holds by chance.
ERASED, KEPT, UNKNOWN = 83_920_417, 61_047_392, 888_888_888


def run_erasure(defs, instance, reference="GDPR-TEST-1"):
    config = {"ops": {"gdpr_request": {"config": {"request_reference": reference}}}}
    job = defs.get_job_def("gdpr_erasure")
    return job.execute_in_process(run_config=config, instance=instance, raise_on_error=False)


def output_metadata(result) -> dict[str, dict]:
    return {
        e.step_key: {k: v.value for k, v in e.event_specific_data.metadata.items()}
        for e in result.all_events
        if e.event_type_value == "STEP_OUTPUT"
    }


def step_error(result) -> tuple[str, str]:
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    return failure.step_key, str(failure.event_specific_data.error)


def renumber_raw_customers(raw_root: Path, new_ids: dict[int, int]) -> None:
    """Give customers other ids in every raw file, before anything is loaded (as if the API had sent those)."""
    for path in raw_root.rglob("*.jsonl"):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        for record in lines:
            if record.get("customer_id") in new_ids:
                record["customer_id"] = new_ids[record["customer_id"]]
        path.write_text("".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in lines))


def _decimal(number: int) -> re.Pattern:
    return re.compile(rb"(?<![0-9])%d(?![0-9])" % number)


def files_naming(root: Path, number: int) -> list[Path]:
    """Every file under `root` whose bytes hold `number` in decimal (SQLite databases and their WAL included)."""
    pattern = _decimal(number)
    return sorted(p for p in root.rglob("*") if p.is_file() and pattern.search(p.read_bytes()))


def parquet_naming(root: Path, number: int) -> list[Path]:
    """Parquet files (compressed, numbers in binary) whose decoded values hold `number`."""
    import pyarrow.parquet as pq

    pattern = _decimal(number)
    return sorted(
        p for p in root.rglob("*.parquet") if pattern.search(repr(pq.ParquetFile(p).read().to_pylist()).encode())
    )


@pytest.mark.slow
def test_the_job_erases_a_customer_records_it_and_puts_the_proof_on_the_run(
    lake, settings, api, monkeypatch, tmp_path, capsys
):
    monkeypatch.delenv("ETR_AUDIT_KEY", raising=False)  # the local profile's documented development key
    monkeypatch.delenv("ETR_PROFILE", raising=False)
    monkeypatch.setenv("ETR_HOME", str(settings.home))  # `etr erase` records where the job reads
    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    spark, catalog, raw = lake, settings.catalog, local_raw_zone(settings.raw_root)
    client = bnpl_client(api.url, api.config.token, page_size=500)
    for endpoint in ("transactions", "customers"):
        fetch_day(client, raw, endpoint, DAY)
    bought = Counter(
        json.loads(line)["customer_id"]
        for path in Path(settings.raw_root).rglob("*.jsonl")
        if "transactions" in path.parts
        for line in path.read_text().splitlines()
    )
    (busiest, _), (other, _) = bought.most_common(2)
    renumber_raw_customers(Path(settings.raw_root), {busiest: ERASED, other: KEPT})
    transactions.load_bronze(spark, catalog, raw, [DAY])
    transactions.build_silver(spark, catalog, [DAY])
    entities.load_bronze(spark, catalog, raw, entities.CUSTOMERS, [DAY])
    entities.build_landing(spark, catalog, entities.CUSTOMERS, [DAY])
    silver = SILVER_TRANSACTIONS.qualified(catalog)
    counts = dict(spark.table(silver).groupBy("customer_id").count().collect())
    customer = ERASED
    assert counts[ERASED] == bought[busiest] and counts[KEPT] == bought[other]
    assert files_naming(settings.home, ERASED) and parquet_naming(settings.home, ERASED)  # the search finds it
    total = sum(counts.values())
    defs = build_definitions(settings)
    job = defs.get_job_def("gdpr_erasure")

    with DagsterInstance.get() as instance:
        # Ids in the run's config, the old way: refused before a run exists.
        old_way = {"ops": {"gdpr_request": {"config": {"customer_ids": [ERASED], "request_reference": "GDPR-OLD"}}}}
        with pytest.raises(DagsterInvalidConfigError, match="customer_ids"):
            job.execute_in_process(run_config=old_way, instance=instance)
        assert instance.get_runs() == []

        # Bad ids: `etr erase` names the bad one and records nothing.
        assert cli.main(["erase", "--reference", "GDPR-TEST-1", str(ERASED), "-3"]) == 1
        assert "etr erase: ids[1]: '-3' is not a customer id" in capsys.readouterr().err
        unknown = run_erasure(defs, instance)  # nothing was recorded: an unknown reference
        assert not unknown.success
        step, error = step_error(unknown)
        assert step == "gdpr_request" and "no erasure request 'GDPR-TEST-1'" in error and "etr erase" in error
        assert spark.table(silver).count() == total  # nothing was touched

        assert cli.main(["erase", "--reference", "GDPR-TEST-1", str(ERASED), str(UNKNOWN)]) == 0
        told = capsys.readouterr().out
        assert "2 customer(s)" in told and '"request_reference": "GDPR-TEST-1"' in told and str(ERASED) not in told
        # The layers were loaded without Dagster (the library called directly): commits outside it. The erasure's
        # own commits (deletes, compactions, history expired) are Dagster's.
        before = outside_tick(defs, instance)
        assert set(before.failed()) >= {"silver/bnpl_transactions_clean", "landing/customers"}
        result = run_erasure(defs, instance)
        assert result.success
        after = outside_tick(defs, instance, before.cursor)
        assert not after.result.run_requests, [e.description for e in after.evaluations]
        assert spark.table(silver).count() == total - counts[customer]
        assert spark.table(silver).where(f"customer_id = {customer}").count() == 0
        assert spark.table(silver).where(f"customer_id = {KEPT}").count() == counts[KEPT]

        # Carried out: the request keeps the keyed hashes only, and cannot run again.
        key = LOCAL_AUDIT_KEY.encode()
        store = open_request_store(settings.raw_root)
        stored = json.loads(store.storage.read_bytes("_gdpr_requests/GDPR-TEST-1.json"))
        assert stored["status"] == DONE and "customer_ids" not in stored and stored["run_id"] == result.run_id
        assert stored["subject_hashes"] == sorted([subject_hash(key, ERASED), subject_hash(key, UNKNOWN)])
        # The proof's statement on the run's summary: nothing of any erased customer entered a table since.
        assert summarize_run(instance, result.run_id).lines()[3] == (
            "  erasure proof: VERIFIED (2 erased customer(s) on the suppression list: no row of theirs in any table "
            "since)"
        )
        again = run_erasure(defs, instance)
        assert not again.success and "already carried out" in step_error(again)[1]
        assert cli.main(["erase", "--reference", "GDPR-TEST-1", str(ERASED)]) == 1
        assert f"already carried out (run {result.run_id}" in capsys.readouterr().err

        # No byte of the instance names the erased ids; an id written into the run storage is found by the same search.
        instance.add_run_tags(result.run_id, {"etr/test-control": str(KEPT)})
        assert [p.name for p in dagster_home.rglob("*.db")], "the instance is on disk"
        for erased in (ERASED, UNKNOWN):
            assert files_naming(dagster_home, erased) == []
        assert files_naming(dagster_home, KEPT)
    # Nor does the lake (warehouse, raw zone, request store), as bytes or as decoded Parquet values; the customer
    # not erased still is.
    for erased in (ERASED, UNKNOWN):
        assert files_naming(settings.home, erased) == [] and parquet_naming(settings.home, erased) == []
    assert files_naming(settings.home / "raw", KEPT) and parquet_naming(settings.home / "warehouse", KEPT)

    metadata = output_metadata(result)
    assert metadata["erase_silver_bnpl_transactions_clean"]["rows_removed"] == counts[customer]
    assert metadata["erase_silver_bnpl_transactions_clean"]["table"] == silver
    assert metadata["erase_gold_customer_profiles"]["rows_removed"] == 0  # never built: skipped
    assert metadata["erase_raw_zone"]["records_removed"] > 0
    proof = metadata["prove_erasure"]
    assert proof["proof"] == "VERIFIED" and proof["copies_found"] == 0 and proof["customers_not_found_anywhere"] == 1
    assert proof["rows_removed_by_table"][SILVER_TRANSACTIONS.identifier] == counts[customer]
    assert proof["raw_files_scanned"] >= 2 and proof["data_files_scanned"] >= 1
    # Both customers of the request are on the suppression list now (one never held: asked to be forgotten all the
    # same), and none of them has a row in any table.
    assert (proof["suppressed_customers"], proof["suppressed_customers_found_again"]) == (2, 0)
    assert proof["suppressed_rows_found"] == 0
    assert proof["suppression"] == "2 erased customer(s) on the suppression list: no row of theirs in any table since"

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
    verified = {(r["subject_hash"], r["outcome"]) for r in audit if r["action"] == "GDPR_VERIFY"}
    assert verified == {(subject_hash(key, customer), "VERIFIED"), (subject_hash(key, UNKNOWN), "VERIFIED")}
    assert {r["run_id"] for r in audit} == {result.run_id}

    # A row of the erased customer written back after the erasure (bypassing the load's suppression): the next
    # erasure's proof, for another customer, finds it and fails, with the figures on the failed step.
    bronze = BRONZE_TRANSACTIONS.qualified(catalog)
    row = spark.table(bronze).limit(1)
    row.withColumn("customer_id", F.lit(ERASED).cast("bigint")).select(*row.columns).writeTo(bronze).append()
    assert cli.main(["erase", "--reference", "GDPR-TEST-2", str(UNKNOWN + 1)]) == 0
    with DagsterInstance.get() as instance:
        refuted = run_erasure(defs, instance, "GDPR-TEST-2")
        lines = summarize_run(instance, refuted.run_id).lines()
    failure = next(e for e in refuted.all_events if e.event_type_value == "STEP_FAILURE")
    assert failure.step_key == "prove_erasure"
    figures = {k: v.value for k, v in failure.event_specific_data.user_failure_data.metadata.items()}
    assert figures["proof"] == "FAILED" and figures["suppressed_customers"] == 3
    assert (figures["suppressed_customers_found_again"], figures["suppressed_rows_found"]) == (1, 1)
    assert lines[3] == (
        "  erasure proof: FAILED (3 erased customer(s) on the suppression list: 1 found again in a table)"
    )
