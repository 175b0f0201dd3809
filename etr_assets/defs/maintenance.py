"""Checks from each table's Iceberg metadata (pyiceberg, no JVM): `table_health`, and the `table_maintenance` job (an op
per table, in its pool) with its health sensor and weekly schedule."""

import dataclasses
import warnings

import dagster as dg
from pydantic import Field

from etr_assets.defs.common import IN_FLIGHT, table_key, table_pool
from etr_assets.defs.resources import LakeResource
from etr_assets.lake.health import table_health
from etr_assets.lake.maintenance import maintain_table
from etr_assets.lake.quality import Severity
from etr_assets.lake.specs import TableSpec
from etr_assets.settings import Settings
from etr_assets.tables import ALL_SPECS
from etr_assets.tables.feeds import writer_spec

# Definitions copies a job-targeting sensor passing `owners` (beta) although we set none: Dagster's own call warns.
warnings.filterwarnings("ignore", category=dg.BetaWarning, message=".*owners.*SensorDefinition.*")

JOB_NAME = "table_maintenance"
SELECT_OP = "select_tables"


@dataclasses.dataclass(frozen=True)
class MaintenanceDefinitions:
    checks: list[dg.AssetChecksDefinition]
    job: dg.JobDefinition
    sensor: dg.SensorDefinition
    schedule: dg.ScheduleDefinition


def build_maintenance(
    settings: Settings, table_asset_specs: list[TableSpec], specs: tuple[TableSpec, ...] = ALL_SPECS
) -> MaintenanceDefinitions:
    """Checks for the table assets; job, sensor and schedule over every table of `specs`."""
    maintenance_job = build_maintenance_job(settings, specs, observed=table_asset_specs)
    return MaintenanceDefinitions(
        checks=[health_check(settings, spec) for spec in table_asset_specs],
        job=maintenance_job,
        sensor=health_sensor(settings, specs, maintenance_job),
        schedule=dg.ScheduleDefinition(
            name="table_maintenance_weekly",
            job=maintenance_job,
            cron_schedule="0 3 * * 0",
            execution_timezone="UTC",
            run_config=tables_config([]),
            default_status=dg.DefaultScheduleStatus.STOPPED,
            description="Every Sunday at 03:00 UTC, maintains every table (compaction, manifests, snapshot expiry, "
            "orphan files), healthy or not.",
        ),
    )


def health_check(settings: Settings, spec: TableSpec) -> dg.AssetChecksDefinition:
    limits = spec.health

    @dg.asset_check(
        asset=table_key(spec),
        name="table_health",
        blocking=False,
        description=(
            f"Table health from Iceberg metadata only (no JVM, milliseconds): WARN when a limit of the spec is passed "
            f"(mergeable small-file share > {limits.max_small_file_share:g} once at least "
            f"{limits.min_mergeable_small_files} files or a target file's worth could merge, "
            f"delete files > {limits.max_delete_files}, "
            f"snapshots > {limits.max_snapshots}, oldest snapshot > {limits.max_snapshot_age_days:g} days, manifests > "
            f"{limits.max_manifests}, metadata.json > {limits.max_metadata_file_mb:g} MB, bytes stored per byte "
            f"the current snapshot reads > {limits.max_storage_amplification:g}x once the excess fills a target file), "
            "ERROR past "
            f"{limits.error_factor:g}x a limit. The table_health_maintenance sensor runs table_maintenance on WARN."
        ),
    )
    def table_health_check() -> dg.AssetCheckResult:
        health = table_health(settings, spec)
        if not health.exists:
            return dg.AssetCheckResult(
                passed=False,
                severity=dg.AssetCheckSeverity.WARN,
                description=f"{spec.identifier} has not been created yet",
                metadata={"table": spec.identifier},
            )
        return dg.AssetCheckResult(
            passed=health.status == Severity.OK,
            severity=dg.AssetCheckSeverity.ERROR if health.status == Severity.ERROR else dg.AssetCheckSeverity.WARN,
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


def op_suffix(spec: TableSpec) -> str:
    return f"{spec.namespace}__{spec.name}"


def maintenance_pool(settings: Settings, spec: TableSpec) -> str:
    """The pool of the table's writer where it has one (a quarantine table's: its bronze's), so maintenance takes
    turns with writes; otherwise its own, so two maintenances of one table never overlap."""
    return table_pool(settings, writer_spec(spec)) or f"iceberg_maintenance_{spec.namespace}_{spec.name}"


class MaintenanceConfig(dg.Config):
    tables: list[str] = Field(
        default_factory=list,
        description="Tables to maintain, as namespace.name (e.g. silver.bnpl_transactions_clean); empty: every table",
    )


def _select_op(specs: tuple[TableSpec, ...]):
    by_name = {spec.identifier: spec for spec in specs}

    @dg.op(
        name=SELECT_OP,
        description="Picks the tables to maintain from the run config (empty: all); the others' steps are skipped.",
        out={op_suffix(spec): dg.Out(dg.Nothing, is_required=False) for spec in specs},
    )
    def select_tables(context: dg.OpExecutionContext, config: MaintenanceConfig):
        if unknown := [name for name in config.tables if name not in by_name]:
            raise dg.Failure(f"unknown table(s) {', '.join(unknown)}; known tables: {', '.join(by_name)}")
        chosen = [by_name[name] for name in dict.fromkeys(config.tables)] or list(specs)
        context.log.info(f"maintaining {len(chosen)} table(s): {', '.join(s.identifier for s in chosen)}")
        for spec in chosen:
            yield dg.Output(None, output_name=op_suffix(spec))

    return select_tables


def _maintain_op(settings: Settings, spec: TableSpec, observed: bool):
    @dg.op(
        name=f"maintain__{op_suffix(spec)}",
        ins={"selected": dg.In(dg.Nothing)},
        pool=maintenance_pool(settings, spec),
        description=f"Compacts {spec.identifier}, rewrites its manifests, expires old snapshots, removes orphan "
        "files; health before and after go to monitoring.table_maintenance_log and this step's output.",
    )
    def maintain(context: dg.OpExecutionContext, lake: LakeResource):
        if not table_health(settings, spec).exists:
            context.log.info(f"{spec.identifier} has not been created yet: nothing to maintain")
            return dg.Output(None, metadata={"table": spec.identifier, "skipped": "not created yet"})
        result = maintain_table(lake.session(), settings, spec, run_id=context.run_id)
        before, after = result.before, result.after
        context.log.info(
            f"{spec.identifier}: {before.status} -> {after.status}; data files {before.data_files} -> "
            f"{after.data_files}, snapshots {before.snapshots} -> {after.snapshots}, "
            f"{len(result.orphans.removed)} orphan file(s) removed in {result.seconds:.1f} s"
        )
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
            metadata["orphan_files"] = dg.MetadataValue.json(list(result.orphans.removed[:50]))
        if observed:  # the figures also land on the table asset's page, beside its materializations
            context.log_event(dg.AssetObservation(asset_key=table_key(spec), metadata=metadata))
        return dg.Output(None, metadata=metadata)

    return maintain


def build_maintenance_job(
    settings: Settings, specs: tuple[TableSpec, ...], observed: list[TableSpec]
) -> dg.JobDefinition:
    select_tables = _select_op(specs)
    steps = [(spec, _maintain_op(settings, spec, spec in observed)) for spec in specs]

    @dg.job(
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


def health_sensor(
    settings: Settings, specs: tuple[TableSpec, ...], maintenance_job: dg.JobDefinition
) -> dg.SensorDefinition:
    @dg.sensor(
        name="table_health_maintenance",
        job=maintenance_job,
        minimum_interval_seconds=900,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description="Every 15 minutes, reads each table's health from its Iceberg metadata (no JVM) and launches "
        "table_maintenance for exactly the tables that WARN or ERROR: once per table state, and not while a "
        "maintenance of that table is queued or running.",
    )
    def table_health_maintenance(context: dg.SensorEvaluationContext):
        requests, seen = [], []
        for spec in specs:
            health = table_health(settings, spec)
            if not health.needs_maintenance:
                continue
            # A maintenance of this table queued or running (etr/table tag) will fix it; the pool would only queue more.
            in_flight = dg.RunsFilter(job_name=JOB_NAME, tags={"etr/table": spec.identifier}, statuses=IN_FLIGHT)
            if context.instance.get_runs(filters=in_flight, limit=1):
                context.log.info(f"{spec.identifier}: {health.status}, maintenance already queued or running")
                continue
            seen.append(health.describe())
            requests.append(
                dg.RunRequest(
                    # One run per table state: a later tick that finds the same snapshot and count launches nothing.
                    run_key=f"{spec.identifier}@{health.current_snapshot_id}/{health.snapshots}",
                    run_config=tables_config([spec.identifier]),
                    tags={"etr/table": spec.identifier, "etr/health": str(health.status)},
                )
            )
        if not requests:
            return dg.SkipReason(f"all {len(specs)} tables are within their health thresholds (or not created yet)")
        context.log.info("maintenance due: " + "; ".join(seen))
        return dg.SensorResult(run_requests=requests)

    return table_health_maintenance
