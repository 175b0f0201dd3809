"""Pieces every asset module shares: partitions, keys, pools, how a table asset is declared and reported, and what
the UI shows about a table (its column schema from the spec, each commit's figures)."""

import warnings

import dagster as dg

from etr_assets.defs.dagster_private import materialization_of
from etr_assets.lake.figures import Tagged, check_figures, day_figures, written_days
from etr_assets.lake.quality import CheckOutcome, Severity
from etr_assets.lake.specs import WAP_ENABLED, TableSpec
from etr_assets.pipeline.layers import DERIVED_SPECS, UP_TO_DATE, layer_name
from etr_assets.settings import Profile, Settings
from etr_assets.tables.feeds import RAW_FEEDS

# BackfillPolicy is marked beta; single-run backfills are what `--partition-range` needs, so we accept it.
warnings.filterwarnings("ignore", category=dg.BetaWarning, message=".*backfill_policy.*")
# Checks partitioned by day are a preview; the per-day results in the UI are what we want from them.
warnings.filterwarnings("ignore", category=dg.PreviewWarning, message=".*partitions_def on an AssetCheckSpec.*")

SINGLE_RUN = dg.BackfillPolicy.single_run()

# A run of these statuses may still start or write: not ended.
IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def daily_partitions(settings: Settings) -> dg.DailyPartitionsDefinition:
    return dg.DailyPartitionsDefinition(start_date=settings.start_date.isoformat(), timezone="UTC")


def nightly_schedule(job) -> dg.ScheduleDefinition:
    """`<job>_daily`: at 02:00 UTC, the job for the day that just ended; stopped, so a fresh install does nothing."""
    return dg.build_schedule_from_partitioned_job(
        job,
        name=f"{job.name}_daily",
        hour_of_day=2,
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description=f"Each night, runs {job.name} for the previous day's partition.",
    )


def table_key(spec: TableSpec) -> dg.AssetKey:
    return dg.AssetKey.from_user_string(layer_name(spec))


def previous_day(key: dg.AssetKey) -> dg.AssetDep:
    """A dependency on the partition of the day before: what a day that builds on yesterday's state reads."""
    return dg.AssetDep(key, partition_mapping=dg.TimeWindowPartitionMapping(start_offset=-1, end_offset=-1))


def table_pool(settings: Settings, spec: TableSpec) -> str | None:
    """One writer per table where the catalog cannot arbitrate commits (local), for SCD2 (keyed MERGEs conflict with
    any commit) and for bronze (Iceberg does not check a first load's append against another's)."""
    single_writer = settings.profile == Profile.LOCAL or spec.scd2 or spec.namespace == "bronze"
    return f"iceberg_{spec.namespace}_{spec.name}" if single_writer else None


def table_check_specs(spec: TableSpec, days: dg.DailyPartitionsDefinition) -> list[dg.AssetCheckSpec]:
    """The checks a table asset reports with each materialization, from its spec; by day when it has a day column.
    Expectations and the unique key block (before publishing where WAP is on, else after writing); the rest warn."""

    def check(name: str, description: str, blocking: bool = False) -> dg.AssetCheckSpec:
        partitions = days if spec.day_column else None
        return dg.AssetCheckSpec(
            name, asset=table_key(spec), description=description, blocking=blocking, partitions_def=partitions
        )

    when = "before publishing" if spec.table_properties.get(WAP_ENABLED) == "true" else "after writing"
    held = " (a row that breaks it is held back in quarantine; blocks only if one got through)"
    specs = [
        check(c.name, f"Per record, {when}: {c.description}{held}", blocking=True)
        if c.per_record
        else check(c.name, f"Blocking, {when}: {c.description}", blocking=True)
        for c in spec.expectations
    ]
    if spec.unique_key:
        unique = f"Blocking, {when}: {spec.unique_key} is unique in the whole table"
        specs.append(check(f"{spec.unique_key}_is_unique", unique, blocking=True))
    specs += [
        check(r.name, f"Warns when a {r.column} names no {r.key} of {r.table} (it may arrive later)")
        for r in spec.quality.references
    ]
    if spec.day_column:
        rules = spec.quality
        anomaly = (
            f"Warns when a day's rows are more than {rules.row_count_tolerance:.0%} away from the median of "
            f"the {rules.row_count_window_days} days before it (no verdict with under "
            f"{rules.row_count_min_history_days} days)"
        )
        specs.append(check("row_count_anomaly", anomaly))
    if any(feed.bronze is spec for feed in RAW_FEEDS):  # bronze's own: the run fails above the limit
        specs.append(check("quarantine_rate", "Warns when any received record was refused into quarantine"))
    if spec in DERIVED_SPECS:  # judged when built, and again by the propagate_corrections sensor
        out_of_date = (
            "Warns while the day is out of date: built before a day it is derived from changed (a corrected "
            "silver day, a history's late day, the day before rebuilt), or while the day it carries from was "
            "missing; passes once it is built again"
        )
        specs.append(check(UP_TO_DATE, out_of_date))
    if per_record := [c.description for c in spec.expectations if c.per_record]:
        held_back = f"Warns when a row broke a per-record expectation ({', '.join(per_record)}) and was held back"
        specs.append(check("records_quarantined", held_back))  # the rest of the day was published
    return specs


def column_schema(spec: TableSpec) -> dg.TableSchema:
    def column(c) -> dg.TableColumn:
        constraints = dg.TableColumnConstraints(nullable=not c.required, other=["personal data"] if c.pii else [])
        return dg.TableColumn(name=c.name, type=c.type, description=c.doc or None, constraints=constraints)

    return dg.TableSchema(columns=[column(c) for c in spec.columns])


def definition_metadata(spec: TableSpec, catalog: str) -> dict[str, object]:
    """Static metadata on the asset definition: what the table is, before any run."""
    return {
        "dagster/column_schema": column_schema(spec),
        "dagster/table_name": spec.qualified(catalog),
        "partitioning": ", ".join(spec.partition_by) or "unpartitioned",
        "personal_data_columns": ", ".join(spec.pii_columns) or "none",
        "target_file_size_mb": spec.target_file_size_bytes // (1024 * 1024),
    }


def as_metadata(figures: dict[str, object]) -> dict[str, object]:
    """Figures of one materialization (`etr_assets.lake.figures`), as Dagster metadata values."""
    render = {"path": dg.MetadataValue.path, "json": dg.MetadataValue.json, "md": dg.MetadataValue.md}
    return {
        key: render[value.kind](value.value) if isinstance(value, Tagged) else value for key, value in figures.items()
    }


def record_days(context, figures: dict[str, object]) -> None:
    """Each day's own figures on its partition, and a day written without being asked as a materialization of its
    partition, with a warning. Call before yielding the materialization."""
    days, requested = day_figures(figures), context.partition_keys  # every asset here is partitioned
    run_days = requested[0] + (f"...{requested[-1]}" if len(requested) > 1 else "")
    for day in requested:
        if metadata := as_metadata(days.get(day, {})) | ({"run_days": run_days} if len(requested) > 1 else {}):
            context.add_asset_metadata(metadata, partition_key=day)
    if not (unrequested := sorted(written_days(figures) - set(requested))):
        return
    context.log.warning(
        f"{context.asset_key.to_user_string()}: also wrote {', '.join(unrequested)} (not requested by this run of "
        f"{run_days}); recorded as materializations of those partitions"
    )
    for day in unrequested:
        metadata = {"written_by_run_of": run_days, **as_metadata(days.get(day, {}))}
        context.log_event(dg.AssetMaterialization(asset_key=context.asset_key, partition=day, metadata=metadata))


def check_results(outcomes: list[CheckOutcome]) -> list[dg.AssetCheckResult]:
    """Dagster results of quality outcomes: numbers (plotted by the UI) and the per-day figures and verdicts."""
    return [
        dg.AssetCheckResult(
            check_name=o.name,
            passed=o.passed,
            severity=dg.AssetCheckSeverity.WARN if o.severity == Severity.WARN else dg.AssetCheckSeverity.ERROR,
            metadata=as_metadata(check_figures(o)),
            description=o.description,
        )
        for o in outcomes
    ]


def on_partitions(context: dg.AssetExecutionContext, results: list[dg.AssetCheckResult]):
    """The check results, but on a range run one evaluation per day of a check of days (Dagster would record one the
    UI cannot place), then the check's output, which gates downstream steps. Yield after the materialization."""
    selected = context.selected_asset_check_keys
    checks = context.assets_def.check_specs_by_output_name.items()
    outputs = {spec.name: (output, spec) for output, spec in checks if spec.key in selected}
    days = context.partition_keys if context.has_partition_key_range else []
    targets = {}  # each day's materialization, looked up once for all the checks
    for result in results:
        output, spec = outputs.get(result.check_name, (None, None))
        if spec is None:
            continue
        if not days or spec.partitions_def is None:
            yield result
            continue
        metadata = dict(result.metadata or {})
        by_day = getattr(metadata.pop("by_day", None), "value", None) or {}
        failed = getattr(metadata.pop("days_failed", None), "value", None)
        for day in days:
            if day not in targets:
                targets[day] = materialization_of(context.instance, context.asset_key, day)
            passed = result.passed if failed is None else day not in failed
            figures = {**metadata, "day_figure": float(by_day.get(day, 0)), "run_days": f"{days[0]}...{days[-1]}"}
            yield dg.AssetCheckEvaluation(
                asset_key=context.asset_key,
                check_name=spec.name,
                passed=passed,
                metadata=figures,
                target_materialization_data=targets[day],
                severity=result.severity,
                description=result.description,
                blocking=spec.blocking,
                partition=day,
            )
        yield dg.Output(None, output_name=output)


def table_asset(
    settings: Settings,
    spec: TableSpec,
    deps: list[dg.AssetKey | dg.AssetDep],
    description: str,
    group: str | None = None,
):
    """A daily-partitioned Iceberg table's asset, with the checks its spec implies; `deps` read the same day. Its
    group: a declared source's name, else the table's layer (namespace)."""
    partitions, key = daily_partitions(settings), table_key(spec)
    return dg.multi_asset(
        name=key.to_python_identifier(),  # the step key, as an @asset of this key had
        specs=[
            dg.AssetSpec(
                key,
                deps=deps,
                group_name=group or spec.namespace,
                kinds={"iceberg", "spark"},
                description=description,
                metadata=definition_metadata(spec, settings.catalog),
                freshness_policy=dg.FreshnessPolicy.time_window(spec.quality.freshness_window),
            )
        ],
        partitions_def=partitions,
        backfill_policy=SINGLE_RUN,
        pool=table_pool(settings, spec),
        check_specs=table_check_specs(spec, partitions) or None,
        can_subset=True,
    )
