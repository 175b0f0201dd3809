"""Every asset of etr_pipeline, one daily partition per business day, and the sensor for raw batches left pending.
Each table asset is one call of the layer runner; a partition range rebuilds its days in one commit per table."""

import datetime as dt

import dagster as dg
from pydantic import Field

from etr_assets.defs.common import (
    PIPELINE_GROUPS,
    SINGLE_RUN,
    as_metadata,
    daily_partitions,
    previous_day,
    record_days,
    table_asset,
    table_key,
)
from etr_assets.defs.resources import BnplApiResource, LakeResource, LayerRunner, RawZoneResource
from etr_assets.defs.run_guard import REFUSED
from etr_assets.lake.exhaustion import exhaustion
from etr_assets.lake.feeds import EntityFeed
from etr_assets.lake.figures import Tagged
from etr_assets.run_request import RunRequestError, days_of_run
from etr_assets.settings import Settings
from etr_assets.sources.fetch import ENDPOINTS, SOURCE, fetch_day
from etr_assets.tables.entities import GOLD_CUSTOMER_ACTIVITY, GOLD_CUSTOMER_PROFILES, LANDING_CUSTOMERS
from etr_assets.tables.feeds import CUSTOMERS, MERCHANTS, TRANSACTIONS
from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, GOLD_DAILY_SUMMARY, SILVER_TRANSACTIONS


def raw_key(endpoint: str) -> dg.AssetKey:
    return dg.AssetKey(["raw", f"{SOURCE}_{endpoint}"])


def build_assets(settings: Settings) -> list[dg.AssetsDefinition]:
    @table_asset(
        settings,
        BRONZE_TRANSACTIONS,
        [raw_key("transactions")],
        "Each day's newest raw batch, validated with the spec: accepted records as received with lineage "
        "columns, refused ones in bronze.quarantine_transactions. Marks the batch complete once committed.",
    )
    def bronze_bnpl_transactions_raw(
        context: dg.AssetExecutionContext, lake: LakeResource, raw_zone: RawZoneResource, layer_runner: LayerRunner
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

    raw = [_raw_asset(settings, endpoint) for endpoint in ENDPOINTS]
    transactions = [bronze_bnpl_transactions_raw, silver_bnpl_transactions_clean, gold_bnpl_daily_summary]
    feeds = [*_feed_assets(settings, CUSTOMERS), *_feed_assets(settings, MERCHANTS)]
    return raw + transactions + feeds + [gold_customer_activity, gold_customer_profiles]


def _raw_asset(settings: Settings, endpoint: str) -> dg.AssetsDefinition:
    what = "the day's transactions" if endpoint == "transactions" else f"the full {endpoint} list as of the day"

    @dg.asset(
        key=raw_key(endpoint),
        group_name="raw",
        partitions_def=daily_partitions(settings),
        backfill_policy=SINGLE_RUN,
        kinds={"python", "json"},
        description=f"Fetches {what} from the BNPL API into the raw zone as a new batch, exactly as received.",
    )
    def fetch(
        context: dg.AssetExecutionContext, bnpl_api: BnplApiResource, raw_zone: RawZoneResource
    ) -> dg.MaterializeResult:
        try:  # the job's first step: a run without a day, or with a reversed range, stops here in one line
            days_of_run(context.run.tags, settings.start_date)
        except RunRequestError as mistake:
            raise dg.Failure(description=str(mistake), metadata={REFUSED: True}) from None
        client, zone = bnpl_api.client(), raw_zone.zone()
        batches, records = {}, {}
        for day in map(dt.date.fromisoformat, context.partition_keys):
            try:
                batch, manifest = fetch_day(client, zone, endpoint, day)
            except OSError as failed:  # a full disk in one line naming it (the batch stays pending, never loaded half)
                doing, folders = f"fetching {endpoint} of {day} into the raw zone", {raw_zone.root: "the raw zone"}
                exhausted = exhaustion(failed, doing, {}, jvm_exit_code=lambda: None, folders=folders)
                if exhausted is None:
                    raise
                raise dg.Failure(description=str(exhausted)) from None
            batches[day.isoformat()] = batch.key
            records[day.isoformat()] = manifest.records
            context.log.info(f"{day}: {manifest.records} records in {len(manifest.files)} file(s) -> {batch.key}")
        figures = {
            "records_fetched": sum(records.values()),
            "rows_by_day": Tagged("json", records),  # each day's own on its partition (`record_days`)
            "batches": Tagged("json", batches),
            "raw_zone": Tagged("path", zone.storage.uri(f"{SOURCE}/{endpoint}")),
        }
        record_days(context, figures)
        return dg.MaterializeResult(metadata=as_metadata(figures))

    return fetch


# What must run again for a day whose raw batch was not loaded.
_RERUN_AFTER_RAW = {
    TRANSACTIONS.endpoint: (TRANSACTIONS.bronze, SILVER_TRANSACTIONS, GOLD_DAILY_SUMMARY),
    **{feed.raw.endpoint: (feed.raw.bronze, feed.landing) for feed in (CUSTOMERS, MERCHANTS)},
}


def build_pending_batches_sensor(settings: Settings):
    threshold = dt.timedelta(hours=settings.pending_alert_hours)

    @dg.sensor(
        name="raw_pending_batches",
        target=dg.AssetSelection.groups(*PIPELINE_GROUPS),
        minimum_interval_seconds=600,
        description=(
            f"Finds raw-zone batches still pending after {settings.pending_alert_hours:g} h (a load failed or never "
            "ran) and re-runs their day: from bronze if the download finished, from raw if it did not."
        ),
    )
    def raw_pending_batches(context: dg.SensorEvaluationContext, raw_zone: RawZoneResource):
        zone, now, requests, seen = raw_zone.zone(), dt.datetime.now(dt.UTC), [], []
        for endpoint in ENDPOINTS:
            for stale in zone.stale(SOURCE, endpoint, now, threshold):
                seen.append(
                    f"{stale.batch.key} ({stale.age.total_seconds() / 3600:.1f} h, "
                    f"{'downloaded' if stale.sealed else 'download incomplete'})"
                )
                selection = [] if stale.sealed else [raw_key(endpoint)]
                selection += [table_key(spec) for spec in _RERUN_AFTER_RAW[endpoint]]
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


def _feed_assets(settings: Settings, feed: EntityFeed) -> list[dg.AssetsDefinition]:
    endpoint, bronze, landing = feed.raw.endpoint, feed.raw.bronze, feed.landing

    @table_asset(
        settings,
        bronze,
        [raw_key(endpoint)],
        f"Every {endpoint} record of each day's snapshot, validated with the spec (refusals in "
        f"{feed.raw.quarantine.identifier}): the observations {landing.identifier}'s history is computed from.",
    )
    def load(
        context: dg.AssetExecutionContext, lake: LakeResource, raw_zone: RawZoneResource, layer_runner: LayerRunner
    ):
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
    def history(
        context: dg.AssetExecutionContext, config: HistoryConfig, lake: LakeResource, layer_runner: LayerRunner
    ):
        yield from layer_runner.run(context, lake, options={"full_refresh": config.full_refresh})

    return [load, history]


class HistoryConfig(dg.Config):
    full_refresh: bool = Field(
        default=False, description="Recompute the whole history from every bronze observation instead of extending it."
    )
