"""The pipeline's own assets (silver and gold, in Python on top of the BNPL source's declared tables), one daily
partition per business day, and the sensor for raw batches left pending of any declared source. Each table asset is
one call of the layer runner; a partition range rebuilds its days in one commit per table."""

import datetime as dt

import dagster as dg
from pydantic import Field

from etr_assets.defs.api_source import raw_key, source_job_name
from etr_assets.defs.common import IN_FLIGHT, previous_day, table_asset, table_key
from etr_assets.defs.resources import LakeResource, LayerRunner, RawZoneResource
from etr_assets.defs.run_guard import is_dead
from etr_assets.lake.specs import TableSpec
from etr_assets.settings import Settings
from etr_assets.tables.entities import GOLD_CUSTOMER_ACTIVITY, GOLD_CUSTOMER_PROFILES, LANDING_CUSTOMERS
from etr_assets.tables.feeds import ENTITY_FEEDS, RAW_FEEDS, TRANSACTIONS
from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, GOLD_DAILY_SUMMARY, SILVER_TRANSACTIONS

PIPELINE_SOURCE = TRANSACTIONS.source  # the declared source silver and gold are built from: etr_pipeline runs it all
PIPELINE_JOB = "etr_pipeline"  # every layer of PIPELINE_SOURCE, silver and gold (definitions.py)


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
        yield from layer_runner.run(context, lake, full_refresh=config.full_refresh)

    def gold(spec: TableSpec, deps: list[dg.AssetKey | dg.AssetDep], description: str) -> dg.AssetsDefinition:
        @table_asset(settings, spec, deps, description)
        def build(context: dg.AssetExecutionContext, lake: LakeResource, layer_runner: LayerRunner):
            yield from layer_runner.run(context, lake)

        return build

    return [
        silver_bnpl_transactions_clean,
        gold(
            GOLD_DAILY_SUMMARY,
            [table_key(SILVER_TRANSACTIONS)],
            "Daily summary per currency: counts by outcome, approved and refunded amounts, distinct customers; "
            "published through write-audit-publish.",
        ),
        gold(
            GOLD_CUSTOMER_ACTIVITY,
            [table_key(SILVER_TRANSACTIONS), previous_day(table_key(GOLD_CUSTOMER_ACTIVITY))],
            "Each customer's transactions, approved amount and latest transaction up to the end of the day: the day "
            "before's figures plus the day's silver rows (a day never reads all of silver).",
        ),
        gold(
            GOLD_CUSTOMER_PROFILES,
            [table_key(LANDING_CUSTOMERS), table_key(GOLD_CUSTOMER_ACTIVITY)],
            "Each customer as of the end of the day (the SCD2 version valid then) with their activity up to it.",
        ),
    ]


# What must run again for a day whose raw batch was not loaded.
# A feed's bronze and history, and what the pipeline builds from them the same day.
_RERUN_AFTER_RAW = {
    **{(feed.source, feed.endpoint): (feed.bronze,) for feed in RAW_FEEDS},
    **{(feed.raw.source, feed.raw.endpoint): (feed.raw.bronze, feed.landing) for feed in ENTITY_FEEDS},
    (TRANSACTIONS.source, TRANSACTIONS.endpoint): (BRONZE_TRANSACTIONS, SILVER_TRANSACTIONS, GOLD_DAILY_SUMMARY),
}


STALE_TAG = "etr/stale_batch"  # a re-run's batch (the newest open one of its endpoint and day)
TRY_TAG = "etr/retry"  # a re-run after a failed run: its number, 1..MAX_TRIES, counted along the batch's runs
MAX_TRIES = 3
_IN_PROGRESS = [*IN_FLIGHT, dg.DagsterRunStatus.CANCELING]  # IN_FLIGHT, or being cancelled: not ended


def rerun_selection(feed, sealed: bool) -> list[dg.AssetKey]:
    """What runs again for a pending batch: from bronze if its download finished, else from raw."""
    keys = [] if sealed else [raw_key(feed)]
    return keys + [table_key(spec) for spec in _RERUN_AFTER_RAW[feed.source, feed.endpoint]]


def rerun_job(feed) -> str:
    """The job a re-run of the feed's day runs as: its source's `<source>_ingest` when that job holds every asset
    of the re-run (raw, bronze, history), else etr_pipeline (transactions: silver and gold too)."""
    own = [f for f in RAW_FEEDS if f.source == feed.source]
    ingested = {raw_key(f) for f in own} | {table_key(f.bronze) for f in own}
    ingested |= {table_key(f.landing) for f in ENTITY_FEEDS if f.raw.source == feed.source}
    if set(rerun_selection(feed, sealed=False)) <= ingested:
        return source_job_name(feed.source)
    if feed.source != PIPELINE_SOURCE:
        raise ValueError(f"a re-run of {feed.source}/{feed.endpoint} needs assets outside {feed.source}'s job")
    return PIPELINE_JOB


def batch_run(instance: dg.DagsterInstance, open_batch) -> dg.DagsterRun | None:
    """The run that last had the batch: the newest re-run of it, else the run that started it (None: unknown)."""
    if reruns := instance.get_runs(filters=dg.RunsFilter(tags={STALE_TAG: open_batch.batch.key}), limit=1):
        return reruns[0]
    return instance.get_run_by_id(open_batch.run_id) if open_batch.run_id else None


def build_pending_batches_sensor(settings: Settings, jobs):
    """The sensor re-running days whose raw batch is still pending, as the named jobs `jobs` (`rerun_job`)."""
    threshold = dt.timedelta(hours=settings.pending_alert_hours)
    if missing := {rerun_job(feed) for feed in RAW_FEEDS} - {job.name for job in jobs}:
        raise ValueError(f"raw_pending_batches re-runs days as {', '.join(sorted(missing))}: not among its jobs")

    @dg.sensor(
        name="raw_pending_batches",
        jobs=jobs,
        minimum_interval_seconds=600,
        description=(
            "Re-runs the day of a raw-zone batch still pending (a load failed or never ran): from bronze if the "
            "download finished, from raw if it did not, as the source's ingest job (etr_pipeline for transactions). "
            f"At once when the run that had the batch ended in failure or its process died, at most {MAX_TRIES} "
            f"times a batch; when that run is unknown or succeeded, after {settings.pending_alert_hours:g} h."
        ),
    )
    def raw_pending_batches(context: dg.SensorEvaluationContext, raw_zone: RawZoneResource):
        zone, now, instance = raw_zone.zone(), dt.datetime.now(dt.UTC), context.instance
        requests, seen, waiting, gave_up = [], [], [], []
        for feed in RAW_FEEDS:
            newest = {b.batch.day: b for b in zone.open_batches(feed.source, feed.endpoint, now)}  # oldest first
            for open_batch in newest.values():  # a day's newest batch: loading it settles the older ones
                key, hours = open_batch.batch.key, open_batch.age.total_seconds() / 3600
                run = batch_run(instance, open_batch)
                ended = run is not None and (
                    run.status in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)
                    or (run.status in _IN_PROGRESS and is_dead(run.tags))
                )
                tries = int(run.tags.get(TRY_TAG, "0")) if ended else 0
                if run is not None and run.status in _IN_PROGRESS and not ended:
                    waiting.append(f"{key} (run {run.run_id[:8]} {run.status.value})")
                    continue
                if ended and tries >= MAX_TRIES:
                    gave_up.append(f"{key} (run {run.run_id[:8]}, try {tries}, {run.status.value})")
                    continue
                if not ended and open_batch.age < threshold:
                    continue  # its run is unknown or succeeded: the threshold gives a load time to come
                why = f"run {run.run_id[:8]} {run.status.value}, try {tries + 1} of {MAX_TRIES}" if ended else None
                state = "downloaded" if open_batch.sealed else "download incomplete"
                seen.append(f"{key} ({hours:.1f} h, {state}, {why or 'pending past the threshold'})")
                request = dg.RunRequest(
                    run_key=f"{key}#{tries + 1}" if ended else key,  # one run a try (a batch, past the threshold)
                    job_name=rerun_job(feed),
                    partition_key=open_batch.batch.day.isoformat(),
                    asset_selection=rerun_selection(feed, open_batch.sealed),
                    tags={STALE_TAG: key} | ({TRY_TAG: str(tries + 1)} if ended else {}),
                )
                requests.append(request)
        if gave_up:
            context.log.warning(
                f"raw batches whose day failed {MAX_TRIES} re-runs, left pending (run the day once fixed, or close the "
                "batch with abandon_raw_batch): " + "; ".join(gave_up)
            )
        if not requests:
            reasons = [f"waiting for their run: {'; '.join(waiting)}"] if waiting else []
            reasons += [f"given up after {MAX_TRIES} re-runs: {'; '.join(gave_up)}"] if gave_up else []
            h = settings.pending_alert_hours
            return dg.SkipReason(
                "; ".join(reasons or [f"no raw batch whose run failed or pending longer than {h:g} h"])
            )
        context.log.warning("re-running the days of pending raw batches: " + "; ".join(seen))
        return dg.SensorResult(run_requests=requests)

    return raw_pending_batches


class SilverConfig(dg.Config):
    full_refresh: bool = Field(
        default=False, description="Read every bronze row of the days instead of only what was appended since"
    )
