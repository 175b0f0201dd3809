"""The code location, `defs`. Importing it reads settings and builds definitions only: no JVM starts."""

from __future__ import annotations

import dagster as dg

from etr_assets.defs.api_source import declared_definitions
from etr_assets.defs.assets import PIPELINE_JOB, PIPELINE_SOURCE, build_assets, build_pending_batches_sensor
from etr_assets.defs.common import nightly_schedule, table_key
from etr_assets.defs.erasure import ERASURE_RESOURCES, build_erasure_job
from etr_assets.defs.maintenance import build_maintenance
from etr_assets.defs.operations import abandon_raw_batch, build_bootstrap_job, rollback_table, silver_daily_growth
from etr_assets.defs.outside_commits import outside_check, outside_commits_job, outside_commits_sensor
from etr_assets.defs.propagation import build_propagation_sensor
from etr_assets.defs.resources import build_resources
from etr_assets.defs.run_guard import dead_runs_sensor, in_process_executor
from etr_assets.settings import Settings
from etr_assets.tables import ALL_SPECS


def build_definitions(settings: Settings) -> dg.Definitions:
    sources = declared_definitions(settings)  # every declared source's assets, jobs and schedules
    assets = [*sources.assets, *build_assets(settings)]
    table_specs = [spec for spec in ALL_SPECS if any(table_key(spec) in a.keys for a in assets)]
    outside = [outside_check(settings, spec) for spec in table_specs]
    job = dg.define_asset_job(  # commits outside Dagster are judged by their own sensor
        name=PIPELINE_JOB,
        selection=dg.AssetSelection.groups(PIPELINE_SOURCE, "silver", "gold") - dg.AssetSelection.checks(*outside),
        description=f"Fetch a day from the {PIPELINE_SOURCE} API (transactions, customers, merchants) and refresh "
        "every layer for it.",
    )
    maintenance = build_maintenance(settings, table_specs)  # health checks, maintenance job, sensor, schedule
    erasure = build_erasure_job(settings, frozenset(table_key(spec) for spec in table_specs))
    propagation, propagation_jobs = build_propagation_sensor(settings)  # corrections reach the gold days built on them
    return dg.Definitions(
        assets=assets,
        asset_checks=[silver_daily_growth, *outside, *maintenance.checks],
        jobs=[
            job,
            *sources.jobs,
            rollback_table,
            abandon_raw_batch,
            build_bootstrap_job(settings),
            erasure,
            maintenance.job,
            *propagation_jobs,
            outside_commits_job(outside),
        ],
        schedules=[nightly_schedule(job), *sources.schedules, maintenance.schedule],
        sensors=[
            build_pending_batches_sensor(settings, [job, *sources.jobs]),  # re-runs as the named jobs
            maintenance.sensor,
            outside_commits_sensor(settings, table_specs),
            dead_runs_sensor,
            propagation,
        ],
        resources=build_resources(settings) | ERASURE_RESOURCES,
        # One process per run: one JVM per run instead of one per step (docs/stack.md: 38 s -> 7 s).
        executor=in_process_executor,
    )


defs = build_definitions(Settings.from_env())
