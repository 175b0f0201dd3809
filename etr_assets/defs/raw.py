"""Raw assets: each API endpoint's day fetched into the raw zone as a new batch (pending until loaded)."""

import datetime as dt

from dagster import AssetExecutionContext, AssetKey, AssetsDefinition, Failure, MaterializeResult, MetadataValue, asset

from etr_assets.defs.common import SINGLE_RUN, daily_partitions, log_partition_counts
from etr_assets.defs.resources import BnplApiResource, RawZoneResource
from etr_assets.lake.exhaustion import exhaustion
from etr_assets.lake.figures import Tagged
from etr_assets.run_request import RunRequestError, days_of_run
from etr_assets.settings import Settings
from etr_assets.sources.fetch import ENDPOINTS, SOURCE, fetch_day


def raw_key(endpoint: str) -> AssetKey:
    return AssetKey(["raw", f"{SOURCE}_{endpoint}"])


def build_raw_assets(settings: Settings) -> list[AssetsDefinition]:
    return [_raw_asset(settings, endpoint) for endpoint in ENDPOINTS]


def _raw_asset(settings: Settings, endpoint: str) -> AssetsDefinition:
    what = "the day's transactions" if endpoint == "transactions" else f"the full {endpoint} list as of the day"

    @asset(
        key=raw_key(endpoint),
        group_name="raw",
        partitions_def=daily_partitions(settings),
        backfill_policy=SINGLE_RUN,
        kinds={"python", "json"},
        description=f"Fetches {what} from the BNPL API into the raw zone as a new batch, exactly as received.",
    )
    def fetch(
        context: AssetExecutionContext, bnpl_api: BnplApiResource, raw_zone: RawZoneResource
    ) -> MaterializeResult:
        try:  # the job's first steps: a run without a day, or with a reversed range, stops here in one line
            days_of_run(context.run.tags, settings.start_date)
        except RunRequestError as mistake:
            raise Failure(description=str(mistake)) from None
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
                raise Failure(description=str(exhausted)) from None
            batches[day.isoformat()] = batch.key
            records[day.isoformat()] = manifest.records
            context.log.info(f"{day}: {manifest.records} records in {len(manifest.files)} file(s) -> {batch.key}")
        log_partition_counts(context, {"rows_by_day": Tagged("json", records)})
        return MaterializeResult(
            metadata={
                "records_fetched": sum(records.values()),
                **({"dagster/partition_row_count": sum(records.values())} if len(records) == 1 else {}),
                "records_by_day": MetadataValue.json(records),
                "batches": MetadataValue.json(batches),
                "raw_zone": MetadataValue.path(zone.storage.uri(f"{SOURCE}/{endpoint}")),
            }
        )

    return fetch
