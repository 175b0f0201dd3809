"""A declared API source as a Dagster Component (docs/sources.md). Each `defs.yaml` under etr_assets/defs/sources/
becomes, per resource, `raw/<source>_<resource>` (batches with markers), its bronze table with quarantine, and for
entities its SCD2 history in landing: one asset group per source, with its own job and daily schedule (stopped)."""

import contextvars
import datetime as dt
import warnings
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import dagster as dg
from pydantic import Field

from etr_assets.defs.common import (
    SINGLE_RUN,
    as_metadata,
    daily_partitions,
    nightly_schedule,
    previous_day,
    record_days,
    table_asset,
    table_key,
)
from etr_assets.defs.resources import LakeResource, LayerRunner, RawZoneResource, SourceApiResource
from etr_assets.defs.run_guard import REFUSED
from etr_assets.errors import RunRequestError, SourceConfigError
from etr_assets.lake.exhaustion import exhaustion
from etr_assets.lake.feeds import EntityFeed, RawFeed
from etr_assets.lake.figures import Tagged
from etr_assets.lake.s3_costs import request_figures
from etr_assets.run_days import days_of_run
from etr_assets.settings import Settings
from etr_assets.sources.declaration import Resource, ResourceKind, declaration_files
from etr_assets.sources.fetch import fetch_day
from etr_assets.tables.declared import SHIPPED_SOURCES, SOURCES, DeclaredSource, source

# The settings the components of one `build_definitions` call build with (a Component is loaded without arguments).
_SETTINGS: contextvars.ContextVar[Settings | None] = contextvars.ContextVar("etr_settings", default=None)


class ApiSource(dg.Component, dg.Model, dg.Resolvable):
    """An HTTP API declared in YAML: client (base URL, auth, paginator, data selector) and resources (docs/sources.md).
    The file is parsed by etr_assets.sources.declaration, which names the file, line and field of any mistake."""

    # Passed through as written: the declaration has no templates, and etr_assets.sources.declaration checks it.
    name: str = Field(description="The source's name: its asset group, raw-zone folder and table prefix")
    description: str = ""
    client: Annotated[dict[str, Any], dg.Resolver.passthrough()] = Field(
        description="base_url, auth, paginator, data_selector, page_size, retries"
    )
    resources: Annotated[list[dict[str, Any]], dg.Resolver.passthrough()] = Field(
        description="The endpoints, each with its kind, columns and tables"
    )

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        return source_definitions(_SETTINGS.get() or Settings.from_env(), source(self.name))


def raw_key(feed: RawFeed) -> dg.AssetKey:
    return dg.AssetKey(["raw", f"{feed.source}_{feed.endpoint}"])


def source_job_name(source_name: str) -> str:
    return f"{source_name}_ingest"


def source_definitions(settings: Settings, declared: DeclaredSource) -> dg.Definitions:
    """Every asset of one declared source, its job (all of them for a day) and its daily schedule (stopped)."""
    assets = []
    for resource in declared.declaration.resources:
        assets.append(_raw_asset(settings, declared, resource))
        assets += _table_assets(settings, declared, resource, declared.feeds[resource.name])
    # As etr_pipeline: commits outside Dagster are judged by their own sensor, not by a run that is committing.
    outside = [
        dg.AssetCheckKey(key, "commits_outside_dagster") for a in assets for key in a.keys if key.path[0] != "raw"
    ]
    job = dg.define_asset_job(
        name=source_job_name(declared.name),
        selection=dg.AssetSelection.assets(*assets) - dg.AssetSelection.checks(*outside),
        description=f"Fetch a day from the {declared.name} API ({', '.join(declared.declaration.names)}) and load "
        "its bronze tables and histories.",
        partitions_def=daily_partitions(settings),
    )
    return dg.Definitions(assets=assets, jobs=[job], schedules=[nightly_schedule(job)])


def _raw_asset(settings: Settings, declared: DeclaredSource, resource: Resource) -> dg.AssetsDefinition:
    name, api = resource.name, f"{declared.name}_api"  # the resource `source_resources` makes
    feed = declared.raw_feed(name)
    what = resource.description or (
        f"the day's {name}" if resource.kind == ResourceKind.EVENTS else f"the {name} list as of the day"
    )

    @dg.asset(
        key=raw_key(feed),
        group_name=declared.name,
        partitions_def=daily_partitions(settings),
        backfill_policy=SINGLE_RUN,
        kinds={"python", "json"},
        required_resource_keys={api, "raw_zone"},
        description=f"Fetches {what} from the {declared.name} API ({resource.path}) into the raw zone as a new "
        "batch, exactly as received.",
    )
    def fetch(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        try:  # the code location's executor refuses such a run before any step (run_guard); another one stops here
            days_of_run(context.run.tags, settings.start_date, job=context.run.job_name)
        except RunRequestError as mistake:
            raise dg.Failure(description=str(mistake), metadata={REFUSED: True}) from None
        client_resource: SourceApiResource = getattr(context.resources, api)
        raw_zone: RawZoneResource = context.resources.raw_zone
        try:  # a variable the declaration names and the environment lacks: one line, before any request
            client = client_resource.client()
        except SourceConfigError as missing:
            raise dg.Failure(description=str(missing)) from None
        zone = raw_zone.zone()
        batches, records = {}, {}
        requests_before = +getattr(zone.storage, "requests", Counter())  # S3 only: a folder counts no request
        for day in map(dt.date.fromisoformat, context.partition_keys):
            try:
                batch, manifest = fetch_day(client, zone, name, day, run_id=context.run_id)
            except OSError as failed:  # a full disk in one line naming it (the batch stays pending, never loaded half)
                doing, folders = f"fetching {name} of {day} into the raw zone", {raw_zone.root: "the raw zone"}
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
            "raw_zone": Tagged("path", zone.storage.uri(f"{declared.name}/{name}")),
        }
        figures |= request_figures(getattr(zone.storage, "requests", Counter()) - requests_before)
        record_days(context, figures)
        return dg.MaterializeResult(metadata=as_metadata(figures))

    return fetch


def _table_assets(settings: Settings, declared: DeclaredSource, resource: Resource, feed) -> list:
    raw = feed.raw if isinstance(feed, EntityFeed) else feed
    group = declared.name

    @table_asset(
        settings,
        raw.bronze,
        [raw_key(raw)],
        f"Each day's newest raw batch of {resource.name}, validated with the declared columns and checks: accepted "
        f"records as received with lineage columns, refused ones in {raw.quarantine.identifier}. Marks the batch "
        "complete once committed.",
        group=group,
    )
    def load(
        context: dg.AssetExecutionContext, lake: LakeResource, raw_zone: RawZoneResource, layer_runner: LayerRunner
    ):
        yield from layer_runner.run(context, lake, raw_zone)

    if not isinstance(feed, EntityFeed):
        return [load]
    landing, scd2 = feed.landing, feed.landing.scd2
    ordered = (
        f"versions ordered by {scd2.sequence}"
        if resource.sequence
        else "versions start at the time of the snapshot that first showed them (the source sends no update time)"
    )

    @table_asset(
        settings,
        landing,
        [table_key(raw.bronze), previous_day(table_key(landing))],
        f"{resource.name.capitalize()} history as SCD2 ({feed.mode} snapshots): NULL-safe change detection over "
        f"{', '.join(scd2.tracked)}, {ordered}, one MERGE per run. A day in order is compared with the current "
        "versions; a late or re-sent day rewrites only the keys it changes, from the days since its change; a full "
        "refresh recomputes from every observation (metadata `history_method` and `history_reason` say which and why).",
        group=group,
    )
    def history(
        context: dg.AssetExecutionContext, config: HistoryConfig, lake: LakeResource, layer_runner: LayerRunner
    ):
        yield from layer_runner.run(context, lake, full_refresh=config.full_refresh)

    return [load, history]


class HistoryConfig(dg.Config):
    full_refresh: bool = Field(
        default=False, description="Recompute the whole history from every bronze observation instead of extending it."
    )


SHIPPED_DEFS = Path(str(SHIPPED_SOURCES))  # the defs folder of `dg` (pyproject.toml: defs_module)


def declared_definitions(settings: Settings) -> dg.Definitions:
    """Every declared source's definitions: the shipped ones as this defs folder's Components (what `dg` reads), each
    built by its path (the folder's root imports every installed integration's component types, a second a load)."""
    tree = dg.ComponentTree.for_project(path_within_project=SHIPPED_DEFS)
    token = _SETTINGS.set(settings)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dg.BetaWarning)  # Dagster's own code references of a component's assets
            files = declaration_files(SHIPPED_DEFS)
            shipped = [tree.build_defs_at_path(path.parent.relative_to(SHIPPED_DEFS)) for path in files]
    finally:
        _SETTINGS.reset(token)
    built = {declared.name for declared in SOURCES if declared.declaration.file in map(str, files)}
    extra = [source_definitions(settings, declared) for declared in SOURCES if declared.name not in built]
    return dg.Definitions.merge(*shipped, *extra)
