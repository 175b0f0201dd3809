"""The transaction pipeline: raw batches -> bronze -> silver -> gold, one function per layer, each replacing exactly
the days it builds in one Iceberg commit, so running a day again gives the same rows and a failure changes nothing."""

from __future__ import annotations

import datetime as dt

from etr_assets.lake.bronze import (
    DEFAULT_MAX_DAY_SHRINK,
    DEFAULT_MAX_REJECT_RATE,
    BadInputError,
    LayerResult,
    load_bronze_days,
)
from etr_assets.lake.evolve import ensure_table
from etr_assets.lake.frames import conform, count_by_day
from etr_assets.lake.incremental import Cursor, ReadMode, plan_reads, read_plan
from etr_assets.lake.quality import CheckOutcome, record_quarantine_outcome, split_by_record_rules
from etr_assets.lake.wap import evaluate, write_audit_publish
from etr_assets.lake.writes import CommitInfo, current_snapshot_id, replace_days
from etr_assets.sources.raw_zone import RawZone
from etr_assets.tables.feeds import TRANSACTIONS
from etr_assets.tables.quarantine import SILVER_QUARANTINE_TRANSACTIONS
from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, GOLD_DAILY_SUMMARY, SILVER_TRANSACTIONS, STATUSES

__all__ = ["TRANSACTIONS", "BadInputError", "LayerResult", "build_gold", "build_silver", "load_bronze"]

API_COLUMNS = TRANSACTIONS.api_columns


def load_bronze(
    spark,
    catalog: str,
    raw: RawZone,
    days: list[dt.date],
    max_reject_rate: float = DEFAULT_MAX_REJECT_RATE,
    max_day_shrink: float = DEFAULT_MAX_DAY_SHRINK,
) -> LayerResult:
    """Replace each day of bronze with the newest downloaded raw batch of that day, then mark it complete."""
    return load_bronze_days(spark, catalog, raw, TRANSACTIONS, days, max_reject_rate, max_day_shrink=max_day_shrink)


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
        F.col("updated_at").desc(), F.col("_batch_id").desc(), F.xxhash64(*[c.name for c in API_COLUMNS]).desc()
    )
    latest = valid.withColumn("_rank", F.row_number().over(newest_first)).where("_rank = 1").drop("_rank")
    return latest.withColumn("_processed_at", F.current_timestamp())


def _replace(spark, catalog: str, spec, df, days: list[dt.date], audit_branch: str | None):
    """Replace the days directly, or through write-audit-publish on `audit_branch` (raises AuditFailed)."""
    qualified = spec.qualified(catalog)
    if audit_branch is None:
        return replace_days(spark, qualified, df, "transaction_date", days), ()

    def write(branch: str):
        return replace_days(spark, qualified, df, "transaction_date", days, branch=branch)

    return write_audit_publish(spark, catalog, spec, audit_branch, days, write)


def build_silver(
    spark,
    catalog: str,
    days: list[dt.date],
    audit_branch: str | None = None,
    cursors: dict[dt.date, Cursor | None] | None = None,
    full_refresh: bool = False,
) -> LayerResult:
    """Rebuild `days` of silver, reading only the bronze rows each day needs (docs/lifecycle.md#incremental-silver;
    without `cursors`, every day whole). `extra["bronze_snapshot_id"]` is the next build's cursor. A transaction
    breaking a per-record expectation waits in silver.quarantine_transactions; the rest of its day publishes."""
    from pyspark.sql import functions as F

    bronze_table, silver_table = BRONZE_TRANSACTIONS.qualified(catalog), SILVER_TRANSACTIONS.qualified(catalog)
    quarantine_table = SILVER_QUARANTINE_TRANSACTIONS.qualified(catalog)
    changes = ensure_table(spark, catalog, SILVER_TRANSACTIONS)
    ensure_table(spark, catalog, SILVER_QUARANTINE_TRANSACTIONS)
    plan = plan_reads(
        spark, bronze_table, silver_table, "transaction_date", cursors or dict.fromkeys(days), full_refresh
    )
    full, appended = read_plan(spark, bronze_table, plan, "transaction_date")
    read = [df for df in (full, appended) if df is not None]
    bronze_read = read[0].unionByName(read[1]) if len(read) == 2 else (read[0] if read else None)
    received = bronze_read.count() if bronze_read is not None else 0
    appended_days = set()
    if appended is not None:
        appended_days = {r[0] for r in appended.select("transaction_date").distinct().collect()}
    rebuild = sorted(set(plan.of(ReadMode.WHOLE_DAY)) | appended_days)

    extra = {
        "bronze_snapshot_id": str(plan.upstream_snapshot_id) if plan.upstream_snapshot_id is not None else "none",
        "read_mode": plan.summary(),
        "read_plan": plan.table(),
        "bronze_rows_read": received,
        "days_read_full": len(plan.of(ReadMode.WHOLE_DAY)),
        "days_read_incrementally": len(plan.of(ReadMode.APPENDED)),
        "days_rewritten": len(rebuild),
    }

    def held_back() -> CheckOutcome:
        return record_quarantine_outcome(spark.table(quarantine_table), "transaction_date", days, quarantine_table)

    if not rebuild:  # nothing changed upstream: no commit; the checks still report on what main holds
        checks = evaluate(spark, silver_table, SILVER_TRANSACTIONS, "main", days) if audit_branch else []
        in_days = spark.table(silver_table).where(F.col("transaction_date").isin(sorted(days)))
        counts = count_by_day(in_days, days, "transaction_date")
        extra["silver_snapshot_id"] = str(current_snapshot_id(spark, silver_table))
        return LayerResult(CommitInfo(silver_table, None, None), changes, counts, extra, checks=(*checks, held_back()))

    cleaned = conform(clean_transactions(full), SILVER_TRANSACTIONS) if full is not None else None
    if appended_days:
        on_days = F.col("transaction_date").isin(sorted(appended_days))
        held_before = conform(spark.table(quarantine_table).where(on_days), SILVER_TRANSACTIONS)
        merged = merge_latest(
            spark.table(silver_table).where(on_days).unionByName(held_before),
            conform(clean_transactions(appended), SILVER_TRANSACTIONS),
        )
        cleaned = merged if cleaned is None else cleaned.unionByName(merged)
    cleaned = cleaned.cache()
    kept, held = split_by_record_rules(cleaned, SILVER_TRANSACTIONS)
    counts = count_by_day(kept, rebuild, "transaction_date")
    try:
        # The quarantine first: a crash before silver's commit leaves the days to rebuild, which rewrites it again.
        # Nothing to hold and nothing held before: no commit (most days).
        held_days = F.col("transaction_date").isin(sorted(rebuild))
        if not held.isEmpty() or not spark.table(quarantine_table).where(held_days).isEmpty():
            replace_days(
                spark, quarantine_table, conform(held, SILVER_QUARANTINE_TRANSACTIONS), "transaction_date", rebuild
            )
        commit, checks = _replace(spark, catalog, SILVER_TRANSACTIONS, kept, rebuild, audit_branch)
    finally:
        cleaned.unpersist()
    checks = (*checks, held_back())
    extra["records_quarantined"] = checks[-1].violations
    extra["silver_snapshot_id"] = str(current_snapshot_id(spark, silver_table))
    untouched = sorted(set(days) - set(rebuild))
    if untouched:  # report what every requested day holds, rewritten or not
        in_untouched = spark.table(silver_table).where(F.col("transaction_date").isin(untouched))
        counts |= count_by_day(in_untouched, untouched, "transaction_date")
    distinct_ids = bronze_read.where(F.col("transaction_id").isNotNull()).select("transaction_id").distinct().count()
    extra |= {"bronze_rows": received, "duplicates_removed": received - distinct_ids}
    if not appended_days:  # every rebuilt day was read whole: what did not reach silver was refused
        extra["rejected"] = distinct_ids - sum(counts[d.isoformat()] for d in rebuild)
    return LayerResult(commit, changes, counts, extra, checks=tuple(checks))


def merge_latest(current_silver, new_rows):
    """Silver rows of some days plus newly cleaned rows: one row per transaction id, the newest update winning (ties
    to the later batch, then to the new row, so a merge equals a full rebuild)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    both = current_silver.withColumn("_new", F.lit(0)).unionByName(new_rows.withColumn("_new", F.lit(1)))
    newest_first = Window.partitionBy("transaction_id").orderBy(
        F.col("updated_at").desc(), F.col("_batch_id").desc(), F.col("_new").desc()
    )
    return both.withColumn("_rank", F.row_number().over(newest_first)).where("_rank = 1").drop("_rank", "_new")


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


def build_gold(spark, catalog: str, days: list[dt.date], audit_branch: str | None = None) -> LayerResult:
    from pyspark.sql import functions as F

    silver = spark.table(SILVER_TRANSACTIONS.qualified(catalog)).where(F.col("transaction_date").isin(sorted(days)))
    changes = ensure_table(spark, catalog, GOLD_DAILY_SUMMARY)
    summary = conform(daily_summary(silver), GOLD_DAILY_SUMMARY).cache()
    counts = count_by_day(summary, days, "transaction_date")
    try:
        commit, checks = _replace(spark, catalog, GOLD_DAILY_SUMMARY, summary, days, audit_branch)
    finally:
        summary.unpersist()
    return LayerResult(commit, changes, counts, checks=tuple(checks))
