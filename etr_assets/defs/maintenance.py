"""Table health and maintenance in Dagster: a `table_health` check on every table asset, the `table_maintenance`
job (one op per table, each in its table's pool), a sensor that runs it for tables whose health warns, and a
weekly schedule that runs it for every table. The work is done by etr_assets.lake.health / .maintenance."""

import dataclasses
import warnings

from dagster import (
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetObservation,
    BetaWarning,
    Config,
    DagsterRunStatus,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    Failure,
    In,
    JobDefinition,
    MetadataValue,
    Nothing,
    OpExecutionContext,
    Out,
    Output,
    RunRequest,
    RunsFilter,
    ScheduleDefinition,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    asset_check,
    job,
    op,
    sensor,
)
from pydantic import Field

from etr_assets.defs.common import table_key, table_pool
from etr_assets.defs.resources import LakeResource
from etr_assets.lake.health import table_health
from etr_assets.lake.maintenance import MaintenanceResult, maintain_table
from etr_assets.lake.quality import Severity
from etr_assets.lake.specs import TableSpec
from etr_assets.settings import Settings
from etr_assets.tables import ALL_SPECS
from etr_assets.tables.feeds import writer_spec

# Definitions copies a job-targeting sensor to give it the code location's executor, passing `owners` (a beta
# parameter) although we set none: the warning is about Dagster's own call.
warnings.filterwarnings("ignore", category=BetaWarning, message=".*owners.*SensorDefinition.*")

JOB_NAME = "table_maintenance"
SELECT_OP = "select_tables"


@dataclasses.dataclass(frozen=True)
class MaintenanceDefinitions:
    checks: list[AssetChecksDefinition]
    job: JobDefinition
    sensor: SensorDefinition
    schedule: ScheduleDefinition


def build_maintenance(
    settings: Settings, table_asset_specs: list[TableSpec], specs: tuple[TableSpec, ...] = ALL_SPECS
) -> MaintenanceDefinitions:
    """Checks for the table assets; job, sensor and schedule over every table of `specs`."""
    maintenance_job = build_maintenance_job(settings, specs, observed=table_asset_specs)
    return MaintenanceDefinitions(
        checks=[health_check(settings, spec) for spec in table_asset_specs],
        job=maintenance_job,
        sensor=health_sensor(settings, specs, maintenance_job),
        schedule=ScheduleDefinition(
            name="table_maintenance_weekly",
            job=maintenance_job,
            cron_schedule="0 3 * * 0",
            execution_timezone="UTC",
            run_config=tables_config([]),
            default_status=DefaultScheduleStatus.STOPPED,
            description="Every Sunday at 03:00 UTC, maintains every table (compaction, manifests, snapshot expiry, "
            "orphan files), healthy or not.",
        ),
    )


# --- the check -------------------------------------------------------------------------------------------------


def health_check(settings: Settings, spec: TableSpec) -> AssetChecksDefinition:
    limits = spec.health

    @asset_check(
        asset=table_key(spec),
        name="table_health",
        blocking=False,
        description=(
            f"Table health from Iceberg metadata only (no JVM, milliseconds): WARN when a limit of the spec is passed "
            f"(mergeable small-file share > {limits.max_small_file_share:g} once at least "
            f"{limits.min_mergeable_small_files} files or a target file's worth could merge, "
            f"delete files > {limits.max_delete_files}, "
            f"snapshots > {limits.max_snapshots}, oldest snapshot > {limits.max_snapshot_age_days:g} days, manifests > "
            f"{limits.max_manifests}, metadata.json > {limits.max_metadata_file_mb:g} MB), ERROR past "
            f"{limits.error_factor:g}x a limit. The table_health_maintenance sensor runs table_maintenance on WARN."
        ),
    )
    def table_health_check() -> AssetCheckResult:
        health = table_health(settings, spec)
        if not health.exists:
            return AssetCheckResult(
                passed=False,
                severity=AssetCheckSeverity.WARN,
                description=f"{spec.identifier} has not been created yet",
                metadata={"table": spec.identifier},
            )
        return AssetCheckResult(
            passed=health.status == Severity.OK,
            severity=AssetCheckSeverity.ERROR if health.status == Severity.ERROR else AssetCheckSeverity.WARN,
            description=health.describe(),
            # Numbers the UI plots over time; the snapshot id as a string (Iceberg ids exceed 32 bits).
            metadata=dict(health.figures())
            | {
                "status": str(health.status),  # Dagster metadata takes plain text, not an enum
                "reasons": "; ".join(health.reasons) or "none",
                "table": health.table,
                "snapshot_id": str(health.current_snapshot_id) if health.current_snapshot_id is not None else "none",
                "target_file_bytes": health.target_file_bytes,
                "measured_ms": round(health.measured_seconds * 1000, 1),
            },
        )

    return table_health_check


# --- the job ---------------------------------------------------------------------------------------------------


def op_suffix(spec: TableSpec) -> str:
    return f"{spec.namespace}__{spec.name}"


def maintenance_pool(settings: Settings, spec: TableSpec) -> str:
    """The pool of the table's writer where it has one (a quarantine table's is its bronze asset's): maintenance
    then takes turns with writes, as the Hadoop catalog needs; otherwise a pool of its own, so two maintenances
    of one table never overlap."""
    return table_pool(settings, writer_spec(spec)) or f"iceberg_maintenance_{spec.namespace}_{spec.name}"


class MaintenanceConfig(Config):
    tables: list[str] = Field(
        default_factory=list,
        description="Tables to maintain, as namespace.name (e.g. silver.bnpl_transactions_clean); empty: every table",
    )


def _select_op(specs: tuple[TableSpec, ...]):
    by_name = {spec.identifier: spec for spec in specs}

    @op(
        name=SELECT_OP,
        description="Picks the tables to maintain from the run config (empty: all); the others' steps are skipped.",
        out={op_suffix(spec): Out(Nothing, is_required=False) for spec in specs},
    )
    def select_tables(context: OpExecutionContext, config: MaintenanceConfig):
        unknown = [name for name in config.tables if name not in by_name]
        if unknown:
            raise Failure(f"unknown table(s) {', '.join(unknown)}; known tables: {', '.join(by_name)}")
        chosen = [by_name[name] for name in dict.fromkeys(config.tables)] or list(specs)
        context.log.info(f"maintaining {len(chosen)} table(s): {', '.join(s.identifier for s in chosen)}")
        for spec in chosen:
            yield Output(None, output_name=op_suffix(spec))

    return select_tables


def run_metadata(result: MaintenanceResult) -> dict[str, object]:
    before, after = result.before, result.after
    metadata: dict[str, object] = {
        "table": result.table,
        "status_before": str(before.status),
        "status_after": str(after.status),
        "reasons_before": "; ".join(before.reasons) or "none",
        "files_rewritten": result.compaction.rewritten_data_files,
        "files_written": result.compaction.added_data_files,
        "delete_files_removed": result.compaction.removed_delete_files,
        "manifests_rewritten": result.manifests.rewritten_manifests,
        "snapshots_expired": result.expiry.expired_snapshots,
        "files_deleted_by_expiry": result.expiry.deleted_files,
        "orphans_removed": len(result.orphans.removed),
        "seconds": round(result.seconds, 2),
        "snapshot_id": str(after.current_snapshot_id) if after.current_snapshot_id is not None else "none",
    }
    counts = "data_files small_files delete_files snapshots manifests metadata_file_bytes data_bytes".split()
    metadata |= {
        f"{name}_{when}": getattr(h, name) for name in counts for when, h in (("before", before), ("after", after))
    }
    if result.orphans.removed:
        metadata["orphan_files"] = MetadataValue.json(list(result.orphans.removed[:50]))
    return metadata


def _maintain_op(settings: Settings, spec: TableSpec, observed: bool):
    @op(
        name=f"maintain__{op_suffix(spec)}",
        ins={"selected": In(Nothing)},
        pool=maintenance_pool(settings, spec),
        description=f"Compacts {spec.identifier}, rewrites its manifests, expires old snapshots, removes orphan "
        "files; health before and after go to monitoring.table_maintenance_log and this step's output.",
    )
    def maintain(context: OpExecutionContext, lake: LakeResource):
        if not table_health(settings, spec).exists:
            context.log.info(f"{spec.identifier} has not been created yet: nothing to maintain")
            return Output(None, metadata={"table": spec.identifier, "skipped": "not created yet"})
        result = maintain_table(lake.session(), settings, spec, run_id=context.run_id)
        context.log.info(
            f"{spec.identifier}: {result.before.status} -> {result.after.status}; data files "
            f"{result.before.data_files} -> {result.after.data_files}, snapshots {result.before.snapshots} -> "
            f"{result.after.snapshots}, {len(result.orphans.removed)} orphan file(s) removed in {result.seconds:.1f} s"
        )
        metadata = run_metadata(result)
        if observed:  # the figures also land on the table asset's page, beside its materializations
            context.log_event(AssetObservation(asset_key=table_key(spec), metadata=metadata))
        return Output(None, metadata=metadata)

    return maintain


def build_maintenance_job(settings: Settings, specs: tuple[TableSpec, ...], observed: list[TableSpec]) -> JobDefinition:
    select_tables = _select_op(specs)
    steps = [(spec, _maintain_op(settings, spec, spec in observed)) for spec in specs]

    @job(
        name=JOB_NAME,
        description="Maintains the chosen tables (config select_tables.tables; empty: every table), one step per "
        "table in its own pool: compaction, manifests, snapshot expiry, orphan files. Results on each step and in "
        "monitoring.table_maintenance_log.",
        tags={"etr/kind": "maintenance"},
    )
    def table_maintenance():
        selected = select_tables()
        for spec, maintain in steps:
            maintain(getattr(selected, op_suffix(spec)))

    return table_maintenance


def tables_config(tables: list[str]) -> dict[str, object]:
    return {"ops": {SELECT_OP: {"config": {"tables": tables}}}}


# --- sensor and schedule ---------------------------------------------------------------------------------------


IN_FLIGHT = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED]


def health_sensor(settings: Settings, specs: tuple[TableSpec, ...], maintenance_job: JobDefinition) -> SensorDefinition:
    @sensor(
        name="table_health_maintenance",
        job=maintenance_job,
        minimum_interval_seconds=900,
        default_status=DefaultSensorStatus.STOPPED,
        description="Every 15 minutes, reads each table's health from its Iceberg metadata (no JVM) and launches "
        "table_maintenance for exactly the tables that WARN or ERROR: once per table state, and not while a "
        "maintenance of that table is queued or running.",
    )
    def table_health_maintenance(context: SensorEvaluationContext):
        requests, seen = [], []
        for spec in specs:
            health = table_health(settings, spec)
            if not health.needs_maintenance:
                continue
            # A maintenance of this table queued or running (the sensor's runs carry the etr/table tag) will fix this
            # state; the pool would only queue more.
            in_flight = RunsFilter(job_name=JOB_NAME, tags={"etr/table": spec.identifier}, statuses=IN_FLIGHT)
            if context.instance.get_runs(filters=in_flight, limit=1):
                context.log.info(f"{spec.identifier}: {health.status}, maintenance already queued or running")
                continue
            seen.append(health.describe())
            requests.append(
                RunRequest(
                    # One run per table state: a later tick that finds the same snapshot and count launches nothing.
                    run_key=f"{spec.identifier}@{health.current_snapshot_id}/{health.snapshots}",
                    run_config=tables_config([spec.identifier]),
                    tags={"etr/table": spec.identifier, "etr/health": str(health.status)},
                )
            )
        if not requests:
            return SkipReason(f"all {len(specs)} tables are within their health thresholds (or not created yet)")
        context.log.info("maintenance due: " + "; ".join(seen))
        return SensorResult(run_requests=requests)

    return table_health_maintenance
