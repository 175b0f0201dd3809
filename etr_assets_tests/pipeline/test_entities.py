"""Customers from the real synthetic API through raw, bronze and SCD2 landing, days applied out of order."""

from __future__ import annotations

import datetime as dt

import pytest

from etr_assets.pipeline import entities
from etr_assets.sources.fetch import fetch_day
from etr_assets.sources.raw_zone import local_raw_zone
from etr_assets.sources.synthetic_api import customers_as_of
from etr_assets.tables.entities import LANDING_CUSTOMERS
from etr_assets_tests.models import TRACKED, in_order_history
from etr_assets_tests.sources.clients import bnpl_client
from etr_assets_tests.sources.raw_parts import write_part

DAYS = [dt.date(2024, 1, 20), dt.date(2024, 2, 10), dt.date(2024, 3, 5), dt.date(2024, 4, 1)]


def landing_history(spark, catalog):
    rows = spark.table(LANDING_CUSTOMERS.qualified(catalog)).collect()
    return rows, {(r["customer_id"], *(r[c] for c in TRACKED), r["_valid_from"], r["_valid_to"]) for r in rows}


@pytest.mark.slow
def test_customer_history_is_the_same_whatever_order_days_arrive_in(lake, settings, api):
    raw = local_raw_zone(settings.raw_root)
    client = bnpl_client(api.url, api.config.token, page_size=500)
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
    assert all(
        r["_source_file"].endswith(".jsonl") and r["_batch_id"][:10] in {d.isoformat() for d in DAYS} for r in rows
    )

    # Replaying a day (even as a new download) changes nothing and commits nothing.
    snapshots = lake.sql(f"SELECT count(*) FROM {LANDING_CUSTOMERS.qualified(settings.catalog)}.snapshots").first()[0]
    fetch_day(client, raw, "customers", DAYS[1])
    entities.load_bronze(lake, settings.catalog, raw, entities.CUSTOMERS, [DAYS[1]])
    result = entities.build_landing(lake, settings.catalog, entities.CUSTOMERS, [DAYS[1]])
    assert not result.changed
    assert landing_history(lake, settings.catalog)[1] == history
    assert (
        lake.sql(f"SELECT count(*) FROM {LANDING_CUSTOMERS.qualified(settings.catalog)}.snapshots").first()[0]
        == snapshots
    )


@pytest.mark.slow
def test_customer_profiles_use_the_version_valid_at_the_end_of_each_day(lake, settings, api):
    raw = local_raw_zone(settings.raw_root)
    client = bnpl_client(api.url, api.config.token, page_size=500)
    for day in DAYS[:2]:
        fetch_day(client, raw, "customers", day)
        fetch_day(client, raw, "transactions", day)
    entities.load_bronze(lake, settings.catalog, raw, entities.CUSTOMERS, DAYS[:2])
    entities.build_landing(lake, settings.catalog, entities.CUSTOMERS, DAYS[:2])
    from etr_assets.pipeline import transactions

    transactions.load_bronze(lake, settings.catalog, raw, DAYS[:2])
    transactions.build_silver(lake, settings.catalog, DAYS[:2])
    # Two days weeks apart: the second's activity starts from every earlier silver day, the day before being unbuilt.
    activity = entities.build_customer_activity(lake, settings.catalog, DAYS[:2])
    assert activity.extra["days_summed_from_all_of_silver"] == DAYS[1].isoformat()
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
    client = bnpl_client(api.url, api.config.token, page_size=500)
    fetch_day(client, raw, "merchants", DAYS[0])  # downloaded, then the run died before loading it
    fetch_day(client, raw, "merchants", DAYS[1])
    result = entities.load_bronze(lake, settings.catalog, raw, entities.MERCHANTS, [DAYS[1]])
    assert result.extra["finished_pending_days"] == DAYS[0].isoformat()
    assert raw.pending("bnpl", "merchants") == []
    days = {
        r[0] for r in lake.sql(f"SELECT DISTINCT _as_of FROM {settings.catalog}.bronze.bnpl_merchants_raw").collect()
    }
    assert days == set(DAYS[:2])


@pytest.mark.slow
def test_a_customer_whose_record_is_quarantined_keeps_its_version_and_is_not_closed(lake, settings, api):
    """A refused record says "we do not know" about its key, never "gone": no close on that day, no reopen after."""
    raw = local_raw_zone(settings.raw_root)
    days = [dt.date(2024, 5, 1), dt.date(2024, 5, 2)]  # unchanged on both; refused on the second
    snapshots = [customers_as_of(api.config, day) for day in days]
    as_sets = [{tuple(sorted(c.items())) for c in snapshot} for snapshot in snapshots]
    held = sorted(dict(c)["customer_id"] for c in set.intersection(*as_sets))[1]
    for day, snapshot in zip(days, snapshots):
        records = [
            dict(c, risk_segment="UNKNOWN") if day == days[1] and c["customer_id"] == held else c for c in snapshot
        ]
        batch = raw.start_batch("bnpl", "customers", day)
        raw.seal(batch, [write_part(raw, batch, 1, records)], len(records))
        entities.load_bronze(lake, settings.catalog, raw, entities.CUSTOMERS, [day])
        entities.build_landing(lake, settings.catalog, entities.CUSTOMERS, [day])  # extends history day by day

    def versions_of(key):
        return lake.sql(
            f"SELECT _valid_from, _valid_to, _is_current FROM {LANDING_CUSTOMERS.qualified(settings.catalog)} "
            f"WHERE customer_id = {key}"
        ).collect()

    (version,) = versions_of(held)
    assert version["_is_current"] and version["_valid_to"] is None
    current = lake.sql(
        f"SELECT count(*) FROM {LANDING_CUSTOMERS.qualified(settings.catalog)} WHERE _is_current"
    ).first()[0]
    assert current == len(snapshots[-1])
    (quarantined,) = lake.sql(f"SELECT * FROM {settings.catalog}.bronze.quarantine_customers").collect()
    assert quarantined["customer_id"] == held
    assert quarantined["reason"] == (
        f"out of range: risk_segment is LOW, MEDIUM or HIGH; customer_id {held} is in the snapshot: "
        "its history stays as it was"
    )

    # The recompute from every observation (late or reloaded days take that path) agrees.
    result = entities.build_landing(lake, settings.catalog, entities.CUSTOMERS, days, full_refresh=True)
    assert not result.changed and len(versions_of(held)) == 1


def plant_customers(raw, day, records):
    batch = raw.start_batch("bnpl", "customers", day)
    raw.seal(batch, [write_part(raw, batch, 1, records)], len(records))
    return batch


@pytest.mark.slow
def test_a_refused_batch_waits_without_blocking_later_days_and_lands_in_place_once_fixed(lake, settings, api):
    from etr_assets.errors import BadInputError

    raw = local_raw_zone(settings.raw_root)
    client = bnpl_client(api.url, api.config.token, page_size=500)
    days = [dt.date(2024, 6, 1), dt.date(2024, 6, 2), dt.date(2024, 6, 3)]
    truth = customers_as_of(api.config, days[0])
    broken = plant_customers(
        raw, days[0], [dict(c, risk_segment="?") if i % 10 == 0 else c for i, c in enumerate(truth)]
    )
    with pytest.raises(BadInputError, match=f"raw batch {broken.key}: .* records refused"):
        entities.load_bronze(lake, settings.catalog, raw, entities.CUSTOMERS, [days[0]])

    fetch_day(client, raw, "customers", days[1])
    later = entities.load_bronze(lake, settings.catalog, raw, entities.CUSTOMERS, [days[1]])
    assert later.rows_by_day == {days[1].isoformat(): len(customers_as_of(api.config, days[1]))}
    assert later.extra["refused_pending_batches"] == broken.key
    assert any(w.startswith(f"skipped, still pending: raw batch {broken.key}") for w in later.warnings)
    assert [b.key for b in raw.pending("bnpl", "customers")] == [broken.key]
    entities.build_landing(lake, settings.catalog, entities.CUSTOMERS, [days[1]])

    # The source fixes day 1 (a new download); the next run loads it with day 3 and history takes it in place.
    fetch_day(client, raw, "customers", days[0])
    fetch_day(client, raw, "customers", days[2])
    entities.load_bronze(lake, settings.catalog, raw, entities.CUSTOMERS, [days[2]])
    result = entities.build_landing(lake, settings.catalog, entities.CUSTOMERS, [days[2]])
    assert result.method == "window", result.reason  # day 1 arrived after day 2: only the keys it changes
    assert landing_history(lake, settings.catalog)[1] == in_order_history(api.config, days)
    assert raw.pending("bnpl", "customers") == [] and raw.outcome(broken) == "superseded"


def test_abandoning_a_refused_batch_is_audited_and_later_runs_no_longer_wait_for_it(lake, settings, api):
    from etr_assets.errors import BadInputError
    from etr_assets.lake.bookkeeping import TABLE_CHANGES
    from etr_assets.lake.bronze import abandon_batch

    raw = local_raw_zone(settings.raw_root)
    day = dt.date(2024, 6, 1)
    broken = plant_customers(raw, day, [dict(c, risk_segment="?") for c in customers_as_of(api.config, day)[:20]])
    with pytest.raises(BadInputError, match="needs a reason|no pending raw batch 'nope'"):
        abandon_batch(lake, settings.catalog, raw, entities.CUSTOMERS.raw, "nope", "x")

    abandon_batch(lake, settings.catalog, raw, entities.CUSTOMERS.raw, broken.batch_id, "provider sent junk", "run-1")

    (audit,) = lake.sql(f"SELECT * FROM {TABLE_CHANGES.qualified(settings.catalog)}").collect()
    assert (audit["action"], audit["run_id"]) == ("ABANDON_BATCH", "run-1")
    assert audit["reason"] == f"raw batch {broken.key} abandoned: provider sent junk"
    assert raw.pending("bnpl", "customers") == [] and raw.outcome(broken) == "abandoned"
    assert raw.storage.exists(f"{broken.key}/part-00001.jsonl")  # kept as evidence
    with pytest.raises(BadInputError, match="no downloaded raw batch for 2024-06-01"):  # never chosen again
        entities.load_bronze(lake, settings.catalog, raw, entities.CUSTOMERS, [day])
