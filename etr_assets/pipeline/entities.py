"""Customers and merchants: raw snapshots -> bronze (observation log) -> landing SCD2 -> customer profiles."""

from __future__ import annotations

import datetime as dt
import functools

from etr_assets.lake.bronze import load_bronze_days
from etr_assets.lake.evolve import ensure_table
from etr_assets.lake.feeds import EntityFeed, FeedMode
from etr_assets.lake.figures import WriteResult
from etr_assets.lake.frames import conform, local_frame, spark_type
from etr_assets.lake.scd2 import ObservationLog, Scd2Result, apply_log, read_cursor
from etr_assets.pipeline.transactions import write_days
from etr_assets.sources.raw_zone import RawZone
from etr_assets.tables.declared import OBSERVED_AT
from etr_assets.tables.entities import GOLD_CUSTOMER_ACTIVITY, GOLD_CUSTOMER_PROFILES, LANDING_CUSTOMERS
from etr_assets.tables.feeds import CUSTOMERS, MERCHANTS  # noqa: F401 (the feeds this module's functions take)
from etr_assets.tables.transactions import SILVER_TRANSACTIONS

# Metadata of an activity build: the days summed from every earlier silver day, the day before them missing.
SUMMED_FROM_ALL_OF_SILVER = "days_summed_from_all_of_silver"


def load_bronze(spark, catalog: str, raw: RawZone, feed: EntityFeed, days: list[dt.date], **policy) -> WriteResult:
    # History depends on every observation: batches an earlier failed run left pending are finished first.
    return load_bronze_days(spark, catalog, raw, feed.raw, days, finish_pending=True, **policy)


def scd2_records(bronze_df, feed: EntityFeed):
    """Bronze rows as SCD2 input: typed like the landing table, with lineage and the snapshot time."""
    from pyspark.sql import functions as F

    landing = {c.name: spark_type(c.type) for c in feed.landing.columns}
    typed = [F.col(c.name).cast(landing[c.name]).alias(c.name) for c in feed.raw.api_columns if c.name in landing]
    # A snapshot "as of" a day describes the end of that day.
    snapshot_at = F.to_timestamp(F.date_add(F.col("_as_of"), 1))
    if OBSERVED_AT.name in landing:  # a source without update times: a version starts with the snapshot showing it
        typed.append(snapshot_at.alias(OBSERVED_AT.name))
    return bronze_df.select(*typed, "_batch_id", "_source_file", snapshot_at.alias("_snapshot_at"))


def build_landing(spark, catalog: str, feed: EntityFeed, days: list[dt.date], full_refresh: bool = False) -> Scd2Result:
    """Bring the SCD2 table in line with every observation bronze gained since its last build (docs/scd2.md)."""
    ensure_table(spark, catalog, feed.landing)
    to_records, held = functools.partial(scd2_records, feed=feed), held_keys(spark, catalog, feed)
    log = ObservationLog(feed.raw.bronze.qualified(catalog), to_records, feed.mode, held, feed.raw.day_column)
    return apply_log(spark, catalog, feed.landing, log, full_refresh)


def days_to_apply(spark, catalog: str, feed: EntityFeed, full_refresh: bool = False) -> list[dt.date]:
    """The snapshot days whose bronze rows the next `build_landing` will apply: every day bronze changed since the
    log snapshot the history's last apply read (every day, when there is none or on a full refresh: a recompute)."""
    from pyspark.sql import functions as F

    bronze = feed.raw.bronze.qualified(catalog)
    if not spark.catalog.tableExists(bronze):
        return []
    partitions = spark.sql(f"SELECT partition._as_of_day AS day, last_updated_at FROM {bronze}.partitions")
    target = feed.landing.qualified(catalog)
    cursor = read_cursor(spark, target) if not full_refresh and spark.catalog.tableExists(target) else None
    if cursor is not None:
        applied = spark.sql(f"SELECT committed_at FROM {bronze}.snapshots WHERE snapshot_id = {cursor.log_snapshot_id}")
        if (applied_at := applied.first()) is not None:  # an expired snapshot: every day counts
            partitions = partitions.where(F.col("last_updated_at") > F.lit(applied_at[0]))
    return sorted(r["day"] for r in partitions.collect())


def held_keys(spark, catalog: str, feed: EntityFeed):
    """(key, `_batch_id`) of records a snapshot sent that validation refused: present, state unknown."""
    key, quarantine = feed.landing.scd2.key, feed.raw.quarantine.qualified(catalog)
    if feed.mode != FeedMode.FULL or not spark.catalog.tableExists(quarantine):
        return None
    table = spark.table(quarantine)
    return table.where(table[key].isNotNull()).select(key, "_batch_id") if key in table.columns else None


def consecutive_runs(days: list[dt.date]) -> list[list[dt.date]]:
    """`days` sorted and cut where a day is missing: each run builds on the day before its first."""
    runs: list[list[dt.date]] = []
    for day in sorted(set(days)):
        if runs and day - runs[-1][-1] == dt.timedelta(days=1):
            runs[-1].append(day)
        else:
            runs.append([day])
    return runs


def _activity_of(silver_rows, day_column):
    """Per customer and `day_column`: transactions, approved amount and the latest transaction date."""
    from pyspark.sql import functions as F

    approved = F.col("status").isin("APPROVED", "PROCESSED")
    return silver_rows.groupBy("customer_id", day_column).agg(
        F.count(F.lit(1)).alias("transactions"),
        F.coalesce(F.sum(F.when(approved, F.col("amount"))), F.lit(0)).alias("approved_amount"),
        F.max("transaction_date").alias("last_transaction_date"),
    )


def customer_activity(spark, catalog: str, days: list[dt.date]):
    """Each customer's activity up to each of `days`: the table's figures of the day before each run of consecutive
    days plus silver's rows of the run; and the first days summed from all of silver (the day before was missing).
    Returns the rows, the days started over, and the frames cached for them (unpersist them once the rows are
    written)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    silver, table = spark.table(SILVER_TRANSACTIONS.qualified(catalog)), GOLD_CUSTOMER_ACTIVITY.qualified(catalog)
    figures = ["transactions", "approved_amount", "last_transaction_date"]
    frames, started_over, cached = [], [], []
    for run in consecutive_runs(days):
        before = run[0] - dt.timedelta(days=1)
        # Read once, not once per use (the check below and twice in the plan): a customer's row each, cached.
        carried = spark.table(table).where(F.col("as_of_date") == F.lit(before)).select("customer_id", *figures)
        cached.append(carried := carried.cache())
        earlier = silver.where(F.col("transaction_date") <= F.lit(before))
        if carried.isEmpty() and not earlier.isEmpty():  # silver has days the table never summed
            carried = _activity_of(earlier.withColumn("_all", F.lit(0)), "_all").drop("_all")
            started_over.append(run[0])
        in_run = silver.where(F.col("transaction_date").between(F.lit(run[0]), F.lit(run[-1])))
        by_day = _activity_of(in_run.withColumn("as_of_date", F.col("transaction_date")), "as_of_date")
        run_days = local_frame(spark, [(d,) for d in run], "as_of_date date")
        customers = carried.select("customer_id").unionByName(by_day.select("customer_id")).distinct()
        up_to_day = Window.partitionBy("customer_id").orderBy("as_of_date").rowsBetween(Window.unboundedPreceding, 0)
        running = (
            customers.crossJoin(F.broadcast(run_days))
            .join(by_day, ["customer_id", "as_of_date"], "left")
            .select(
                "customer_id",
                "as_of_date",
                *[F.sum(c).over(up_to_day).alias(f"_run_{c}") for c in figures[:2]],
                F.max("last_transaction_date").over(up_to_day).alias("_run_last_transaction_date"),
            )
        )
        total = running.join(carried, "customer_id", "left").select(
            "as_of_date",
            "customer_id",
            *[(F.coalesce(c, F.lit(0)) + F.coalesce(f"_run_{c}", F.lit(0))).alias(c) for c in figures[:2]],
            F.greatest("last_transaction_date", "_run_last_transaction_date").alias("last_transaction_date"),
        )
        frames.append(total.where(F.col("transactions") > 0))
    rows = functools.reduce(lambda a, b: a.unionByName(b), frames).withColumn("_computed_at", F.current_timestamp())
    return conform(rows, GOLD_CUSTOMER_ACTIVITY), started_over, cached


def build_customer_activity(spark, catalog: str, days: list[dt.date]) -> WriteResult:
    changes = ensure_table(spark, catalog, GOLD_CUSTOMER_ACTIVITY)
    activity, started_over, cached = customer_activity(spark, catalog, days)
    warnings = tuple(
        f"{GOLD_CUSTOMER_ACTIVITY.identifier} holds no figures for {day - dt.timedelta(days=1)}: {day} was summed "
        "from every earlier silver day (build the days before it first to keep a day's cost to its own rows)"
        for day in started_over
    )
    extra = {SUMMED_FROM_ALL_OF_SILVER: ", ".join(d.isoformat() for d in started_over) or "none"}
    try:
        return write_days(
            spark,
            catalog,
            GOLD_CUSTOMER_ACTIVITY,
            activity,
            days,
            "as_of_date",
            changes,
            extra=extra,
            warnings=warnings,
        )
    finally:
        for frame in cached:
            frame.unpersist()


def customer_profiles(spark, catalog: str, days: list[dt.date]):
    """Each customer's version valid at the end of each day, with their activity up to that day."""
    from pyspark.sql import functions as F

    first_end, last_end = (F.to_timestamp(F.lit(d + dt.timedelta(days=1))) for d in (min(days), max(days)))
    # Only versions that may be valid at one of the days' ends: literals Iceberg prunes by, so the months closed
    # before the first day (the history's `_valid_to` partitions) are never read.
    customers = spark.table(LANDING_CUSTOMERS.qualified(catalog)).where(
        (F.col("_valid_from") < last_end) & (F.col("_valid_to").isNull() | (F.col("_valid_to") >= first_end))
    )
    activity = spark.table(GOLD_CUSTOMER_ACTIVITY.qualified(catalog)).where(F.col("as_of_date").isin(sorted(days)))
    day_list = local_frame(spark, [(d,) for d in sorted(days)], "as_of_date date")
    end_of_day = F.to_timestamp(F.date_add("as_of_date", 1))
    # The SCD2 as-of view: the version whose interval contains the end of the day.
    as_of = day_list.crossJoin(customers).where(
        (F.col("_valid_from") < end_of_day) & (F.col("_valid_to").isNull() | (F.col("_valid_to") >= end_of_day))
    )
    profiles = (
        as_of.join(activity.drop("_computed_at"), ["as_of_date", "customer_id"], "left")
        .withColumn("transactions", F.coalesce("transactions", F.lit(0)).cast("bigint"))
        .withColumn("approved_amount", F.coalesce("approved_amount", F.lit(0)).cast("decimal(18,2)"))
        .withColumn(
            "credit_used_ratio",
            F.when(F.col("credit_limit") > 0, (F.col("approved_amount") / F.col("credit_limit")).cast("double")),
        )
        .withColumn("_computed_at", F.current_timestamp())
    )
    return conform(profiles, GOLD_CUSTOMER_PROFILES)


def build_customer_profiles(spark, catalog: str, days: list[dt.date]) -> WriteResult:
    changes = ensure_table(spark, catalog, GOLD_CUSTOMER_PROFILES)
    ensure_table(spark, catalog, GOLD_CUSTOMER_ACTIVITY)  # read even before its first build
    profiles = customer_profiles(spark, catalog, days)
    return write_days(spark, catalog, GOLD_CUSTOMER_PROFILES, profiles, days, "as_of_date", changes)
