"""Customers and merchants: raw snapshots -> bronze (observation log) -> landing SCD2 -> customer profiles."""

from __future__ import annotations

import datetime as dt

from etr_assets.lake.bronze import (
    DEFAULT_MAX_DAY_SHRINK,
    DEFAULT_MAX_REJECT_RATE,
    LayerResult,
    load_bronze_days,
)
from etr_assets.lake.evolve import ensure_table
from etr_assets.lake.feeds import EntityFeed, FeedMode
from etr_assets.lake.frames import conform, count_by_day, local_frame, spark_type
from etr_assets.lake.scd2 import Scd2Result
from etr_assets.lake.scd2_log import apply_log
from etr_assets.lake.writes import replace_days
from etr_assets.sources.raw_zone import RawZone
from etr_assets.tables.entities import GOLD_CUSTOMER_PROFILES, LANDING_CUSTOMERS
from etr_assets.tables.feeds import CUSTOMERS, MERCHANTS  # noqa: F401 (the feeds this module's functions take)
from etr_assets.tables.transactions import SILVER_TRANSACTIONS


def load_bronze(
    spark,
    catalog: str,
    raw: RawZone,
    feed: EntityFeed,
    days: list[dt.date],
    max_reject_rate: float = DEFAULT_MAX_REJECT_RATE,
    max_day_shrink: float = DEFAULT_MAX_DAY_SHRINK,
) -> LayerResult:
    # History depends on every observation, so batches left pending by an earlier failed run are finished
    # first, whatever their day: the landing step that follows recomputes with them.
    return load_bronze_days(
        spark, catalog, raw, feed.raw, days, max_reject_rate, finish_pending=True, max_day_shrink=max_day_shrink
    )


def scd2_records(bronze_df, feed: EntityFeed):
    """Bronze rows as SCD2 input: typed like the landing table, with lineage and the snapshot time."""
    from pyspark.sql import functions as F

    landing = {c.name: c for c in feed.landing.columns}
    typed = [
        F.col(c.name).cast(spark_type(landing[c.name].type)).alias(c.name)
        for c in feed.raw.api_columns
        if c.name in landing
    ]
    # A snapshot "as of" a day describes the end of that day.
    snapshot_at = F.to_timestamp(F.date_add(F.col("_as_of"), 1)).alias("_snapshot_at")
    return bronze_df.select(*typed, "_batch_id", "_source_file", snapshot_at)


def build_landing(spark, catalog: str, feed: EntityFeed, days: list[dt.date], full_refresh: bool = False) -> Scd2Result:
    """Bring the SCD2 table in line with every observation in bronze, in one MERGE.

    History is extended from the bronze rows appended since the last build when they all come after it (the
    daily, in-order case), else recomputed from every observation (`scd2_log.apply_log`). `days` are the
    partitions being built; the rows read are whatever bronze gained, so days loaded by other runs count too.
    """
    ensure_table(spark, catalog, feed.landing)
    bronze = feed.raw.bronze.qualified(catalog)
    to_records = lambda rows: scd2_records(rows, feed)  # noqa: E731
    return apply_log(
        spark, catalog, feed.landing, bronze, to_records, feed.mode, full_refresh, held_keys(spark, catalog, feed)
    )


def held_keys(spark, catalog: str, feed: EntityFeed):
    """(key, `_batch_id`) of records a snapshot sent that validation refused: present, state unknown."""
    key = feed.landing.scd2.key
    quarantine = feed.raw.quarantine.qualified(catalog)
    if feed.mode != FeedMode.FULL or not spark.catalog.tableExists(quarantine):
        return None
    table = spark.table(quarantine)
    return table.where(table[key].isNotNull()).select(key, "_batch_id") if key in table.columns else None


def customer_profiles(spark, catalog: str, days: list[dt.date]):
    """Each customer's version valid at the end of each day, with their transactions up to that day."""
    from pyspark.sql import functions as F

    customers = spark.table(LANDING_CUSTOMERS.qualified(catalog))
    silver = spark.table(SILVER_TRANSACTIONS.qualified(catalog))
    day_list = local_frame(spark, [(d,) for d in sorted(days)], "as_of_date date")
    end_of_day = F.to_timestamp(F.date_add("as_of_date", 1))
    # The SCD2 as-of view: the version whose interval contains the end of the day.
    as_of = day_list.crossJoin(customers).where(
        (F.col("_valid_from") < end_of_day) & (F.col("_valid_to").isNull() | (F.col("_valid_to") >= end_of_day))
    )
    approved = F.col("status").isin("APPROVED", "PROCESSED")
    activity = (
        day_list.join(silver, F.col("transaction_date") <= F.col("as_of_date"))
        .groupBy("as_of_date", "customer_id")
        .agg(
            F.count(F.lit(1)).alias("transactions"),
            F.coalesce(F.sum(F.when(approved, F.col("amount"))), F.lit(0))
            .cast("decimal(18,2)")
            .alias("approved_amount"),
            F.max("transaction_date").alias("last_transaction_date"),
        )
    )
    profiles = (
        as_of.join(activity, ["as_of_date", "customer_id"], "left")
        .withColumn("transactions", F.coalesce("transactions", F.lit(0)).cast("bigint"))
        .withColumn("approved_amount", F.coalesce("approved_amount", F.lit(0)).cast("decimal(18,2)"))
        .withColumn(
            "credit_used_ratio",
            F.when(F.col("credit_limit") > 0, (F.col("approved_amount") / F.col("credit_limit")).cast("double")),
        )
        .withColumn("_computed_at", F.current_timestamp())
    )
    return conform(profiles, GOLD_CUSTOMER_PROFILES)


def build_customer_profiles(spark, catalog: str, days: list[dt.date]) -> LayerResult:
    changes = ensure_table(spark, catalog, GOLD_CUSTOMER_PROFILES)
    profiles = customer_profiles(spark, catalog, days).cache()
    counts = count_by_day(profiles, days, "as_of_date")
    commit = replace_days(spark, GOLD_CUSTOMER_PROFILES.qualified(catalog), profiles, "as_of_date", days)
    profiles.unpersist()
    return LayerResult(commit, changes, counts)
