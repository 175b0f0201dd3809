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
    MetadataValue,
    asset,
)
from dagster._utils.warnings import BetaWarning

from etr_assets.defs.metadata import definition_metadata
from etr_assets.lake.quality import (
    CheckOutcome,
    Severity,
)
from etr_assets.lake.specs import WAP_ENABLED, TableSpec
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
    """One writer per table at a time where the catalog cannot arbitrate commits (local Hadoop catalog); for SCD2
    tables everywhere (their keyed MERGEs conflict with any concurrent commit and would only retry); and for
    bronze everywhere (a day's first load is an append, which Iceberg does not check against another first load)."""
    single_writer = settings.serialize_writers or spec.scd2 or spec.namespace == "bronze"
    return f"iceberg_{spec.namespace}_{spec.name}" if single_writer else None


def table_check_specs(spec: TableSpec) -> list[AssetCheckSpec]:
    """The checks a table asset reports with each materialization, derived from its spec.

    Blocking (ERROR): each expectation and the unique key. Silver and gold evaluate them on the audit branch before
    publishing; other tables evaluate them after writing, and a failure stops downstream assets.
    Non-blocking (WARN): each reference of the spec, and the row-count anomaly for tables with daily partitions.
    """
    key = table_key(spec)
    when = "before publishing" if spec.table_properties.get(WAP_ENABLED) == "true" else "after writing"
    specs = [
        AssetCheckSpec(
            c.name,
            asset=key,
            blocking=True,
            description=(
                f"Per record, {when}: {c.description} (a row that breaks it is held back in quarantine; blocks only if "
                "one got through)"
                if c.per_record
                else f"Blocking, {when}: {c.description}"
            ),
        )
        for c in spec.expectations
    ]
    if spec.unique_key:
        specs.append(
            AssetCheckSpec(
                f"{spec.unique_key}_is_unique",
                asset=key,
                blocking=True,
                description=f"Blocking, {when}: {spec.unique_key} is unique in the whole table",
            )
        )
    specs += [
        AssetCheckSpec(
            r.name,
            asset=key,
            description=f"Warns when a {r.column} names no {r.key} of {r.table} (it may arrive later)",
        )
        for r in spec.quality.references
    ]
    if spec.day_column:
        rules = spec.quality
        specs.append(
            AssetCheckSpec(
                "row_count_anomaly",
                asset=key,
                description=f"Warns when a day's rows are more than {rules.row_count_tolerance:.0%} "
                "away from the median of "
                f"the {rules.row_count_window_days} days before it (no verdict with under "
                f"{rules.row_count_min_history_days} days)",
            )
        )
    return specs


def quarantine_check(spec: TableSpec) -> AssetCheckSpec:
    """Bronze's own check: the share of received records refused into quarantine (the run fails above the limit)."""
    return AssetCheckSpec(
        "quarantine_rate",
        asset=table_key(spec),
        description="Warns when any received record was refused into quarantine",
    )


def record_quarantine_check(spec: TableSpec) -> AssetCheckSpec:
    """Rows held back by the spec's per-record expectations (the rest of the day was published)."""
    rules = ", ".join(c.description for c in spec.expectations if c.per_record)
    return AssetCheckSpec(
        "records_quarantined",
        asset=table_key(spec),
        description=f"Warns when a row broke a per-record expectation ({rules}) and was held back",
    )


def check_results(outcomes: list[CheckOutcome]) -> list[AssetCheckResult]:
    """Dagster results of quality outcomes: numbers (plotted by the UI) and the per-day figures."""
    results = []
    for o in outcomes:
        metadata: dict[str, object] = {"violations": o.violations, "detail": o.examples or "none", **o.figures}
        if o.by_day:
            metadata["by_day"] = MetadataValue.json(o.by_day)
        results.append(
            AssetCheckResult(
                check_name=o.name,
                passed=o.passed,
                severity=AssetCheckSeverity.WARN if o.severity == Severity.WARN else AssetCheckSeverity.ERROR,
                metadata=metadata,
                description=o.description,
            )
        )
    return results


def table_asset(
    settings: Settings,
    spec: TableSpec,
    deps: list[AssetKey],
    description: str,
    group: str | None = None,
    extra_checks: tuple[AssetCheckSpec, ...] = (),
):
    """@asset for a daily-partitioned Iceberg table written by Spark, with the checks its spec implies."""
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
        check_specs=table_check_specs(spec) + list(extra_checks) or None,
    )
