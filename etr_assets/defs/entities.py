"""Customer and merchant assets: bronze (every record received) -> landing SCD2 history -> customer profiles.

Each is one call of the layer runner (`etr_assets.defs.compute`): in this run's Spark, or on Glue / EMR Serverless
through Dagster Pipes with ETR_COMPUTE, like the transaction assets."""

from dagster import AssetExecutionContext, AssetsDefinition, Config
from pydantic import Field

from etr_assets.defs.common import previous_day, table_asset, table_key
from etr_assets.defs.compute import LayerRunner
from etr_assets.defs.raw import raw_key
from etr_assets.defs.resources import LakeResource, RawZoneResource
from etr_assets.lake.feeds import EntityFeed
from etr_assets.settings import Settings
from etr_assets.tables.entities import GOLD_CUSTOMER_ACTIVITY, GOLD_CUSTOMER_PROFILES, LANDING_CUSTOMERS
from etr_assets.tables.feeds import CUSTOMERS, MERCHANTS
from etr_assets.tables.transactions import SILVER_TRANSACTIONS


def build_entity_assets(settings: Settings) -> list[AssetsDefinition]:
    assets = [*_feed_assets(settings, CUSTOMERS), *_feed_assets(settings, MERCHANTS)]

    @table_asset(
        settings,
        GOLD_CUSTOMER_ACTIVITY,
        [table_key(SILVER_TRANSACTIONS), previous_day(table_key(GOLD_CUSTOMER_ACTIVITY))],
        "Each customer's transactions, approved amount and latest transaction up to the end of the day: the day "
        "before's figures plus the day's silver rows (a day never reads all of silver).",
    )
    def gold_customer_activity(context: AssetExecutionContext, lake: LakeResource, layer_runner: LayerRunner):
        yield from layer_runner.run(context, lake)

    @table_asset(
        settings,
        GOLD_CUSTOMER_PROFILES,
        [table_key(LANDING_CUSTOMERS), table_key(GOLD_CUSTOMER_ACTIVITY)],
        "Each customer as of the end of the day (the SCD2 version valid then) with their activity up to it.",
    )
    def gold_customer_profiles(context: AssetExecutionContext, lake: LakeResource, layer_runner: LayerRunner):
        yield from layer_runner.run(context, lake)

    return assets + [gold_customer_activity, gold_customer_profiles]


def _feed_assets(settings: Settings, feed: EntityFeed) -> list[AssetsDefinition]:
    endpoint, bronze, landing = feed.raw.endpoint, feed.raw.bronze, feed.landing

    @table_asset(
        settings,
        bronze,
        [raw_key(endpoint)],
        f"Every {endpoint} record of each day's snapshot, validated with the spec (refusals in "
        f"{feed.raw.quarantine.identifier}): the observations {landing.identifier}'s history is computed from.",
    )
    def load(context: AssetExecutionContext, lake: LakeResource, raw_zone: RawZoneResource, layer_runner: LayerRunner):
        yield from layer_runner.run(context, lake, raw_zone)

    @table_asset(
        settings,
        landing,
        [table_key(bronze), previous_day(table_key(landing))],
        f"{endpoint.capitalize()} history as SCD2 ({feed.mode} snapshots): NULL-safe change detection over "
        f"{', '.join(landing.scd2.tracked)}, versions ordered by {landing.scd2.sequence}, one MERGE per run. "
        f"A day in order is compared with the current versions; a late or re-sent day rewrites only the keys it "
        f"changes, from the days since its change; a full refresh recomputes from every observation (metadata "
        f"`history_method` and `history_reason` say which and why).",
    )
    def history(context: AssetExecutionContext, config: HistoryConfig, lake: LakeResource, layer_runner: LayerRunner):
        yield from layer_runner.run(context, lake, options={"full_refresh": config.full_refresh})

    return [load, history]


class HistoryConfig(Config):
    full_refresh: bool = Field(
        default=False, description="Recompute the whole history from every bronze observation instead of extending it."
    )
