"""Ingestion against the synthetic API's fault switches: nothing lost, nothing duplicated, counts reconcile."""

from __future__ import annotations

import datetime as dt

import pytest

from etr_assets.errors import ApiError
from etr_assets.pipeline import transactions as pipeline
from etr_assets.sources.fetch import fetch_day
from etr_assets.sources.raw_zone import local_raw_zone
from etr_assets.sources.synthetic_api import ApiConfig, ApiFaults, serve
from etr_assets_tests.sources.clients import bnpl_client
from etr_assets_tests.sources.malformed import malformed_kind, transactions_served

DAY = dt.date(2025, 5, 5)
QUICK = {"attempts": 3, "backoff": 0.01, "max_delay": 0.05}


@pytest.fixture
def faulty_api():
    with serve(ApiConfig(transactions_per_day=60)) as api:
        yield api


def client(api, **kwargs):
    return bnpl_client(api.url, api.config.token, page_size=20, **QUICK, **kwargs)


def silver_ids(lake, settings):
    return [
        r[0]
        for r in lake.sql(f"SELECT transaction_id FROM {settings.catalog}.silver.bnpl_transactions_clean").collect()
    ]


def test_transient_failures_are_retried_and_the_day_lands_once(lake, settings, faulty_api):
    faulty_api.set_faults(ApiFaults(fail_requests=2, fail_status=503))
    raw = local_raw_zone(settings.raw_root)
    batch, manifest = fetch_day(client(faulty_api), raw, "transactions", DAY)
    assert manifest.records == len(transactions_served(faulty_api.config, ApiFaults(), DAY))
    pipeline.load_bronze(lake, settings.catalog, raw, [DAY])
    pipeline.build_silver(lake, settings.catalog, [DAY])
    ids = silver_ids(lake, settings)
    assert len(ids) == len(set(ids)) == 60


def test_a_download_cut_off_midway_is_never_loaded_and_the_rerun_lands_exactly_once(lake, settings, faulty_api):
    raw = local_raw_zone(settings.raw_root)
    faulty_api.set_faults(ApiFaults(truncate_after_pages=1))
    with pytest.raises(ApiError, match="/v1/transactions failed after 3 attempts"):
        fetch_day(client(faulty_api), raw, "transactions", DAY)
    (broken,) = raw.batches("bnpl", "transactions", DAY)
    assert raw.manifest(broken) is None and raw.latest_sealed("bnpl", "transactions", DAY) is None
    with pytest.raises(pipeline.BadInputError, match="no downloaded raw batch"):
        pipeline.load_bronze(lake, settings.catalog, raw, [DAY])

    faulty_api.set_faults(ApiFaults())
    fetch_day(client(faulty_api), raw, "transactions", DAY)
    pipeline.load_bronze(lake, settings.catalog, raw, [DAY])
    pipeline.build_silver(lake, settings.catalog, [DAY])
    ids = silver_ids(lake, settings)
    assert len(ids) == len(set(ids)) == 60
    assert all(raw.is_complete(b) for b in raw.batches("bnpl", "transactions", DAY))  # the cut-off one: abandoned


def test_malformed_records_are_quarantined_and_received_equals_accepted_plus_quarantined(lake, settings, faulty_api):
    faults = ApiFaults(malformed_rate=0.04, drift=True)
    faulty_api.set_faults(faults)
    served = transactions_served(faulty_api.config, faults, DAY)
    bad = [r for r in served if malformed_kind(r)]
    assert bad, "the fault switch should corrupt some records"
    raw = local_raw_zone(settings.raw_root)
    fetch_day(client(faulty_api), raw, "transactions", DAY)
    result = pipeline.load_bronze(lake, settings.catalog, raw, [DAY], max_reject_rate=0.10)

    assert result.extra["records_received"] == len(served)
    assert result.extra["records_quarantined"] == len(bad)
    assert result.extra["records_accepted"] + result.extra["records_quarantined"] == len(served)
    assert "channel" in result.extra["unknown_fields"] and "loyalty_points" in result.extra["unknown_fields"]
    reasons = [
        r[0] for r in lake.sql(f"SELECT reason FROM {settings.catalog}.bronze.quarantine_transactions").collect()
    ]
    assert len(reasons) == len(bad) and all(reasons)
    # Drifted fields stay in the raw zone, untouched.
    (batch,) = raw.batches("bnpl", "transactions", DAY)
    first_file = raw.manifest(batch).files[0]
    assert b'"loyalty_points"' in raw.storage.read_bytes(f"{batch.key}/{first_file}")


def test_a_batch_past_the_reject_threshold_fails_and_stays_pending(lake, settings, faulty_api):
    faults = ApiFaults(malformed_rate=0.5)
    faulty_api.set_faults(faults)
    served = transactions_served(faulty_api.config, faults, DAY)
    bad = sum(1 for r in served if malformed_kind(r))
    raw = local_raw_zone(settings.raw_root)
    batch, _ = fetch_day(client(faulty_api), raw, "transactions", DAY)
    with pytest.raises(pipeline.BadInputError) as failure:
        pipeline.load_bronze(lake, settings.catalog, raw, [DAY], max_reject_rate=0.05)
    assert f"raw batch {batch.key}: {bad} of {len(served)} records refused" in str(failure.value)
    assert raw.pending("bnpl", "transactions") == [batch]
