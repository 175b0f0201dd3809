"""Freshness: Dagster's FreshnessPolicy on every table asset (from its spec), and the project's check of what Dagster
cannot see, commits made outside it, recorded by a sensor from table metadata against a real instance."""

from __future__ import annotations

import datetime as dt

import dagster as dg
import pytest

from etr_assets.definitions import build_definitions, defs
from etr_assets.defs.common import table_key
from etr_assets.lake.metadata import load_table
from etr_assets.lake.specs import QualityRules, SpecError
from etr_assets.tables import ALL_SPECS
from etr_assets.tables.entities import BRONZE_MERCHANTS

DAY = "2025-01-02"


def table_assets() -> set[dg.AssetKey]:
    """The assets that write a table: every declared source's bronze and histories, and the Python layers."""
    return {key for a in defs.assets for key in a.keys if key.path[0] != "raw"}


RAW_AND_BRONZE = [dg.AssetKey(["raw", "bnpl_merchants"]), table_key(BRONZE_MERCHANTS)]


def test_every_table_asset_declares_its_specs_freshness_window():
    graph = defs.resolve_asset_graph()
    policies = [graph.get(table_key(s)).freshness_policy for s in ALL_SPECS if graph.has(table_key(s))]
    assert len(policies) == len(table_assets()) and {p.fail_window.to_timedelta() for p in policies} == {
        dt.timedelta(hours=36)
    }
    with pytest.raises(SpecError, match="under a minute"):
        QualityRules(freshness_window=dt.timedelta(seconds=30))


def tick(sensor, instance, cursor=None):
    return sensor(dg.build_sensor_context(instance=instance, cursor=cursor))


def verdicts(result) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.asset_key.to_user_string(): e for e in result.asset_events}


@pytest.mark.slow  # two pipeline materializations: about 40 s here
def test_commits_outside_dagster_are_reported_and_dagsters_own_are_not(lake, settings):
    pipeline = build_definitions(settings)
    resources = pipeline.get_repository_def().get_top_level_resources()
    sensor = pipeline.resolve_sensor_def("commits_outside_dagster")
    bronze, qualified = table_key(BRONZE_MERCHANTS).to_user_string(), BRONZE_MERCHANTS.qualified(settings.catalog)
    with dg.instance_for_test() as instance:

        def materialize():
            assets = list(pipeline.assets)
            assert dg.materialize(
                assets, selection=RAW_AND_BRONZE, resources=resources, partition_key=DAY, instance=instance
            ).success

        materialize()
        first = tick(sensor, instance)
        assert isinstance(first, dg.SensorResult) and len(first.asset_events) == len(table_assets())  # each once
        assert all(e.passed for e in first.asset_events)  # Dagster's commit, and tables never written
        assert isinstance(tick(sensor, instance, first.cursor), dg.SkipReason)  # nothing changed

        # Another tool appends; a manifest rewrite (no rows changed) is not a change of data.
        lake.sql(f"INSERT INTO {qualified} SELECT * FROM {qualified} LIMIT 1")
        outside = load_table(settings, BRONZE_MERCHANTS).current_snapshot().snapshot_id
        lake.sql(f"CALL {settings.catalog}.system.rewrite_manifests('{BRONZE_MERCHANTS.identifier}')")
        second = tick(sensor, instance, first.cursor)
        (warned,) = second.asset_events
        assert warned.asset_key.to_user_string() == bronze and not warned.passed
        assert warned.severity == dg.AssetCheckSeverity.WARN
        assert warned.metadata["violations"].value == 1
        assert (
            f"append {outside} at " in warned.metadata["detail"].value
            and "(+1/-0 rows)" in warned.metadata["detail"].value
        )

        # The check run on demand (the UI's Execute) says the same.
        key = dg.AssetCheckKey(table_key(BRONZE_MERCHANTS), "commits_outside_dagster")
        check = next(c for c in pipeline.asset_checks if key in c.check_keys)
        run = dg.materialize([check], selection=dg.AssetSelection.checks(check), instance=instance)
        (evaluation,) = run.get_asset_check_evaluations()
        assert not evaluation.passed and str(outside) in evaluation.metadata["detail"].value

        # While a run is in progress its commits may not be recorded yet: no verdict.
        busy = instance.add_run(dg.DagsterRun(job_name="etr_pipeline", status=dg.DagsterRunStatus.STARTED))
        assert "a run is in progress" in tick(sensor, instance, second.cursor).skip_message
        instance.delete_run(busy.run_id)

        # Dagster writes the table again: its commit is recorded, the outside one is behind it.
        materialize()
        third = tick(sensor, instance, second.cursor)
        assert [(e.asset_key.to_user_string(), e.passed) for e in third.asset_events] == [(bronze, True)]
