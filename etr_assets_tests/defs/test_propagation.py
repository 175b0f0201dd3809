"""The propagate_corrections sensor on a real Dagster instance of 130 daily partitions: a corrected silver day marks
exactly the gold days built on it as out of date, on each day's own check, and asks for the runs that fix them."""

from __future__ import annotations

import datetime as dt

import dagster as dg

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
