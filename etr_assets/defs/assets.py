"""The pipeline's own assets (silver and gold, in Python on top of the BNPL source's declared tables), one daily
partition per business day, and the sensor for raw batches left pending of any declared source. Each table asset is
one call of the layer runner; a partition range rebuilds its days in one commit per table."""

import datetime as dt

import dagster as dg
from pydantic import Field

from etr_assets.defs.api_source import raw_key
from etr_assets.defs.common import previous_day, table_asset, table_key
from etr_assets.defs.resources import LakeResource, LayerRunner, RawZoneResource
from etr_assets.settings import Settings
from etr_assets.tables.entities import GOLD_CUSTOMER_ACTIVITY, GOLD_CUSTOMER_PROFILES, LANDING_CUSTOMERS
from etr_assets.tables.feeds import ENTITY_FEEDS, RAW_FEEDS, TRANSACTIONS
from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, GOLD_DAILY_SUMMARY, SILVER_TRANSACTIONS

PIPELINE_SOURCE = TRANSACTIONS.source  # the declared source silver and gold are built from: etr_pipeline runs it all


def build_assets(settings: Settings) -> list[dg.AssetsDefinition]:
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
        context: dg.AssetExecutionContext, config: SilverConfig, lake: LakeResource, layer_runner: LayerRunner
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
    def gold_bnpl_daily_summary(context: dg.AssetExecutionContext, lake: LakeResource, layer_runner: LayerRunner):
        yield from layer_runner.run(context, lake)

    @table_asset(
        settings,
        GOLD_CUSTOMER_ACTIVITY,
        [table_key(SILVER_TRANSACTIONS), previous_day(table_key(GOLD_CUSTOMER_ACTIVITY))],
        "Each customer's transactions, approved amount and latest transaction up to the end of the day: the day "
        "before's figures plus the day's silver rows (a day never reads all of silver).",
    )
    def gold_customer_activity(context: dg.AssetExecutionContext, lake: LakeResource, layer_runner: LayerRunner):
        yield from layer_runner.run(context, lake)

    @table_asset(
        settings,
        GOLD_CUSTOMER_PROFILES,
        [table_key(LANDING_CUSTOMERS), table_key(GOLD_CUSTOMER_ACTIVITY)],
        "Each customer as of the end of the day (the SCD2 version valid then) with their activity up to it.",
    )
    def gold_customer_profiles(context: dg.AssetExecutionContext, lake: LakeResource, layer_runner: LayerRunner):
        yield from layer_runner.run(context, lake)

    return [silver_bnpl_transactions_clean, gold_bnpl_daily_summary, gold_customer_activity, gold_customer_profiles]


# What must run again for a day whose raw batch was not loaded.
# A feed's bronze and history, and what the pipeline builds from them the same day.
_RERUN_AFTER_RAW = {
    **{(feed.source, feed.endpoint): (feed.bronze,) for feed in RAW_FEEDS},
    **{(feed.raw.source, feed.raw.endpoint): (feed.raw.bronze, feed.landing) for feed in ENTITY_FEEDS},
    (TRANSACTIONS.source, TRANSACTIONS.endpoint): (BRONZE_TRANSACTIONS, SILVER_TRANSACTIONS, GOLD_DAILY_SUMMARY),
}


def build_pending_batches_sensor(settings: Settings):
    threshold = dt.timedelta(hours=settings.pending_alert_hours)

    @dg.sensor(
        name="raw_pending_batches",
        target=dg.AssetSelection.all(),
        minimum_interval_seconds=600,
        description=(
            f"Finds raw-zone batches still pending after {settings.pending_alert_hours:g} h (a load failed or never "
            "ran) and re-runs their day: from bronze if the download finished, from raw if it did not."
        ),
    )
    def raw_pending_batches(context: dg.SensorEvaluationContext, raw_zone: RawZoneResource):
        zone, now, requests, seen = raw_zone.zone(), dt.datetime.now(dt.UTC), [], []
        for feed in RAW_FEEDS:
            for stale in zone.stale(feed.source, feed.endpoint, now, threshold):
                seen.append(
                    f"{stale.batch.key} ({stale.age.total_seconds() / 3600:.1f} h, "
                    f"{'downloaded' if stale.sealed else 'download incomplete'})"
                )
                selection = [] if stale.sealed else [raw_key(feed)]
                selection += [table_key(spec) for spec in _RERUN_AFTER_RAW[feed.source, feed.endpoint]]
                requests.append(
                    dg.RunRequest(
                        run_key=stale.batch.key,
                        partition_key=stale.batch.day.isoformat(),
                        asset_selection=selection,
                        tags={"etr/stale_batch": stale.batch.key},
                    )
                )
        if not requests:
            return dg.SkipReason(f"no raw batch pending longer than {settings.pending_alert_hours:g} h")
        context.log.warning("pending raw batches: " + "; ".join(seen))
        return dg.SensorResult(run_requests=requests)

    return raw_pending_batches


class SilverConfig(dg.Config):
    full_refresh: bool = Field(
        default=False, description="Read every bronze row of the days instead of only what was appended since"
    )


def silver_cursors(context: dg.AssetExecutionContext) -> dict[str, list[int | None] | None]:
    """Per day, the bronze and silver snapshots its latest materialization recorded (JSON: it may go remote)."""
    cursors = {}
    for day in context.partition_keys:
        records = context.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=context.asset_key, asset_partitions=[day]), limit=1
        ).records
        metadata = records[0].asset_materialization.metadata if records else {}
        upstream = _snapshot_id(metadata.get("bronze_snapshot_id"))
        cursors[day] = [upstream, _snapshot_id(metadata.get("silver_snapshot_id"))] if upstream else None
    return cursors


def _snapshot_id(value) -> int | None:
    text = str(getattr(value, "value", "") or "")
    return int(text) if text.isdigit() else None
