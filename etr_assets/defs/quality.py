"""Freshness: a check per table asset, run hourly by its own job (the other quality checks run with each write).

Freshness is read from the table's metadata through pyiceberg (the time of its newest commit), so the check costs
no data read; its figure is still recorded in monitoring.data_quality_metrics with the others.
"""

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetSelection,
    DefaultScheduleStatus,
    ScheduleDefinition,
    asset_check,
    define_asset_job,
)

from etr_assets.defs.common import check_results, table_key
from etr_assets.defs.resources import LakeResource
from etr_assets.lake.quality import freshness_outcome, metrics_of, newest_commit_at, record_metrics
from etr_assets.lake.specs import TableSpec
from etr_assets.settings import Settings


def build_freshness_checks(settings: Settings, specs: list[TableSpec]) -> list[AssetChecksDefinition]:
    return [_freshness_check(settings, spec) for spec in specs if spec.quality.freshness_hours is not None]


def _freshness_check(settings: Settings, spec: TableSpec) -> AssetChecksDefinition:
    @asset_check(
        asset=table_key(spec),
        name="freshness",
        description=f"Warns when {spec.identifier}'s newest commit is older than {spec.quality.freshness_hours:g} "
        "hours (read from table metadata; run hourly by the freshness_checks job)",
    )
    def freshness(context: AssetCheckExecutionContext, lake: LakeResource) -> AssetCheckResult:
        outcome = freshness_outcome(spec, newest_commit_at(settings, spec))
        record_metrics(lake.session(), lake.catalog, metrics_of(spec, [outcome]), context.run.run_id)
        return check_results([outcome])[0]

    return freshness


def freshness_job(checks: list[AssetChecksDefinition]):
    return define_asset_job(
        name="freshness_checks",
        selection=AssetSelection.checks(*checks),
        description="Evaluates every table's freshness check (how old its newest commit is) without writing data.",
    )


def freshness_schedule(job) -> ScheduleDefinition:
    return ScheduleDefinition(
        name="freshness_checks_hourly",
        job=job,
        cron_schedule="15 * * * *",
        default_status=DefaultScheduleStatus.STOPPED,
        description="Each hour, checks that every table was written within its spec's freshness limit (WARN if not).",
    )
