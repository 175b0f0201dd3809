"""The propagate_corrections sensor on a real Dagster instance of 130 daily partitions: a corrected silver day marks
exactly the gold days built on it as out of date, on each day's own check, and asks for the runs that fix them."""

from __future__ import annotations

import datetime as dt
import json

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
    from etr_assets.settings import Settings

    sensor, _ = build_propagation_sensor(Settings())
    return sensor(dg.build_sensor_context(instance=instance, cursor=cursor))


def flag_run(result) -> dg.RunRequest | None:
    return next((r for r in getattr(result, "run_requests", None) or [] if r.job_name == "flag_out_of_date"), None)


def rederive_runs(result) -> list[dg.RunRequest]:
    return [r for r in getattr(result, "run_requests", None) or [] if r.job_name == "rederive_gold"]


def record_flags(instance, request: dg.RunRequest) -> dict[tuple[str, str], object]:
    """Runs the flag job as the daemon would, then reads each day's latest up_to_date as the UI does."""
    from etr_assets.definitions import defs

    job = defs.resolve_job_def("flag_out_of_date")
    assert job.execute_in_process(run_config=request.run_config, instance=instance).success
    latest = {}
    for layer in (SUMMARY, ACTIVITY, PROFILES):
        key = dg.AssetCheckKey(table_key(LAYERS[layer].spec), "up_to_date")
        for record in instance.event_log_storage.get_asset_check_execution_history(key, limit=1000):
            evaluation = record.event.dagster_event.event_specific_data
            latest.setdefault((layer, evaluation.partition), evaluation)
    return latest


@pytest.mark.slow  # 130 days of five assets' events and the flag runs on a real instance: over 10 s
def test_a_correction_marks_exactly_the_days_built_on_it_and_asks_for_their_runs():
    with dg.DagsterInstance.ephemeral() as instance:
        for layer in ORDER:  # the lake built by ranges, as a backfill does
            built(instance, layer, *DAYS)
        assert skipped(tick(instance)) == "no gold day is out of date"

        corrected = DAYS[90]
        built(instance, SILVER, corrected)
        result = tick(instance)
        flags = record_flags(instance, flag_run(result))
        assert set(flags) == {(SUMMARY, corrected)} | {(t, d) for t in (ACTIVITY, PROFILES) for d in DAYS[90:]}
        assert all(not e.passed and e.severity == dg.AssetCheckSeverity.WARN for e in flags.values())
        last = flags[(ACTIVITY, DAYS[-1])]
        assert last.description.startswith("out of date: it carries") and last.target_materialization_data
        requests = {tuple(k.to_user_string() for k in r.asset_selection): r for r in rederive_runs(result)}
        assert requests[(SUMMARY,)].partition_key == corrected
        carried = requests[(ACTIVITY, PROFILES)]
        assert carried.partition_key_range == dg.PartitionKeyRange(corrected, DAYS[-1])  # one run, one commit each

        # A later tick before the runs start flags nothing again and asks for the same runs (same run keys).
        again = tick(instance, result.cursor)
        assert flag_run(again) is None and {r.run_key for r in again.run_requests} == {
            r.run_key for r in rederive_runs(result)
        }
        # While a re-derivation is under way (activity written, profiles not yet), nothing is judged: midway, the
        # days it has yet to write would look out of date again and be asked for twice.
        under_way = instance.add_run(
            dg.DagsterRun(job_name="rederive_gold", status=dg.DagsterRunStatus.STARTED, tags=carried.tags)
        )
        built(instance, ACTIVITY, *DAYS[90:])
        waiting = tick(instance, again.cursor)
        assert isinstance(waiting, dg.SkipReason) and f"run {under_way.run_id[:8]}" in waiting.skip_message
        instance.delete_run(under_way.run_id)

        # The runs re-derive the days: nothing is out of date, and the cursor forgets the flags.
        built(instance, SUMMARY, corrected)
        built(instance, PROFILES, *DAYS[90:])
        done = tick(instance, again.cursor)
        assert skipped(done) and json.loads(done.cursor)["flagged"] == []  # the cursor forgets the flags
        assert skipped(tick(instance, done.cursor)) == "no gold day is out of date"

        # The same day corrected again later is flagged again (a second evaluation of the day, in another run).
        built(instance, SILVER, corrected)
        later = tick(instance, done.cursor)
        assert (SUMMARY, corrected) in record_flags(instance, flag_run(later))

        # A flag run that failed flagged nothing: the next tick flags its days again, once.
        built(instance, SILVER, DAYS[100])
        flags = flag_run(first := tick(instance, later.cursor))
        failed = instance.add_run(
            dg.DagsterRun(job_name="flag_out_of_date", status=dg.DagsterRunStatus.FAILURE, run_config=flags.run_config)
        )
        again = flag_run(retry := tick(instance, first.cursor))
        assert again.run_config == flags.run_config and again.tags["etr/flags_again_after"] == failed.run_id
        instance.add_run(
            dg.DagsterRun(
                job_name="flag_out_of_date",
                status=dg.DagsterRunStatus.FAILURE,
                run_config=again.run_config,
                tags=again.tags,
            )
        )
        assert flag_run(tick(instance, retry.cursor)) is None  # a failed retry stays failed, in the UI


def skipped(result) -> str | None:
    """The tick's skip reason, whether the sensor returned a SkipReason or a SensorResult without runs."""
    if isinstance(result, dg.SkipReason):
        return result.skip_message
    return None if result.run_requests else result.skip_reason.skip_message


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


def up_to_date_verdicts(instance, layer: str) -> dict[str, list[dg.AssetCheckEvaluation]]:
    """Every evaluation of the layer's per-day up_to_date check, oldest first, by day."""
    key = dg.AssetCheckKey(table_key(LAYERS[layer].spec), "up_to_date")
    verdicts: dict[str, list] = {}
    for record in reversed(instance.event_log_storage.get_asset_check_execution_history(key, limit=1000)):
        evaluation = record.event.dagster_event.event_specific_data
        verdicts.setdefault(evaluation.partition, []).append(evaluation)
    return verdicts


@pytest.mark.slow  # the pipeline over 41 days, a late day, two corrections, their runs, and gold again: ~3 minutes
def test_a_late_day_and_corrections_40_days_back_leave_the_gold_a_build_in_order_gives(settings, lake, monkeypatch):
    """Each scenario of the issue on one lake (one 41-day build, the suite's longest): a day loaded after the days
    that follow it, then two corrections made before the first one's runs started, one of them 40 days back."""
    from etr_assets.definitions import build_definitions
    from etr_assets.defs.resources import SourceApiResource
    from etr_assets.sources.synthetic_api import ApiConfig, serve

    days, defs = DAYS[:41], build_definitions(settings)
    path = [
        dg.AssetKey(["raw", "bnpl_transactions"]),
        *(table_key(LAYERS[t].spec) for t in ("bronze/bnpl_transactions_raw", SILVER)),
    ]
    gold = [table_key(LAYERS[t].spec) for t in (SUMMARY, ACTIVITY, PROFILES)]

    def propagate(*results) -> str | None:
        """Each tick's re-derivation runs, launched once each (the daemon skips a run key it has launched), then
        ticks until nothing is out of date; returns the last cursor."""
        launched, cursor, pending = set(), None, list(results)
        for _ in range(4):
            for result in pending:
                for request in rederive_runs(result):
                    if request.run_key in launched:
                        continue
                    launched.add(request.run_key)
                    span = request.partition_key_range
                    first, last = (span.start, span.end) if span else (request.partition_key, request.partition_key)
                    launch(defs, instance, list(request.asset_selection), first, last)
                cursor = result.cursor
            result = tick(instance, cursor)
            if not rederive_runs(result):
                return result.cursor
            pending = [result]
        raise AssertionError(f"still out of date after 4 rounds: {[r.tags for r in rederive_runs(result)]}")

    # The provider re-sends a day with other data: its synthetic API of another seed, for that day only.
    with (
        serve(ApiConfig(seed=99, transactions_per_day=settings.api_transactions_per_day)) as api,
        dg.DagsterInstance.ephemeral() as instance,
    ):
        monkeypatch.setenv("ETR_API_TOKEN", api.config.token)
        corrected = {"bnpl_api": SourceApiResource(source="bnpl", base_url=api.url, page_size=1000)}
        everything = defs.resolve_job_def("etr_pipeline").asset_layer.selected_asset_keys
        derived_from = [k for k in everything if "merchants" not in k.path[-1]]  # what gold is built from

        # The API was down on the day before last: the last day ran, then that day, late, as the README says.
        late = days[-2]
        launch(defs, instance, derived_from, days[0], days[-3])
        launch(defs, instance, derived_from, days[-1], days[-1])
        (warned,) = up_to_date_verdicts(instance, ACTIVITY)[days[-1]]
        assert not warned.passed and f"{days[-1]} (no {late})" in warned.description
        launch(defs, instance, derived_from, late, late)
        result = tick(instance)
        assert {r.tags["etr/propagates"] for r in rederive_runs(result)} == {
            f"{ACTIVITY}, {PROFILES} {days[-1]}...{days[-1]}"
        }
        cursor = propagate(result)
        assert up_to_date_verdicts(instance, ACTIVITY)[days[-1]][-1].passed  # built again, from every day it needs

        # Two corrections in a row, the first 40 days back: the second arrives before the first's runs started.
        launch(defs, instance, path, days[0], days[0], corrected)
        first = tick(instance, cursor)
        launch(defs, instance, path, days[20], days[20], corrected)
        second = tick(instance, first.cursor)
        assert {r.tags["etr/propagates"] for r in rederive_runs(second)} == {
            f"{SUMMARY} {days[0]}...{days[0]}",
            f"{SUMMARY} {days[20]}...{days[20]}",
            f"{ACTIVITY}, {PROFILES} {days[0]}...{days[-1]}",
        }
        propagate(first, second)
        propagated = gold_rows(lake, settings.catalog)

        launch(defs, instance, gold, days[0], days[-1])  # gold built in order from the corrected silver
        in_order = gold_rows(lake, settings.catalog)
    assert propagated == in_order and all(propagated.values())
