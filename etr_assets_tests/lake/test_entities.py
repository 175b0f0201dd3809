"""Customers from the real synthetic API through raw, bronze and SCD2 landing, days applied out of order."""

from __future__ import annotations

import datetime as dt

import pytest

from etr_assets.lake import entities
from etr_assets.sources.api_client import ApiClient
from etr_assets.sources.fetch import fetch_day
from etr_assets.sources.raw_zone import local_raw_zone
from etr_assets.sources.synthetic_api import customers_as_of
from etr_assets.tables.entities import LANDING_CUSTOMERS
from etr_assets_tests.models import TRACKED, in_order_history

DAYS = [dt.date(2024, 1, 20), dt.date(2024, 2, 10), dt.date(2024, 3, 5), dt.date(2024, 4, 1)]




def landing_history(spark, catalog):
    rows = spark.table(LANDING_CUSTOMERS.qualified(catalog)).collect()
    return rows, {(r["customer_id"], *(r[c] for c in TRACKED), r["_valid_from"], r["_valid_to"]) for r in rows}


@pytest.mark.slow
def test_customer_history_is_the_same_whatever_order_days_arrive_in(lake, settings, api):
    raw = local_raw_zone(settings.raw_root)
    client = ApiClient(api.url, api.config.token, page_size=500)
    for day in (DAYS[2], DAYS[0], DAYS[3], DAYS[1]):  # a backfill of older days after newer ones
        fetch_day(client, raw, "customers", day)
        entities.load_bronze(lake, settings.catalog, raw, entities.CUSTOMERS, [day])
        entities.build_landing(lake, settings.catalog, entities.CUSTOMERS, [day])

    rows, history = landing_history(lake, settings.catalog)
    assert history == in_order_history(api.config, DAYS)
    current = [r for r in rows if r["_is_current"]]
    assert len(current) == len({r["customer_id"] for r in current}) == len(customers_as_of(api.config, DAYS[-1]))
    assert len(rows) > len(current)  # some customers changed between the days
    changed_to_null = {r["customer_id"] for r in rows if r["phone"] is None or r["email"] is None}
    assert changed_to_null, "the synthetic data should include NULL values in history"
    assert all(r["_source_file"].endswith(".jsonl") and r["_batch_id"][:10] in {d.isoformat() for d in DAYS} for r in rows)

    # Replaying a day (even as a new download) changes nothing and commits nothing.
    snapshots = lake.sql(f"SELECT count(*) FROM {LANDING_CUSTOMERS.qualified(settings.catalog)}.snapshots").first()[0]
    fetch_day(client, raw, "customers", DAYS[1])
    entities.load_bronze(lake, settings.catalog, raw, entities.CUSTOMERS, [DAYS[1]])
    result = entities.build_landing(lake, settings.catalog, entities.CUSTOMERS, [DAYS[1]])
    assert not result.changed
    assert landing_history(lake, settings.catalog)[1] == history
    assert lake.sql(f"SELECT count(*) FROM {LANDING_CUSTOMERS.qualified(settings.catalog)}.snapshots").first()[0] == snapshots


def test_customer_profiles_use_the_version_valid_at_the_end_of_each_day(lake, settings, api):
    raw = local_raw_zone(settings.raw_root)
    client = ApiClient(api.url, api.config.token, page_size=500)
    for day in DAYS[:2]:
        fetch_day(client, raw, "customers", day)
        fetch_day(client, raw, "transactions", day)
    entities.load_bronze(lake, settings.catalog, raw, entities.CUSTOMERS, DAYS[:2])
    entities.build_landing(lake, settings.catalog, entities.CUSTOMERS, DAYS[:2])
    from etr_assets.lake import transactions

    transactions.load_bronze(lake, settings.catalog, raw, DAYS[:2])
    transactions.build_silver(lake, settings.catalog, DAYS[:2])
    result = entities.build_customer_profiles(lake, settings.catalog, DAYS[:2])

    for day in DAYS[:2]:
        truth = {c["customer_id"]: c for c in customers_as_of(api.config, day)}
        profiles = {
            r["customer_id"]: r
            for r in lake.sql(
                f"SELECT * FROM {settings.catalog}.gold.customer_profiles WHERE as_of_date = DATE'{day}'"
            ).collect()
        }
        assert result.rows_by_day[day.isoformat()] == len(truth) == len(profiles)
        for key in list(truth)[:200]:
            assert (profiles[key]["email"], profiles[key]["city"]) == (truth[key]["email"], truth[key]["city"])
    spent = lake.sql(
        f"SELECT sum(transactions) FROM {settings.catalog}.gold.customer_profiles WHERE as_of_date = DATE'{DAYS[1]}'"
    ).first()[0]
    assert spent == 2 * settings.api_transactions_per_day  # every silver transaction up to the day, counted once


def test_a_run_first_finishes_batches_an_earlier_run_left_pending(lake, settings, api):
    raw = local_raw_zone(settings.raw_root)
    client = ApiClient(api.url, api.config.token, page_size=500)
    fetch_day(client, raw, "merchants", DAYS[0])  # downloaded, then the run died before loading it
    fetch_day(client, raw, "merchants", DAYS[1])
    result = entities.load_bronze(lake, settings.catalog, raw, entities.MERCHANTS, [DAYS[1]])
    assert result.extra["finished_pending_days"] == DAYS[0].isoformat()
    assert raw.pending("bnpl", "merchants") == []
    days = {r[0] for r in lake.sql(f"SELECT DISTINCT _as_of FROM {settings.catalog}.bronze.bnpl_merchants_raw").collect()}
    assert days == set(DAYS[:2])
