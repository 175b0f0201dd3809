"""The pending-batch sensor, evaluated against a real raw zone on disk."""

import datetime as dt

from dagster import AssetKey, SensorResult, SkipReason, build_sensor_context

from etr_assets.defs.assets import build_pending_batches_sensor
from etr_assets.defs.resources import RawZoneResource
from etr_assets.settings import Settings
from etr_assets.sources.raw_zone import local_raw_zone


def test_reports_and_reruns_only_batches_pending_past_the_threshold(tmp_path):
    settings = Settings(home=tmp_path, pending_alert_hours=6)
    raw = local_raw_zone(settings.raw_root)
    now = dt.datetime.now(dt.UTC)
    old_sealed = raw.start_batch("bnpl", "transactions", dt.date(2025, 1, 2), now=now - dt.timedelta(hours=8))
    raw.seal(old_sealed, [], 0)
    old_cut_off = raw.start_batch("bnpl", "customers", dt.date(2025, 1, 3), now=now - dt.timedelta(hours=7))
    recent = raw.start_batch("bnpl", "transactions", dt.date(2025, 1, 4), now=now - dt.timedelta(hours=1))
    raw.seal(recent, [], 0)
    done = raw.start_batch("bnpl", "merchants", dt.date(2025, 1, 1), now=now - dt.timedelta(days=2))
    raw.seal(done, [], 0)
    raw.mark_complete(done)

    sensor = build_pending_batches_sensor(settings)
    with build_sensor_context(resources={"raw_zone": RawZoneResource(root=settings.raw_root)}) as context:
        result = sensor(context)
    assert isinstance(result, SensorResult)
    requests = {r.run_key: r for r in result.run_requests}
    assert set(requests) == {old_sealed.key, old_cut_off.key}
    downloaded = requests[old_sealed.key]
    assert downloaded.partition_key == "2025-01-02"
    assert AssetKey(["raw", "bnpl_transactions"]) not in downloaded.asset_selection  # reload, no refetch
    assert AssetKey(["bronze", "bnpl_transactions_raw"]) in downloaded.asset_selection
    cut_off = requests[old_cut_off.key]
    assert cut_off.asset_selection[0] == AssetKey(["raw", "bnpl_customers"])  # download again
    assert AssetKey(["landing", "customers"]) in cut_off.asset_selection


def test_skips_with_a_reason_when_nothing_is_stale(tmp_path):
    settings = Settings(home=tmp_path)
    sensor = build_pending_batches_sensor(settings)
    with build_sensor_context(resources={"raw_zone": RawZoneResource(root=settings.raw_root)}) as context:
        result = sensor(context)
    assert isinstance(result, SkipReason) and "no raw batch pending longer than 6 h" in result.skip_message


def test_every_declared_source_is_watched_without_a_list_kept_by_hand(tmp_path):
    """The suite's second API (declared in YAML only): its cut-off batches are fetched again, its histories rebuilt."""
    settings = Settings(home=tmp_path, pending_alert_hours=6)
    raw = local_raw_zone(settings.raw_root)
    old = dt.datetime.now(dt.UTC) - dt.timedelta(hours=9)
    stores = raw.start_batch("stores", "stores", dt.date(2025, 1, 2), now=old)
    checkins = raw.start_batch("stores", "checkins", dt.date(2025, 1, 2), now=old)
    raw.seal(checkins, [], 0)

    sensor = build_pending_batches_sensor(settings)
    with build_sensor_context(resources={"raw_zone": RawZoneResource(root=settings.raw_root)}) as context:
        requests = {r.run_key: r for r in sensor(context).run_requests}
    assert requests[stores.key].asset_selection == [
        AssetKey(["raw", "stores_stores"]),
        AssetKey(["bronze", "stores_stores"]),
        AssetKey(["landing", "stores_stores"]),
    ]
    assert requests[checkins.key].asset_selection == [AssetKey(["bronze", "stores_checkins"])]
