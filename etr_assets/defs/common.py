"""Pieces every asset module shares: partitions, keys, pools, and how a table asset is declared and reported."""

import datetime as dt
import warnings

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    BackfillPolicy,
    DailyPartitionsDefinition,
    MaterializeResult,
    asset,
)
from dagster._utils.warnings import BetaWarning

from etr_assets.defs.metadata import commit_metadata, definition_metadata
from etr_assets.defs.resources import LakeResource
from etr_assets.lake.bronze import LayerResult
from etr_assets.lake.specs import TableSpec
from etr_assets.lake.writes import table_location
from etr_assets.settings import Settings

# BackfillPolicy is marked beta; single-run backfills are what `--partition-range` needs, so we accept it.
warnings.filterwarnings("ignore", category=BetaWarning, message=".*backfill_policy.*")

SINGLE_RUN = BackfillPolicy.single_run()


def daily_partitions(settings: Settings) -> DailyPartitionsDefinition:
    return DailyPartitionsDefinition(start_date=settings.start_date.isoformat(), timezone="UTC")


def table_key(spec: TableSpec) -> AssetKey:
    return AssetKey([spec.namespace, spec.name])


def days_of(context: AssetExecutionContext) -> list[dt.date]:
    return [dt.date.fromisoformat(key) for key in context.partition_keys]


def table_pool(settings: Settings, spec: TableSpec) -> str | None:
    """One writer per table at a time where the catalog cannot arbitrate commits (local Hadoop catalog), and
    for SCD2 tables everywhere: their keyed MERGEs conflict with any concurrent commit and would only retry."""
    return f"iceberg_{spec.namespace}_{spec.name}" if settings.serialize_writers or spec.scd2 else None


def blocking_checks(spec: TableSpec) -> list[AssetCheckSpec]:
    """One blocking Dagster check per expectation of the spec (evaluated on the audit branch before publishing)."""
    names = [(c.name, c.description) for c in spec.expectations]
    if spec.unique_key:
        names.append((f"{spec.unique_key}_is_unique", f"{spec.unique_key} is unique"))
    return [
        AssetCheckSpec(name, asset=table_key(spec), blocking=True, description=f"Blocking, before publishing: {text}")
        for name, text in names
    ]


def check_results(outcomes) -> list[AssetCheckResult]:
    return [
        AssetCheckResult(
            check_name=o.name,
            passed=o.passed,
            severity=AssetCheckSeverity.ERROR,
            metadata={"violations": o.violations, "examples": o.examples or "none"},
        )
        for o in outcomes
    ]


def table_asset(settings: Settings, spec: TableSpec, deps: list[AssetKey], description: str, group: str | None = None):
    """@asset for a daily-partitioned Iceberg table written by Spark (with its blocking checks, if any)."""
    return asset(
        key=table_key(spec),
        deps=deps,
        group_name=group or spec.namespace,
        partitions_def=daily_partitions(settings),
        backfill_policy=SINGLE_RUN,
        kinds={"iceberg", "spark"},
        pool=table_pool(settings, spec),
        description=description,
        metadata=definition_metadata(spec, settings.catalog),
        check_specs=blocking_checks(spec) or None,
    )


def table_result(context: AssetExecutionContext, lake: LakeResource, spec: TableSpec, layer: LayerResult) -> MaterializeResult:
    location = table_location(lake.session(), spec.qualified(lake.catalog))
    context.log.info(
        f"{spec.identifier}: replaced {len(layer.rows_by_day)} day(s) with {layer.rows} rows in snapshot "
        f"{layer.commit.snapshot_id} (+{layer.commit.added_files}/-{layer.commit.removed_files} files)"
    )
    for warning in layer.warnings:
        context.log.warning(warning)
    return MaterializeResult(metadata=commit_metadata(layer, location), check_results=check_results(layer.checks) or None)
