"""Operator tools in the UI: roll a table back, abandon a raw batch (each with an audited reason), the daily-growth
check, and `bootstrap_lake`, which creates every database and table of the specs (running it again changes nothing)."""

import dagster as dg
from pydantic import Field

from etr_assets.defs.common import table_key
from etr_assets.defs.resources import LakeResource, RawZoneResource
from etr_assets.errors import EtrError
from etr_assets.lake.bootstrap import bootstrap_catalog, bootstrap_with_spark
from etr_assets.lake.bronze import abandon_batch
from etr_assets.lake.metadata import catalog as pyiceberg_catalog
from etr_assets.lake.quality import Metric, record_metrics
from etr_assets.lake.timetravel import daily_growth, rollback
from etr_assets.settings import Profile, Settings
from etr_assets.tables import ALL_SPECS, spec_for
from etr_assets.tables.feeds import RAW_FEEDS as FEEDS
from etr_assets.tables.transactions import SILVER_TRANSACTIONS

RAW_FEEDS = {f"{feed.source}/{feed.endpoint}": feed for feed in FEEDS}  # every declared source's


class RollbackConfig(dg.Config):
    table: str = Field(description="Table to roll back, as namespace.name, e.g. silver.bnpl_transactions_clean")
    snapshot_id: str = Field(
        description="Snapshot to make current again (see the table's .snapshots or its materializations)"
    )
    reason: str = Field(description="Why: recorded in audit.table_changes")


@dg.op(description="Makes an earlier snapshot of a table current again and records why in audit.table_changes.")
def rollback_table_op(context: dg.OpExecutionContext, config: RollbackConfig, lake: LakeResource) -> None:
    spec = spec_for(config.table)
    if not config.snapshot_id.strip().isdigit():
        raise ValueError(f"snapshot_id {config.snapshot_id!r} is not a snapshot id (digits only)")
    try:
        target = spec.qualified(lake.catalog)
        record = rollback(lake.session(), lake.catalog, target, int(config.snapshot_id), config.reason, context.run_id)
    except EtrError as error:
        raise dg.Failure(description=str(error)) from None  # one line in the run, nothing changed
    context.log.info(
        f"{spec.identifier}: snapshot {record['from_snapshot_id']} -> {record['to_snapshot_id']} ({config.reason})"
    )
    if context.instance.has_asset_key(key := table_key(spec)):  # a table asset (quarantine, bookkeeping: none)
        # Its page shows the rollback, and commits_outside_dagster knows this move of main as Dagster's.
        observation = dg.AssetObservation(
            asset_key=key,
            description=f"rolled back to snapshot {record['to_snapshot_id']}: {config.reason}",
            metadata={
                "snapshot_id": record["to_snapshot_id"],
                "rolled_back_from": record["from_snapshot_id"] or "none",
                "reason": config.reason,
            },
        )
        context.log_event(observation)


@dg.job(
    name="rollback_table",
    description="Roll one table back to a chosen snapshot, recording the reason. Launch it from the Launchpad.",
)
def rollback_table():
    rollback_table_op()


class AbandonBatchConfig(dg.Config):
    source: str = Field(default="bnpl", description="The declared source of the batch")
    endpoint: str = Field(description="Endpoint of the batch, one of the source's: " + ", ".join(RAW_FEEDS))
    batch_id: str = Field(
        description="The pending batch, e.g. 2025-01-03_20250104T020000000000Z_a1b2c3 (named by the "
        "failed run, the bronze materialization's refused_pending_batches, or the pending-batch sensor)"
    )
    reason: str = Field(description="Why it will not be loaded: recorded in audit.table_changes")


@dg.op(
    description="Closes a pending raw batch without loading it and records why in audit.table_changes; later runs "
    "no longer wait for it, and its day keeps what bronze holds until a new download of the day."
)
def abandon_raw_batch_op(
    context: dg.OpExecutionContext, config: AbandonBatchConfig, lake: LakeResource, raw_zone: RawZoneResource
) -> None:
    if (feed := RAW_FEEDS.get(f"{config.source}/{config.endpoint}")) is None:
        known = ", ".join(RAW_FEEDS)
        raise dg.Failure(description=f"unknown endpoint {config.source}/{config.endpoint}; known: {known}")
    try:
        record = abandon_batch(
            lake.session(), lake.catalog, raw_zone.zone(), feed, config.batch_id, config.reason, context.run_id
        )
    except EtrError as error:
        raise dg.Failure(description=str(error)) from None
    context.log.info(record["reason"])


@dg.job(name="abandon_raw_batch", description="Abandon a raw batch the source will not fix, with a reason (audited).")
def abandon_raw_batch():
    abandon_raw_batch_op()


@dg.asset_check(
    asset=table_key(SILVER_TRANSACTIONS),
    name="daily_growth",
    description="Rows now against 24 hours ago, read through Iceberg time travel; warns when the table shrank. "
    "Recorded in monitoring.data_quality_metrics.",
)
def silver_daily_growth(context: dg.AssetCheckExecutionContext, lake: LakeResource) -> dg.AssetCheckResult:
    spark = lake.session()
    growth = daily_growth(spark, SILVER_TRANSACTIONS.qualified(lake.catalog))
    passed = growth.added >= 0
    table = SILVER_TRANSACTIONS.identifier
    metrics = [Metric(table, "row_count", growth.rows_now, passed), Metric(table, "daily_growth", growth.added, passed)]
    record_metrics(spark, lake.catalog, metrics, context.run.run_id)
    return dg.AssetCheckResult(
        passed=passed,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"rows_now": growth.rows_now, "rows_24h_ago": growth.rows_before, "daily_growth": growth.added},
    )


def build_bootstrap_job(settings: Settings):
    @dg.op(
        name="create_databases_and_tables",
        description="Creates every database and Iceberg table declared in the specs that does not exist yet.",
    )
    def create_databases_and_tables(context: dg.OpExecutionContext, lake: LakeResource) -> None:
        if settings.profile == Profile.AWS:  # pyiceberg: Spark's GlueCatalog needs jars only Glue and EMR ship
            catalog = pyiceberg_catalog(settings)
            result = bootstrap_catalog(catalog, ALL_SPECS, settings.warehouse, settings.format_version)
        else:
            result = bootstrap_with_spark(lake.session(), lake.catalog, ALL_SPECS)
        context.log.info(result.describe())
        metadata = {
            "databases_created": len(result.created_namespaces),
            "tables_created": len(result.created_tables),
            "tables_existing": len(result.existing_tables),
            "created": ", ".join(result.created_namespaces + result.created_tables) or "nothing",
            "catalog": "glue" if settings.profile == Profile.AWS else settings.catalog,
        }
        context.add_output_metadata(metadata)

    @dg.job(
        name="bootstrap_lake",
        description="Create the Glue databases (or namespaces) and every Iceberg table from the specs. Safe to re-run.",
    )
    def bootstrap_lake():
        create_databases_and_tables()

    return bootstrap_lake
