"""The transaction assets: raw -> bronze -> silver -> gold, one daily partition per business day.

Each asset is a thin call into `etr_assets.lake.transactions`; a run over a partition range (a single-run
backfill) rebuilds all of its days in one Spark job and one Iceberg commit per table.
"""

import datetime as dt
import warnings

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    BackfillPolicy,
    DailyPartitionsDefinition,
    MaterializeResult,
    MetadataValue,
    asset,
)
from dagster._utils.warnings import BetaWarning

from etr_assets.defs.metadata import commit_metadata, definition_metadata
from etr_assets.defs.resources import BnplApiResource, LakeResource, RawZoneResource
from etr_assets.lake import transactions as pipeline
from etr_assets.lake.specs import TableSpec
from etr_assets.lake.writes import table_location
from etr_assets.settings import Settings
from etr_assets.sources.fetch import fetch_day
from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, GOLD_DAILY_SUMMARY, SILVER_TRANSACTIONS

RAW_TRANSACTIONS = AssetKey(["raw", "bnpl_transactions"])

# BackfillPolicy is marked beta; single-run backfills are what `--partition-range` needs, so we accept it.
warnings.filterwarnings("ignore", category=BetaWarning, message=".*backfill_policy.*")


def daily_partitions(settings: Settings) -> DailyPartitionsDefinition:
    return DailyPartitionsDefinition(start_date=settings.start_date.isoformat(), timezone="UTC")


def table_key(spec: TableSpec) -> AssetKey:
    return AssetKey([spec.namespace, spec.name])


def days_of(context: AssetExecutionContext) -> list[dt.date]:
    return [dt.date.fromisoformat(key) for key in context.partition_keys]


def table_pool(settings: Settings, spec: TableSpec) -> str | None:
    """One writer per table at a time where the catalog cannot arbitrate commits (local Hadoop catalog)."""
    return f"iceberg_{spec.namespace}_{spec.name}" if settings.serialize_writers else None


def build_transaction_assets(settings: Settings) -> list[AssetsDefinition]:
    partitions = daily_partitions(settings)
    single_run = BackfillPolicy.single_run()

    @asset(
        key=RAW_TRANSACTIONS,
        group_name="raw",
        partitions_def=partitions,
        backfill_policy=single_run,
        kinds={"python", "json"},
        description="The day's BNPL transactions fetched from the provider's API into the raw zone, as received.",
    )
    def raw_bnpl_transactions(
        context: AssetExecutionContext, bnpl_api: BnplApiResource, raw_zone: RawZoneResource
    ) -> MaterializeResult:
        client, zone = bnpl_api.client(), raw_zone.zone()
        batches, records = {}, {}
        for day in days_of(context):
            batch, manifest = fetch_day(client, zone, "transactions", day)
            batches[day.isoformat()] = batch.key
            records[day.isoformat()] = manifest.records
            context.log.info(f"{day}: {manifest.records} records in {len(manifest.files)} file(s) -> {batch.key}")
        return MaterializeResult(
            metadata={
                "dagster/row_count": sum(records.values()),
                "records_by_day": MetadataValue.json(records),
                "batches": MetadataValue.json(batches),
                "raw_zone": MetadataValue.path(zone.storage.uri("bnpl/transactions")),
            }
        )

    def table_asset(spec: TableSpec, deps: list[AssetKey], description: str):
        return asset(
            key=table_key(spec),
            deps=deps,
            group_name=spec.namespace,
            partitions_def=partitions,
            backfill_policy=single_run,
            kinds={"iceberg", "spark"},
            pool=table_pool(settings, spec),
            description=description,
            metadata=definition_metadata(spec, settings.catalog),
        )

    def result(context, lake: LakeResource, spec: TableSpec, layer: pipeline.LayerResult) -> MaterializeResult:
        location = table_location(lake.session(), spec.qualified(lake.catalog))
        context.log.info(
            f"{spec.identifier}: replaced {len(layer.rows_by_day)} day(s) with {layer.rows} rows in snapshot "
            f"{layer.commit.snapshot_id} (+{layer.commit.added_files}/-{layer.commit.removed_files} files)"
        )
        return MaterializeResult(metadata=commit_metadata(layer, location))

    @table_asset(
        BRONZE_TRANSACTIONS,
        [RAW_TRANSACTIONS],
        "Each day's newest raw batch loaded as received, read with the spec's schema, with lineage columns. "
        "Marks the batch complete once committed.",
    )
    def bronze_bnpl_transactions_raw(
        context: AssetExecutionContext, lake: LakeResource, raw_zone: RawZoneResource
    ) -> MaterializeResult:
        layer = pipeline.load_bronze(lake.session(), lake.catalog, raw_zone.zone(), days_of(context))
        return result(context, lake, BRONZE_TRANSACTIONS, layer)

    @table_asset(
        SILVER_TRANSACTIONS,
        [table_key(BRONZE_TRANSACTIONS)],
        "Typed and validated transactions, one row per transaction id (latest update wins); "
        "each day replaced atomically.",
    )
    def silver_bnpl_transactions_clean(context: AssetExecutionContext, lake: LakeResource) -> MaterializeResult:
        layer = pipeline.build_silver(lake.session(), lake.catalog, days_of(context))
        return result(context, lake, SILVER_TRANSACTIONS, layer)

    @table_asset(
        GOLD_DAILY_SUMMARY,
        [table_key(SILVER_TRANSACTIONS)],
        "Daily summary per currency: counts by outcome, approved and refunded amounts, distinct customers.",
    )
    def gold_bnpl_daily_summary(context: AssetExecutionContext, lake: LakeResource) -> MaterializeResult:
        layer = pipeline.build_gold(lake.session(), lake.catalog, days_of(context))
        return result(context, lake, GOLD_DAILY_SUMMARY, layer)

    return [raw_bnpl_transactions, bronze_bnpl_transactions_raw, silver_bnpl_transactions_clean, gold_bnpl_daily_summary]
