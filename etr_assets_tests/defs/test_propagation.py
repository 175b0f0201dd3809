"""The propagate_corrections sensor on a real Dagster instance of 130 daily partitions: a corrected silver day marks
exactly the gold days built on it as out of date, on each day's own check, and asks for the runs that fix them."""

from __future__ import annotations

import datetime as dt

import dagster as dg
import pytest

from etr_assets.defs.common import table_key
from etr_assets.defs.propagation import build_propagation_sensor
from etr_assets.pipeline.layers import LAYERS
from etr_assets.pipeline.propagation import ACTIVITY, HISTORY, PROFILES, SILVER, SUMMARY

DAYS = [(dt.date(2025, 1, 1) + dt.timedelta(days=i)).isoformat() for i in range(130)]
ORDER = (SILVER, HISTORY, SUMMARY, ACTIVITY, PROFILES)


def built(instance, layer: str, *days: str) -> None:
    key = table_key(LAYERS[layer].spec)
    for day in days:
        instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=key, partition=day))


def tick(instance, cursor=None):
    return build_propagation_sensor()(dg.build_sensor_context(instance=instance, cursor=cursor))


def test_a_correction_marks_exactly_the_days_built_on_it_and_asks_for_their_runs():
    with dg.instance_for_test() as instance:
        for layer in ORDER:  # the lake built by ranges, as a backfill does
            built(instance, layer, *DAYS)
        assert isinstance(tick(instance), dg.SkipReason)

        corrected = DAYS[90]
        built(instance, SILVER, corrected)
        result = tick(instance)
        flagged = {(e.asset_key.to_user_string(), e.partition) for e in result.asset_events}
        assert flagged == {(SUMMARY, corrected)} | {(t, d) for t in (ACTIVITY, PROFILES) for d in DAYS[90:]}
        assert all(e.check_name == "up_to_date" and not e.passed for e in result.asset_events)
        assert all(e.severity == dg.AssetCheckSeverity.WARN for e in result.asset_events)
        activity = next(
            e for e in result.asset_events if e.partition == DAYS[-1] and e.asset_key.path[-1] == "customer_activity"
        )
        assert activity.description.startswith("out of date: it carries") and activity.target_materialization_data
        requests = {tuple(k.to_user_string() for k in r.asset_selection): r for r in result.run_requests}
        assert requests[(SUMMARY,)].partition_key == corrected
        carried = requests[(ACTIVITY, PROFILES)]
        assert carried.partition_key_range == dg.PartitionKeyRange(corrected, DAYS[-1])  # one run, one commit each

        # A later tick while the runs are under way flags nothing again and asks for the same runs (same run keys).
        again = tick(instance, result.cursor)
        assert not again.asset_events and {r.run_key for r in again.run_requests} == {
            r.run_key for r in result.run_requests
        }

        # The runs re-derive the days: nothing is out of date, and the cursor forgets the flags.
        built(instance, SUMMARY, corrected)
        built(instance, ACTIVITY, *DAYS[90:])
        built(instance, PROFILES, *DAYS[90:])
        done = tick(instance, again.cursor)
        assert isinstance(done, dg.SensorResult) and not done.run_requests and done.cursor == "[]"
        assert isinstance(tick(instance, done.cursor), dg.SkipReason)


def test_the_sensor_is_stopped_until_switched_on():
    from etr_assets.definitions import defs

    assert defs.resolve_sensor_def("propagate_corrections").default_status == dg.DefaultSensorStatus.STOPPED


# A correction end to end, with Spark: the sensor's runs leave the gold a build in order over the corrected data gives.


def gold_rows(lake, catalog: str) -> dict[str, set]:
    """Every row of each gold table but when it was computed."""
    tables = {}
    for layer in (SUMMARY, ACTIVITY, PROFILES):
        spec = LAYERS[layer].spec
        columns = ", ".join(c for c in spec.column_names if c != "_computed_at")
        tables[layer] = {tuple(r) for r in lake.sql(f"SELECT {columns} FROM {spec.qualified(catalog)}").collect()}
    return tables


def launch(defs, instance, keys, first: str, last: str, resources=None) -> None:
    """What the daemon does with a run request: the assets over the range, as one run (a single-run backfill)."""
    from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

    every = defs.get_repository_def().get_top_level_resources() | (resources or {})
    selected = [a for a in defs.assets if any(k in keys for k in a.keys)]
    tags = {ASSET_PARTITION_RANGE_START_TAG: first, ASSET_PARTITION_RANGE_END_TAG: last}
    assert dg.materialize(selected, selection=keys, resources=every, instance=instance, tags=tags).success


@pytest.mark.slow  # the whole pipeline over 41 days, a correction, its runs, and gold again: about 2.5 minutes
def test_a_correction_40_days_back_leaves_the_gold_a_build_in_order_gives(settings, lake, monkeypatch):
    from etr_assets.definitions import build_definitions
    from etr_assets.defs.resources import SourceApiResource
    from etr_assets.sources.synthetic_api import ApiConfig, serve

    days, defs = DAYS[:41], build_definitions(settings)
    corrected_day = days[0]  # 40 days before the newest
    path = [
        dg.AssetKey(["raw", "bnpl_transactions"]),
        *(table_key(LAYERS[t].spec) for t in ("bronze/bnpl_transactions_raw", SILVER)),
    ]
    gold = [table_key(LAYERS[t].spec) for t in (SUMMARY, ACTIVITY, PROFILES)]
    # The provider re-sends the day with other data: its synthetic API of another seed, for that day only.
    with (
        serve(ApiConfig(seed=99, transactions_per_day=settings.api_transactions_per_day)) as api,
        dg.instance_for_test() as instance,
    ):
        monkeypatch.setenv("ETR_API_TOKEN", api.config.token)
        corrected = {"bnpl_api": SourceApiResource(source="bnpl", base_url=api.url, page_size=1000)}
        everything = defs.resolve_job_def("etr_pipeline").asset_layer.selected_asset_keys
        derived_from = [k for k in everything if "merchants" not in k.path[-1]]  # what gold is built from
        launch(defs, instance, derived_from, days[0], days[-1])
        launch(defs, instance, path, corrected_day, corrected_day, corrected)

        result = tick(instance)
        assert {r.tags["etr/propagates"] for r in result.run_requests} == {
            f"{SUMMARY} {corrected_day}...{corrected_day}",
            f"{ACTIVITY}, {PROFILES} {corrected_day}...{days[-1]}",
        }
        for request in result.run_requests:
            span = request.partition_key_range
            first, last = (span.start, span.end) if span else (request.partition_key, request.partition_key)
            launch(defs, instance, list(request.asset_selection), first, last)
        assert not getattr(tick(instance, result.cursor), "run_requests", None)  # nothing left out of date
        propagated = gold_rows(lake, settings.catalog)

        launch(defs, instance, gold, days[0], days[-1])  # gold built in order from the corrected silver
        in_order = gold_rows(lake, settings.catalog)
    assert propagated == in_order and all(propagated.values())
