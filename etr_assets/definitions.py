"""The code location: one Definitions object, `defs`, assembled from `etr_assets.defs`.

Importing it reads settings and builds definitions only: no JVM starts until an asset needs Spark.
"""

from __future__ import annotations

from dagster import (
    AssetSelection,
    DefaultScheduleStatus,
    Definitions,
    build_schedule_from_partitioned_job,
    define_asset_job,
)

from etr_assets.defs.bootstrap import build_bootstrap_job
from etr_assets.defs.common import PIPELINE_GROUPS, table_key
from etr_assets.defs.compute import build_layer_runner
from etr_assets.defs.entities import build_entity_assets
from etr_assets.defs.erasure import ERASURE_RESOURCES, build_erasure_job
from etr_assets.defs.maintenance import build_maintenance
from etr_assets.defs.operations import abandon_raw_batch, rollback_table, silver_daily_growth
from etr_assets.defs.quality import build_freshness_checks, freshness_job, freshness_schedule
from etr_assets.defs.raw import build_raw_assets
from etr_assets.defs.resources import build_resources
from etr_assets.defs.run_guard import dead_runs_sensor, in_process_executor
from etr_assets.defs.sensors import build_pending_batches_sensor
from etr_assets.defs.transactions import build_transaction_assets
from etr_assets.settings import Settings
from etr_assets.tables import ALL_SPECS


def build_definitions(settings: Settings) -> Definitions:
    assets = build_raw_assets(settings) + build_transaction_assets(settings) + build_entity_assets(settings)
    table_specs = [spec for spec in ALL_SPECS if any(table_key(spec) in a.keys for a in assets)]
    freshness = build_freshness_checks(settings, table_specs)
    job = define_asset_job(  # freshness checks run on their own schedule
        name="etr_pipeline",
        selection=AssetSelection.groups(*PIPELINE_GROUPS) - AssetSelection.checks(*freshness),
        description="Fetch a day from the BNPL API (transactions, customers, merchants) and refresh "
        "every layer for it.",
    )
    # At 02:00 UTC for the day that just ended; stopped by default so a fresh install does nothing alone.
    daily = build_schedule_from_partitioned_job(
        job,
        name="etr_pipeline_daily",
        hour_of_day=2,
        default_status=DefaultScheduleStatus.STOPPED,
        description="Each night, runs etr_pipeline for the previous day's partition.",
    )
    checks_job = freshness_job(freshness)
    maintenance = build_maintenance(settings, table_specs)  # health checks, maintenance job, sensor, schedule
    erasure = build_erasure_job(settings, frozenset(table_key(spec) for spec in table_specs))
    return Definitions(
        assets=assets,
        asset_checks=[silver_daily_growth, *freshness, *maintenance.checks],
        jobs=[
            job,
            rollback_table,
            abandon_raw_batch,
            build_bootstrap_job(settings),
            checks_job,
            erasure,
            maintenance.job,
        ],
        schedules=[daily, freshness_schedule(checks_job), maintenance.schedule],
        sensors=[build_pending_batches_sensor(settings), maintenance.sensor, dead_runs_sensor],
        resources=build_resources(settings) | ERASURE_RESOURCES | {"layer_runner": build_layer_runner(settings)},
        # One process per run, steps in order: one JVM per run instead of one per step (docs/stack.md: 38 s -> 7 s);
        # guarded: a run first fails the dead runs of its host and frees their pool slots (defs/run_guard.py).
        executor=in_process_executor,
    )


defs = build_definitions(Settings.from_env())
