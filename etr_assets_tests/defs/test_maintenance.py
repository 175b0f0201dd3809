"""Health checks, the maintenance job and its sensor through Dagster, on real Iceberg tables.

Two tables are made once for the module (Spark is slow on a shared machine): `silver.messy` (many tiny appends
to one day: compaction is due) and `silver.tidy` (one write per day: healthy). The last test maintains `messy`.
"""

from __future__ import annotations

import uuid

import pytest
from dagster import (
    AssetSelection,
    AssetSpec,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    Definitions,
    SensorResult,
    SkipReason,
    build_sensor_context,
    define_asset_job,
    instance_for_test,
)

from etr_assets.definitions import build_definitions
from etr_assets.defs.common import table_key, table_pool
from etr_assets.defs.maintenance import (
    build_maintenance,
    maintenance_pool,
    tables_config,
)
from etr_assets.defs.resources import build_resources
from etr_assets.instance import pool_names
from etr_assets.lake.bookkeeping import TABLE_MAINTENANCE_LOG
from etr_assets.lake.evolve import ensure_table
from etr_assets.lake.session import attach_catalog
from etr_assets.lake.specs import Column, HealthThresholds, TableSpec
from etr_assets.settings import Settings
from etr_assets.tables import ALL_SPECS
from etr_assets_tests.conftest import TRANSACTIONS_PER_DAY

COLUMNS = (Column("id", "bigint"), Column("day", "date"))
# A handful of tiny files counts as worth merging here (the default floor is 16 mergeable files).
FLOOR = HealthThresholds(min_mergeable_small_files=2)
MESSY = TableSpec("silver", "messy", "many tiny appends", COLUMNS, partition_by=("days(day)",), health=FLOOR)
TIDY = TableSpec("silver", "tidy", "one write per day", COLUMNS, partition_by=("days(day)",), health=FLOOR)
TEST_SPECS = (MESSY, TIDY)


@pytest.fixture(scope="module")
def lake_settings(spark, tmp_path_factory) -> Settings:
    settings = Settings(
        home=tmp_path_factory.mktemp("maintenance") / "etr",
        catalog=f"t{uuid.uuid4().hex[:12]}",
        api_transactions_per_day=TRANSACTIONS_PER_DAY,
    )
    attach_catalog(spark, settings)
    for spec in TEST_SPECS:
        ensure_table(spark, settings.catalog, spec)
    for n in range(6):
        spark.sql(f"INSERT INTO {MESSY.qualified(settings.catalog)} VALUES ({n}, DATE'2025-01-01')")
    spark.sql(f"INSERT INTO {TIDY.qualified(settings.catalog)} SELECT id, DATE'2025-01-01' FROM range(6)")
    return settings


def test_every_table_asset_gets_a_health_check_and_every_table_a_pooled_maintenance_step(tmp_path):
    defs = build_definitions(Settings(home=tmp_path))
    table_assets = {key for a in defs.assets for key in a.keys if any(key == table_key(s) for s in ALL_SPECS)}
    health_checks = {
        spec.asset_key: spec for c in defs.asset_checks for spec in c.check_specs if spec.name == "table_health"
    }
    writers = {key for a in defs.assets for key in a.keys if key.path[0] != "raw"}  # every asset but the raw fetches
    assert set(health_checks) == table_assets == writers
    assert not any(spec.blocking for spec in health_checks.values())

    job = defs.resolve_job_def("table_maintenance")
    pools = {op.name: op.pool for op in job.graph.iterate_op_defs() if op.name.startswith("maintain__")}
    assert len(pools) == len(ALL_SPECS)
    # Local profile: maintenance takes the table's writer pool, so it never overlaps a write or another maintenance.
    assert pools["maintain__silver__bnpl_transactions_clean"] == "iceberg_silver_bnpl_transactions_clean"
    assert pools["maintain__bronze__quarantine_transactions"] == "iceberg_bronze_bnpl_transactions_raw"  # its writer
    assert set(pools.values()) <= set(pool_names(defs))  # ./dev creates them up front

    shared = Settings(profile="aws", bucket="b", api_url="https://api.example.test")
    silver = next(s for s in ALL_SPECS if s.identifier == "silver.bnpl_transactions_clean")
    assert table_pool(shared, silver) is None  # writers run concurrently on Glue...
    assert (
        maintenance_pool(shared, silver) == "iceberg_maintenance_silver_bnpl_transactions_clean"
    )  # ...maintenance not

    sensor = defs.resolve_sensor_def("table_health_maintenance")
    schedule = defs.resolve_schedule_def("table_maintenance_weekly")
    assert sensor.job_name == schedule.job_name == "table_maintenance"
    assert "WARN or ERROR" in sensor.description and "Every Sunday" in schedule.description
    assert schedule.cron_schedule == "0 3 * * 0"


def health_checks_definitions(settings: Settings) -> Definitions:
    maintenance = build_maintenance(settings, list(TEST_SPECS), specs=TEST_SPECS)
    return Definitions(
        assets=[AssetSpec(table_key(spec), description=spec.description) for spec in TEST_SPECS],
        asset_checks=maintenance.checks,
        jobs=[define_asset_job("health", selection=AssetSelection.checks(*maintenance.checks)), maintenance.job],
        resources={"lake": build_resources(settings)["lake"]},
    )


def test_the_health_check_passes_on_a_tidy_table_and_warns_on_a_messy_one(lake_settings):
    defs = health_checks_definitions(lake_settings)
    result = defs.resolve_job_def("health").execute_in_process(instance=DagsterInstance.ephemeral())
    assert result.success  # non-blocking: a warning does not fail the run
    evaluations = {e.asset_key.path[-1]: e for e in result.get_asset_check_evaluations()}
    tidy, messy = evaluations["tidy"], evaluations["messy"]
    assert tidy.passed and tidy.metadata["data_files"].value == 1
    assert not messy.passed and messy.severity.value == "WARN"
    assert messy.metadata["data_files"].value == 6 and messy.metadata["mergeable_small_files"].value == 5
    assert "mergeable small-file share 0.833 > 0.5" in messy.metadata["reasons"].value
    assert messy.metadata["snapshot_id"].value.isdigit()  # a string: Iceberg ids exceed 32 bits


def test_a_sensor_tick_requests_maintenance_for_exactly_the_unhealthy_table(lake_settings):
    sensor = build_maintenance(lake_settings, [], specs=TEST_SPECS).sensor
    with instance_for_test() as instance:
        first = sensor(build_sensor_context(instance=instance))
        again = sensor(build_sensor_context(instance=instance))
        assert isinstance(first, SensorResult)
        (request,) = first.run_requests
        assert request.run_config == tables_config(["silver.messy"])
        assert request.tags["etr/table"] == "silver.messy" and request.tags["etr/health"] == "WARN"
        assert [r.run_key for r in again.run_requests] == [request.run_key]  # same state, same key: launched once

        # While that run is going (or queued), a tick requests nothing more for the table.
        instance.add_run(DagsterRun(job_name="table_maintenance", status=DagsterRunStatus.STARTED, tags=request.tags))
        queued = sensor(build_sensor_context(instance=instance))
    assert isinstance(queued, SkipReason)


# Not marked slow: it maintains `messy`, so it must run after this file's other tests, and the slow
# tests run first.
def test_the_maintenance_job_maintains_the_chosen_table_and_the_sensor_then_rests(lake_settings, spark):
    defs = health_checks_definitions(lake_settings)
    job = defs.resolve_job_def("table_maintenance")
    bad = job.execute_in_process(
        run_config=tables_config(["silver.nope"]), instance=DagsterInstance.ephemeral(), raise_on_error=False
    )
    assert not bad.success
    failure = next(e for e in bad.all_events if e.event_type_value == "STEP_FAILURE")
    assert "unknown table(s) silver.nope; known tables: silver.messy, silver.tidy" in str(
        failure.event_specific_data.error
    )

    result = job.execute_in_process(run_config=tables_config(["silver.messy"]), instance=DagsterInstance.ephemeral())
    assert result.success
    executed = {e.step_key for e in result.all_events if e.event_type_value == "STEP_SUCCESS"}
    skipped = {e.step_key for e in result.all_events if e.event_type_value == "STEP_SKIPPED"}
    assert "maintain__silver__messy" in executed and skipped == {"maintain__silver__tidy"}
    output = next(
        e for e in result.all_events if e.event_type_value == "STEP_OUTPUT" and e.step_key == "maintain__silver__messy"
    )
    metadata = {k: v.value for k, v in output.event_specific_data.metadata.items()}
    assert (metadata["data_files_before"], metadata["data_files_after"], metadata["files_rewritten"]) == (6, 1, 6)
    assert (metadata["status_before"], metadata["status_after"]) == ("WARN", "OK")
    observation = next(e for e in result.all_events if e.event_type_value == "ASSET_OBSERVATION")
    assert observation.asset_key == table_key(MESSY)  # the figures also show on the table asset's page

    table = MESSY.qualified(lake_settings.catalog)
    assert sorted(r[0] for r in spark.sql(f"SELECT id FROM {table}").collect()) == list(range(6))
    log = spark.sql(
        f"SELECT table_name, run_id, data_files_after FROM {TABLE_MAINTENANCE_LOG.qualified(lake_settings.catalog)}"
    ).collect()
    assert [tuple(r) for r in log] == [("silver.messy", result.run_id, 1)]
    with instance_for_test() as instance:
        tick = build_maintenance(lake_settings, [], specs=TEST_SPECS).sensor(build_sensor_context(instance=instance))
    assert isinstance(tick, SkipReason) and "within their health thresholds" in tick.skip_message
