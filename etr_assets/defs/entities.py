"""Customer and merchant assets: bronze (every record received) -> landing SCD2 history -> customer profiles."""

from dagster import (
    AssetExecutionContext,
    AssetsDefinition,
    Config,
    MaterializeResult,
    MetadataValue,
)
from pydantic import Field

from etr_assets.defs.common import (
    days_of,
    quality_results,
    quarantine_check,
    table_asset,
    table_key,
    table_result,
)
from etr_assets.defs.raw import raw_key
from etr_assets.defs.resources import LakeResource, RawZoneResource
from etr_assets.lake import entities as pipeline
from etr_assets.lake.writes import table_location
from etr_assets.settings import Settings
from etr_assets.tables.entities import GOLD_CUSTOMER_PROFILES, LANDING_CUSTOMERS
from etr_assets.tables.transactions import SILVER_TRANSACTIONS


def build_entity_assets(settings: Settings) -> list[AssetsDefinition]:
    assets = []
    for feed in (pipeline.CUSTOMERS, pipeline.MERCHANTS):
        assets += _feed_assets(settings, feed)

    @table_asset(
        settings,
        GOLD_CUSTOMER_PROFILES,
        [table_key(LANDING_CUSTOMERS), table_key(SILVER_TRANSACTIONS)],
        "Each customer as of the end of the day (the SCD2 version valid then) with their transactions up to it.",
    )
    def gold_customer_profiles(context: AssetExecutionContext, lake: LakeResource) -> MaterializeResult:
        layer = pipeline.build_customer_profiles(lake.session(), lake.catalog, days_of(context))
        return table_result(context, lake, GOLD_CUSTOMER_PROFILES, layer)

    return assets + [gold_customer_profiles]


def _feed_assets(settings: Settings, feed: pipeline.EntityFeed) -> list[AssetsDefinition]:
    endpoint, bronze, landing = feed.raw.endpoint, feed.raw.bronze, feed.landing

    @table_asset(
        settings,
        bronze,
        [raw_key(endpoint)],
        f"Every {endpoint} record of each day's snapshot, validated with the spec (refusals in "
        f"{feed.raw.quarantine.identifier}): the observations {landing.identifier}'s history is computed from.",
        extra_checks=(quarantine_check(bronze),),
    )
    def load(context: AssetExecutionContext, lake: LakeResource, raw_zone: RawZoneResource) -> MaterializeResult:
        layer = pipeline.load_bronze(
            lake.session(),
            lake.catalog,
            raw_zone.zone(),
            feed,
            days_of(context),
            raw_zone.max_reject_rate,
            raw_zone.max_day_shrink,
        )
        return table_result(context, lake, bronze, layer)

    @table_asset(
        settings,
        landing,
        [table_key(bronze)],
        f"{endpoint.capitalize()} history as SCD2 ({feed.mode} snapshots): NULL-safe change detection over "
        f"{', '.join(landing.scd2.tracked)}, versions ordered by {landing.scd2.sequence}, one MERGE per run. "
        f"Extended from the bronze rows appended since the last build when they all come after it, else "
        f"recomputed from every observation (metadata `history_method` and `history_reason` say which and why).",
    )
    def history(context: AssetExecutionContext, config: HistoryConfig, lake: LakeResource) -> MaterializeResult:
        spark = lake.session()
        result = pipeline.build_landing(spark, lake.catalog, feed, days_of(context), config.full_refresh)
        table = landing.qualified(lake.catalog)
        counts = spark.sql(f"SELECT count(*), count_if(_is_current) FROM {table}").first()
        context.log.info(
            f"{landing.identifier}: +{result.inserted} versions, {result.updated} updated, {result.deleted} removed "
            + (f"in snapshot {result.snapshot_id}" if result.changed else "(no change, nothing committed)")
            + f"; {result.method}: {result.reason}"
        )
        return MaterializeResult(
            metadata={
                "dagster/row_count": counts[0],
                "current_rows": counts[1],
                "versions_inserted": result.inserted,
                "versions_updated": result.updated,
                "versions_removed": result.deleted,
                "history_method": result.method,
                "history_reason": result.reason,
                "snapshot_id": str(result.snapshot_id) if result.changed else "no change",
                "table": table,
                "table_uri": MetadataValue.path(table_location(spark, table)),
            },
            check_results=quality_results(context, lake, landing, days_of(context)),
        )

    return [load, history]


class HistoryConfig(Config):
    full_refresh: bool = Field(
        default=False,
        description="Recompute the whole history from every bronze observation instead of extending it.",
    )
