"""Every table layer of the pipeline, by asset key, and the one way to run, finish and report it: the same
`Report` whether the layer ran in process or in a Glue/EMR job (one Pipes message), so the two ways cannot drift."""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from etr_assets.errors import AuditFailed
from etr_assets.lake.bronze import load_bronze_days
from etr_assets.lake.evolve import TableChanges
from etr_assets.lake.exhaustion import exhaustion
from etr_assets.lake.feeds import EntityFeed
from etr_assets.lake.figures import Tagged, WriteResult, layer_figures
from etr_assets.lake.quality import CheckOutcome, Severity, metrics_of, post_write_outcomes, record_metrics
from etr_assets.lake.s3_costs import request_figures, s3a_request_counts
from etr_assets.lake.specs import CURRENT_VERSIONS, TableSpec
from etr_assets.lake.writes import CommitInfo, commit_of, current_snapshot_id, rows_where_null, table_location
from etr_assets.pipeline import contract, entities, transactions
from etr_assets.pipeline.contract import BronzeRequest, FinishedLayer, LayerRequest, RebuildRequest, Report
from etr_assets.sources.raw_zone import RawZone
from etr_assets.tables.entities import GOLD_CUSTOMER_ACTIVITY, GOLD_CUSTOMER_PROFILES
from etr_assets.tables.feeds import ENTITY_FEEDS, RAW_FEEDS
from etr_assets.tables.transactions import GOLD_DAILY_SUMMARY, SILVER_TRANSACTIONS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# A build: (spark, catalog, the raw zone (opened only by layers that read it), its request) -> what it wrote.
Build = Callable[["SparkSession", str, Callable[[], RawZone], Any], WriteResult]


@dataclasses.dataclass(frozen=True)
class Layer:
    spec: TableSpec
    build: Build
    request_type: type[LayerRequest] = LayerRequest  # what it takes beyond its days

    def request(self, days: list[str], audit_branch: str | None = None, **options) -> LayerRequest:
        """This layer's request; an option it does not take is a TypeError naming it."""
        return self.request_type(layer_name(self.spec), list(days), audit_branch, **options)


def request_from_extras(extras: dict) -> LayerRequest:
    """The request a remote job was sent (its Pipes extras), typed as its layer takes it."""
    if extras.get("layer") not in LAYERS:
        raise ValueError(f"unknown layer {extras.get('layer')!r}; a layer is one of {', '.join(LAYERS)}")
    return contract.request_from_extras(extras, LAYERS[extras["layer"]].request_type)


def run_layer(spark, catalog: str, raw: Callable[[], RawZone], request: LayerRequest, run_id: str) -> FinishedLayer:
    """Build the layer, then run its remaining checks, record their figures and gather the materialization's (with
    the S3 requests the step made, where S3A counts them)."""
    requests_before, zones = s3a_request_counts(spark, catalog), []

    def counted_raw() -> RawZone:  # the raw zone's own requests (markers, listings) count too, on S3
        zone = raw()
        zones.append((zone, +getattr(zone.storage, "requests", Counter())))
        return zone

    result = LAYERS[request.layer].build(spark, catalog, counted_raw, request)
    finished = finish_layer(spark, catalog, request, result, run_id)
    made = s3a_request_counts(spark, catalog) - requests_before
    for zone, before in zones:
        made += getattr(zone.storage, "requests", Counter()) - before
    finished.figures.update(request_figures(made))
    return finished


def finish_layer(spark, catalog: str, request: LayerRequest, result: WriteResult, run_id: str) -> FinishedLayer:
    """What follows a layer's build: its remaining checks, their figures recorded, the materialization's figures."""
    layer = LAYERS[request.layer]
    done = {o.name for o in result.checks}
    pending = not any(c.name in done for c in layer.spec.expectations)
    outcomes = list(result.checks) + post_write_outcomes(
        spark, catalog, layer.spec, request.dates, pending, result.written_rows
    )
    if layer.spec in DERIVED_SPECS:
        outcomes.append(built_up_to_date(request.days, result.extra.get(entities.SUMMED_FROM_ALL_OF_SILVER, "none")))
    record_metrics(spark, catalog, metrics_of(layer.spec, outcomes), run_id)
    table = layer.spec.qualified(catalog)
    unchanged_rows = None
    if result.commit.snapshot_id is None and (head := current_snapshot_id(spark, table)) is not None:
        unchanged_rows = commit_of(spark, table, head).table_rows  # nothing committed: the table as it stands
    return FinishedLayer(layer_figures(result, table_location(spark, table), unchanged_rows), outcomes, result.warnings)


def report_layer(
    spark, catalog: str, raw: Callable[[], RawZone], request: LayerRequest, run_id: str, spark_conf: dict, raw_root: str
) -> Report:
    """Run the layer and say what happened: a failed audit's checks and metrics, or a JVM out of memory or disk in
    one line, are reported as the failure; any other error is raised as it is."""
    spec = LAYERS[request.layer].spec
    try:
        finished = run_layer(spark, catalog, raw, request, run_id)
    except AuditFailed as failed:
        record_metrics(spark, catalog, metrics_of(spec, failed.results), run_id)
        inspect = f"`etr sql \"SELECT * FROM {spec.identifier} VERSION AS OF '{failed.branch}'\"`"
        return Report(
            {}, list(failed.results), [], str(failed), {"audit_branch": failed.branch, "inspect": Tagged("md", inspect)}
        )
    except Exception as failed:
        days = request.days[0] + (f"..{request.days[-1]}" if len(request.days) > 1 else "")
        folders = {raw_root: "the raw zone"} if raw_root else {}  # with the conf's scratch and warehouse
        exhausted = exhaustion(failed, f"building {spec.identifier} for {days}", spark_conf, folders=folders)
        if exhausted is None:
            raise
        return Report({}, [], [], str(exhausted))
    f = finished.figures
    rows = f.get("dagster/row_count", "an unknown number of rows")
    commit = f"{f['operation']} snapshot {f['snapshot_id']} (+{f['files_added']}/-{f['files_removed']} files)"
    summary = f"{spec.identifier}: {f['rows_written']} rows written, {rows} in the table; " + (
        commit if f["snapshot_id"] != "none" else "nothing committed"
    )
    logs = [("info", summary)] + [("warning", warning) for warning in finished.warnings]
    return Report(f, list(finished.outcomes), logs)


def _bronze(load, feed, spark, catalog, raw, request: BronzeRequest) -> WriteResult:
    """Replace each day of bronze with its newest downloaded raw batch, then mark it complete."""
    policy = {"max_reject_rate": request.max_reject_rate, "max_day_shrink": request.max_day_shrink}
    return load(spark, catalog, raw(), feed, request.dates, **policy)


def _dated(build, *options: str) -> Build:
    """A build that reads no raw zone: `build(spark, catalog, days, *the request's options named)`."""
    return lambda spark, catalog, raw, request: build(
        spark, catalog, request.dates, *(getattr(request, o) for o in options)
    )


def _entity_history(feed: EntityFeed, spark, catalog, raw, request: RebuildRequest) -> WriteResult:
    applied = entities.days_to_apply(spark, catalog, feed, request.full_refresh)
    started = time.time_ns() // 1000  # every version the apply writes carries a later `_ingested_at`
    result = entities.build_landing(spark, catalog, feed, request.dates, request.full_refresh)
    table = feed.landing.qualified(catalog)
    if (current_rows := rows_where_null(spark, table, "_valid_to")) is None:  # no data file read
        current_rows = spark.sql(f"SELECT count(*) FROM {table} WHERE {CURRENT_VERSIONS}").first()[0]
    commit = commit_of(spark, table, result.snapshot_id) if result.changed else CommitInfo(table, None, None)
    extra = {
        # History is not written by day: what the step wrote is the versions it inserted and those it closed.
        "rows_written": result.inserted + result.updated,
        "current_rows": current_rows,
        "versions_inserted": result.inserted,
        "versions_updated": result.updated,
        "versions_removed": result.deleted,
        "history_method": str(result.method),
        "history_reason": result.reason,
        # The snapshot days this apply took in (those not requested are recorded as materialized too).
        "days_applied": Tagged("json", [d.isoformat() for d in applied]),
    }
    # A history has no days: its row rules are checked on the versions this apply wrote (a filter files skip by).
    written = f"_ingested_at >= timestamp_micros({started})"
    return WriteResult(commit, TableChanges(table), {}, extra, written_rows=written)


# The gold tables built from other tables' days or from their own day before: each day's check `up_to_date` says,
# when it is built, whether it was built from every day it needs; pipeline/propagation.py judges it again later.
DERIVED_SPECS = (GOLD_DAILY_SUMMARY, GOLD_CUSTOMER_ACTIVITY, GOLD_CUSTOMER_PROFILES)
UP_TO_DATE = "up_to_date"


def built_up_to_date(days: list[str], started_over: str) -> CheckOutcome:
    """The check of days just built: up to date, but for those built while the day they carry from was missing."""
    missing = tuple(d for d in days if d in started_over.split(", "))
    before = {d: (dt.date.fromisoformat(d) - dt.timedelta(days=1)).isoformat() for d in missing}
    return CheckOutcome(
        name=UP_TO_DATE,
        description="built from every day it needs"
        if not missing
        else "built while the day it carries from was missing: "
        + ", ".join(f"{d} (no {before[d]})" for d in missing)
        + "; it is built again once that day is",
        passed=not missing,
        violations=len(missing),
        severity=Severity.WARN,
        by_day={d: float(d in missing) for d in days},
        days_failed=missing,
    )


def layer_name(spec: TableSpec) -> str:
    """The one spelling of a table's asset key (`namespace/name`, as Dagster writes it), and its layer's name."""
    return f"{spec.namespace}/{spec.name}"


LAYERS: dict[str, Layer] = {
    layer_name(layer.spec): layer
    for layer in (
        # Every declared source's: bronze of each endpoint, the history of each entity list.
        *(
            Layer(feed.bronze, partial(_bronze, load_bronze_days, feed), BronzeRequest)
            for feed in RAW_FEEDS
            if not any(entity.raw is feed for entity in ENTITY_FEEDS)
        ),
        *(Layer(feed.raw.bronze, partial(_bronze, entities.load_bronze, feed), BronzeRequest) for feed in ENTITY_FEEDS),
        *(Layer(feed.landing, partial(_entity_history, feed), RebuildRequest) for feed in ENTITY_FEEDS),
        Layer(SILVER_TRANSACTIONS, _dated(transactions.build_silver, "audit_branch", "full_refresh"), RebuildRequest),
        Layer(GOLD_DAILY_SUMMARY, _dated(transactions.build_gold, "audit_branch")),
        Layer(GOLD_CUSTOMER_ACTIVITY, _dated(entities.build_customer_activity)),
        Layer(GOLD_CUSTOMER_PROFILES, _dated(entities.build_customer_profiles)),
    )
}
