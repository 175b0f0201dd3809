"""The transaction pipeline: raw batches -> bronze -> silver -> gold, one function per layer.

Each function takes the days to (re)build and replaces exactly those days in one Iceberg commit, so running a
day again gives the same rows, never duplicates, and a failure leaves the table as it was.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from etr_assets.lake.evolve import TableChanges, ensure_table
from etr_assets.lake.frames import conform, spark_schema
from etr_assets.lake.writes import CommitInfo, replace_days
from etr_assets.sources.fetch import SOURCE
from etr_assets.sources.raw_zone import Batch, RawZone
from etr_assets.tables.transactions import (
    BRONZE_TRANSACTIONS,
    GOLD_DAILY_SUMMARY,
    SILVER_TRANSACTIONS,
    STATUSES,
)

ENDPOINT = "transactions"
CORRUPT = "_corrupt_record"
API_COLUMNS = tuple(c for c in BRONZE_TRANSACTIONS.columns if not c.name.startswith("_"))


class BadInputError(ValueError):
    """Input that cannot be loaded as declared; the message names the batch, the file and the problem."""


@dataclasses.dataclass(frozen=True)
class LayerResult:
    commit: CommitInfo
    changes: TableChanges
    rows_by_day: dict[str, int]
    extra: dict[str, int | str] = dataclasses.field(default_factory=dict)

    @property
    def rows(self) -> int:
        return sum(self.rows_by_day.values())


# --- bronze -------------------------------------------------------------------------------------------
def read_batch(spark, raw: RawZone, batch: Batch):
    """A batch's records read with the spec's schema (never inferred), plus lineage columns."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    schema = spark_schema(API_COLUMNS).add(T.StructField(CORRUPT, T.StringType(), True))
    files = raw.file_uris(batch)
    if not files:  # a day without transactions is a valid, empty batch
        return spark.createDataFrame([], schema).drop(CORRUPT).withColumns(
            {"_batch_id": F.lit(batch.batch_id), "_source_file": F.lit(""), "_ingested_at": F.current_timestamp()}
        )
    df = (
        spark.read.schema(schema)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json(files)
        .withColumn("_source_file", F.input_file_name())
        .cache()  # Spark refuses to query the corrupt-record column of an uncached JSON scan
    )
    bad = df.where(F.col(CORRUPT).isNotNull() | (F.col("transaction_date") != F.lit(batch.day)))
    bad_rows = bad.select(CORRUPT, "transaction_date", "_source_file").limit(3).collect()
    if bad_rows:
        count = bad.count()
        first = "; ".join(
            f"{r['_source_file']}: " + (r[CORRUPT] or f"transaction_date {r['transaction_date']}")[:120]
            for r in bad_rows
        )
        df.unpersist()
        raise BadInputError(
            f"raw batch {batch.key}: {count} record(s) do not match {BRONZE_TRANSACTIONS.identifier}'s schema "
            f"or the batch day {batch.day}; the batch stays pending. First: {first}"
        )
    return df.drop(CORRUPT).withColumns({"_batch_id": F.lit(batch.batch_id), "_ingested_at": F.current_timestamp()})


def load_bronze(spark, catalog: str, raw: RawZone, days: list[dt.date]) -> LayerResult:
    """Replace each day of bronze with the newest downloaded raw batch of that day, then mark it complete."""
    chosen: dict[dt.date, Batch] = {}
    for day in days:
        batch = raw.latest_sealed(SOURCE, ENDPOINT, day)
        if batch is None:
            raise BadInputError(
                f"no downloaded raw batch for {day} under {SOURCE}/{ENDPOINT}: materialize the raw asset for that day first"
            )
        chosen[day] = batch
    changes = ensure_table(spark, catalog, BRONZE_TRANSACTIONS)
    frames = [read_batch(spark, raw, batch) for batch in chosen.values()]
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    qualified = BRONZE_TRANSACTIONS.qualified(catalog)
    commit = replace_days(spark, qualified, conform(union, BRONZE_TRANSACTIONS), "transaction_date", days)
    for frame in frames:
        frame.unpersist()
    # Only now is the batch in Iceberg. Older uncommitted batches of the day are superseded by it.
    for day, batch in chosen.items():
        for older in raw.uncommitted(SOURCE, ENDPOINT, day):
            if older.batch_id <= batch.batch_id:
                detail = {"snapshot_id": str(commit.snapshot_id), "table": qualified}
                if older != batch:
                    detail["superseded_by"] = batch.batch_id
                raw.mark_complete(older, detail)
    rows_by_day = {day.isoformat(): raw.manifest(b).records for day, b in chosen.items()}
    return LayerResult(commit, changes, rows_by_day, {"batches": ",".join(b.batch_id for b in chosen.values())})


# --- silver -------------------------------------------------------------------------------------------
def clean_transactions(bronze_df):
    """Typed, validated, one row per transaction id: the latest update wins, deterministically."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    typed = bronze_df.withColumns(
        {
            "amount": F.col("amount").cast("decimal(10,2)"),
            "currency": F.upper(F.trim("currency")),
            "payment_method": F.upper(F.trim("payment_method")),
            "status": F.upper(F.trim("status")),
        }
    )
    valid = typed.where(
        F.col("transaction_id").isNotNull()
        & F.col("customer_id").isNotNull()
        & F.col("merchant_id").isNotNull()
        & F.col("amount").isNotNull()
        & (F.col("amount") >= 0)
        & F.col("currency").rlike("^[A-Z]{3}$")
        & F.col("status").isin(*STATUSES)
        & F.col("transaction_date").isNotNull()
        & F.col("updated_at").isNotNull()
    )
    # Ties on updated_at are broken by later batch, then by row content, so reruns pick the same row.
    newest_first = Window.partitionBy("transaction_id").orderBy(
        F.col("updated_at").desc(),
        F.col("_batch_id").desc(),
        F.xxhash64(*[c.name for c in API_COLUMNS]).desc(),
    )
    latest = valid.withColumn("_rank", F.row_number().over(newest_first)).where("_rank = 1").drop("_rank")
    return latest.withColumn("_processed_at", F.current_timestamp())


def build_silver(spark, catalog: str, days: list[dt.date]) -> LayerResult:
    from pyspark.sql import functions as F

    bronze = spark.table(BRONZE_TRANSACTIONS.qualified(catalog)).where(F.col("transaction_date").isin(sorted(days)))
    changes = ensure_table(spark, catalog, SILVER_TRANSACTIONS)
    cleaned = conform(clean_transactions(bronze), SILVER_TRANSACTIONS).cache()
    counts = _count_by_day(cleaned, days)
    received = bronze.count()
    commit = replace_days(spark, SILVER_TRANSACTIONS.qualified(catalog), cleaned, "transaction_date", days)
    cleaned.unpersist()
    written = sum(counts.values())
    distinct_ids = bronze.where(F.col("transaction_id").isNotNull()).select("transaction_id").distinct().count()
    return LayerResult(
        commit,
        changes,
        counts,
        {"bronze_rows": received, "duplicates_removed": received - distinct_ids, "rejected": distinct_ids - written},
    )


# --- gold ---------------------------------------------------------------------------------------------
def daily_summary(silver_df):
    from pyspark.sql import functions as F

    approved = F.col("status").isin("APPROVED", "PROCESSED")

    def count_if(condition):
        return F.sum(F.when(condition, 1).otherwise(0)).cast("bigint")

    def sum_if(condition):
        return F.coalesce(F.sum(F.when(condition, F.col("amount"))), F.lit(0)).cast("decimal(18,2)")

    return silver_df.groupBy("transaction_date", "currency").agg(
        F.count(F.lit(1)).alias("transactions"),
        count_if(approved).alias("approved"),
        count_if(F.col("status") == "DECLINED").alias("declined"),
        count_if(F.col("status") == "REFUNDED").alias("refunded"),
        count_if(F.col("status") == "PENDING").alias("pending"),
        sum_if(approved).alias("gross_amount"),
        sum_if(F.col("status") == "REFUNDED").alias("refunded_amount"),
        F.avg("amount").cast("decimal(12,2)").alias("average_amount"),
        F.countDistinct("customer_id").alias("distinct_customers"),
        F.countDistinct("merchant_id").alias("distinct_merchants"),
        F.current_timestamp().alias("_computed_at"),
    )


def build_gold(spark, catalog: str, days: list[dt.date]) -> LayerResult:
    from pyspark.sql import functions as F

    silver = spark.table(SILVER_TRANSACTIONS.qualified(catalog)).where(F.col("transaction_date").isin(sorted(days)))
    changes = ensure_table(spark, catalog, GOLD_DAILY_SUMMARY)
    summary = conform(daily_summary(silver), GOLD_DAILY_SUMMARY).cache()
    counts = _count_by_day(summary, days)
    commit = replace_days(spark, GOLD_DAILY_SUMMARY.qualified(catalog), summary, "transaction_date", days)
    summary.unpersist()
    return LayerResult(commit, changes, counts)


def _count_by_day(df, days: list[dt.date]) -> dict[str, int]:
    found = {row[0].isoformat(): row[1] for row in df.groupBy("transaction_date").count().collect()}
    return {day.isoformat(): found.get(day.isoformat(), 0) for day in sorted(days)}
