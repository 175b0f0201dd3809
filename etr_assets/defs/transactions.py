"""The transaction assets: bronze -> silver -> gold, one daily partition per business day.

Each asset is a thin call into `etr_assets.pipeline.transactions`; a run over a partition range (a single-run
backfill) rebuilds all of its days in one Spark job and one Iceberg commit per table.
"""

from dagster import AssetExecutionContext, AssetRecordsFilter, AssetsDefinition, Config
from pydantic import Field

from etr_assets.defs.common import table_asset, table_key
from etr_assets.defs.compute import LayerRunner
from etr_assets.defs.raw import raw_key
from etr_assets.defs.resources import LakeResource, RawZoneResource
from etr_assets.settings import Settings
from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, GOLD_DAILY_SUMMARY, SILVER_TRANSACTIONS


def build_transaction_assets(settings: Settings) -> list[AssetsDefinition]:
    @table_asset(
        settings,
        BRONZE_TRANSACTIONS,
        [raw_key("transactions")],
        "Each day's newest raw batch, validated with the spec: accepted records as received with lineage "
        "columns, refused ones in bronze.quarantine_transactions. Marks the batch complete once committed.",
    )
    def bronze_bnpl_transactions_raw(
        context: AssetExecutionContext, lake: LakeResource, raw_zone: RawZoneResource, layer_runner: LayerRunner
    ):
        yield from layer_runner.run(context, lake, raw_zone)

    @table_asset(
        settings,
        SILVER_TRANSACTIONS,
        [table_key(BRONZE_TRANSACTIONS)],
        "Typed and validated transactions, one row per transaction id (latest update wins). Each day reads only "
        "the bronze rows appended since it was last built (or the whole day when bronze rewrote it), is replaced "
        "atomically on an audit branch, and is published only when the blocking checks pass. A transaction that breaks "
        "a per-record expectation waits in silver.quarantine_transactions; the rest of its day publishes.",
    )
    def silver_bnpl_transactions_clean(
        context: AssetExecutionContext, config: SilverConfig, lake: LakeResource, layer_runner: LayerRunner
    ):
        options = {"cursors": silver_cursors(context), "full_refresh": config.full_refresh}
        yield from layer_runner.run(context, lake, options=options)

    @table_asset(
        settings,
        GOLD_DAILY_SUMMARY,
        [table_key(SILVER_TRANSACTIONS)],
        "Daily summary per currency: counts by outcome, approved and refunded amounts, distinct customers; "
        "published through write-audit-publish.",
    )
    def gold_bnpl_daily_summary(context: AssetExecutionContext, lake: LakeResource, layer_runner: LayerRunner):
        yield from layer_runner.run(context, lake)

    return [bronze_bnpl_transactions_raw, silver_bnpl_transactions_clean, gold_bnpl_daily_summary]


class SilverConfig(Config):
    full_refresh: bool = Field(
        default=False, description="Read every bronze row of the days instead of only what was appended since"
    )


def silver_cursors(context: AssetExecutionContext) -> dict[str, list[int | None] | None]:
    """Per day, the bronze and silver snapshots recorded by the latest materialization of that partition (as JSON:
    the request may travel to a remote job; `pipeline.layers` makes them `Cursor`s)."""
    cursors = {}
    for day in context.partition_keys:
        records = context.instance.fetch_materializations(
            AssetRecordsFilter(asset_key=context.asset_key, asset_partitions=[day]), limit=1
        ).records
        metadata = records[0].asset_materialization.metadata if records else {}
        upstream = _snapshot_id(metadata.get("bronze_snapshot_id"))
        cursors[day] = [upstream, _snapshot_id(metadata.get("silver_snapshot_id"))] if upstream else None
    return cursors


def _snapshot_id(value) -> int | None:
    text = str(getattr(value, "value", "") or "")
    return int(text) if text.isdigit() else None
