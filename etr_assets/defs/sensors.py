"""Sensors: batches left pending in the raw zone are reported and re-run for their day."""

import datetime as dt

from dagster import AssetSelection, RunRequest, SensorEvaluationContext, SensorResult, SkipReason, sensor

from etr_assets.defs.common import PIPELINE_GROUPS, table_key
from etr_assets.defs.raw import raw_key
from etr_assets.defs.resources import RawZoneResource
from etr_assets.settings import Settings
from etr_assets.sources.fetch import ENDPOINTS, SOURCE
from etr_assets.tables.feeds import CUSTOMERS, MERCHANTS, TRANSACTIONS
from etr_assets.tables.transactions import GOLD_DAILY_SUMMARY, SILVER_TRANSACTIONS

# What must run again for a day whose raw batch was not loaded.
_RERUN_AFTER_RAW = {
    TRANSACTIONS.endpoint: (TRANSACTIONS.bronze, SILVER_TRANSACTIONS, GOLD_DAILY_SUMMARY),
    **{feed.raw.endpoint: (feed.raw.bronze, feed.landing) for feed in (CUSTOMERS, MERCHANTS)},
}


def build_pending_batches_sensor(settings: Settings):
    threshold = dt.timedelta(hours=settings.pending_alert_hours)

    @sensor(
        name="raw_pending_batches",
        target=AssetSelection.groups(*PIPELINE_GROUPS),
        minimum_interval_seconds=600,
        description=(
            f"Finds raw-zone batches still pending after {settings.pending_alert_hours:g} h (a load failed or never "
            "ran) and re-runs their day: from bronze if the download finished, from raw if it did not."
        ),
    )
    def raw_pending_batches(context: SensorEvaluationContext, raw_zone: RawZoneResource):
        zone = raw_zone.zone()
        now = dt.datetime.now(dt.UTC)
        requests, seen = [], []
        for endpoint in ENDPOINTS:
            for stale in zone.stale(SOURCE, endpoint, now, threshold):
                seen.append(
                    f"{stale.batch.key} ({stale.age.total_seconds() / 3600:.1f} h, "
                    f"{'downloaded' if stale.sealed else 'download incomplete'})"
                )
                selection = [table_key(spec) for spec in _RERUN_AFTER_RAW[endpoint]]
                if not stale.sealed:
                    selection = [raw_key(endpoint), *selection]
                requests.append(
                    RunRequest(
                        run_key=stale.batch.key,
                        partition_key=stale.batch.day.isoformat(),
                        asset_selection=selection,
                        tags={"etr/stale_batch": stale.batch.key},
                    )
                )
        if not requests:
            return SkipReason(f"no raw batch pending longer than {settings.pending_alert_hours:g} h")
        context.log.warning("pending raw batches: " + "; ".join(seen))
        return SensorResult(run_requests=requests)

    return raw_pending_batches
