"""The transaction pipeline: raw batches -> bronze -> silver -> gold, one function per layer, each replacing exactly
the days it builds in one Iceberg commit, so running a day again gives the same rows and a failure changes nothing."""

from __future__ import annotations

import datetime as dt
import functools

from etr_assets.errors import BadInputError
from etr_assets.lake.bronze import load_bronze_days
from etr_assets.lake.evolve import ensure_table
from etr_assets.lake.figures import WriteResult
from etr_assets.lake.frames import conform, count_by_day
from etr_assets.lake.incremental import ReadMode, cursor_stamp, plan_reads, read_plan, stamped_cursors
from etr_assets.lake.quality import CheckOutcome, record_quarantine_outcome, split_by_record_rules
from etr_assets.lake.wap import evaluate, write_audit_publish
from etr_assets.lake.writes import CommitInfo, current_snapshot_id, replace_days
from etr_assets.sources.raw_zone import RawZone
from etr_assets.tables.feeds import SILVER_QUARANTINE_TRANSACTIONS, TRANSACTIONS
from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, GOLD_DAILY_SUMMARY, SILVER_TRANSACTIONS, STATUSES

__all__ = ["TRANSACTIONS", "BadInputError", "build_gold", "build_silver", "load_bronze"]


def load_bronze(spark, catalog: str, raw: RawZone, days: list[dt.date], **policy) -> WriteResult:
    """Replace each day of bronze with its newest downloaded raw batch, then mark it complete."""
    return load_bronze_days(spark, catalog, raw, TRANSACTIONS, days, **policy)


def _newest(df, tiebreak):
    """One row per transaction id: the newest update, ties to the later batch, then to the highest `tiebreak`."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = Window.partitionBy("transaction_id").orderBy(
        F.col("updated_at").desc(), F.col("_batch_id").desc(), tiebreak
    )
    return df.withColumn("_rank", F.row_number().over(order)).where("_rank = 1").drop("_rank")


def clean_transactions(bronze_df):
    """Typed, validated, one row per transaction id: the latest update wins, deterministically."""
    from pyspark.sql import functions as F

    normalized = {
        "amount": F.col("amount").cast("decimal(10,2)"),
        "currency": F.upper(F.trim("currency")),
        "payment_method": F.upper(F.trim("payment_method")),
        "status": F.upper(F.trim("status")),
    }
    required = ("transaction_id", "customer_id", "merchant_id", "amount", "transaction_date", "updated_at")
    valid = bronze_df.withColumns(normalized).where(
        functools.reduce(lambda a, b: a & b, [F.col(c).isNotNull() for c in required])
        & (F.col("amount") >= 0)
        & F.col("currency").rlike("^[A-Z]{3}$")
        & F.col("status").isin(*STATUSES)
    )
    # Ties on updated_at and batch are broken by row content, so reruns pick the same row.
    latest = _newest(valid, F.xxhash64(*[c.name for c in TRANSACTIONS.api_columns]).desc())
    return latest.withColumn("_processed_at", F.current_timestamp())


def _replace(spark, catalog: str, spec, df, days, audit_branch: str | None, day_column="transaction_date", stamp=None):
    """Replace the days directly, or through write-audit-publish on `audit_branch` (raises AuditFailed); `stamp`:
    snapshot properties of the commit (write options)."""
    write = functools.partial(replace_days, spark, spec.qualified(catalog), df, day_column, days, options=stamp)
    return write_audit_publish(spark, catalog, spec, audit_branch, days, write) if audit_branch else (write(), ())


def write_days(spark, catalog: str, spec, rows, days, day_column: str, changes, audit_branch=None, **result):
    """A layer's result of replacing `days` of `spec` with `rows` (cached while counted and written), directly or
    through write-audit-publish on `audit_branch`; `result`: more WriteResult fields."""
    rows = rows.cache()
    try:
        counts = count_by_day(rows, days, day_column)
        commit, checks = _replace(spark, catalog, spec, rows, days, audit_branch, day_column)
    finally:
        rows.unpersist()
    return WriteResult(commit, changes, counts, checks=tuple(checks), **result)


def build_silver(
    spark, catalog: str, days: list[dt.date], audit_branch: str | None = None, full_refresh: bool = False
) -> WriteResult:
    """Rebuild `days` of silver, reading only the bronze rows each day needs since the silver commit that last rebuilt
    it, by the cursor stamped on that commit (docs/lifecycle.md#incremental-silver)."""
    from pyspark.sql import functions as F

    bronze_table, silver_table = BRONZE_TRANSACTIONS.qualified(catalog), SILVER_TRANSACTIONS.qualified(catalog)
    quarantine_table = SILVER_QUARANTINE_TRANSACTIONS.qualified(catalog)
    changes = ensure_table(spark, catalog, SILVER_TRANSACTIONS)
    ensure_table(spark, catalog, SILVER_QUARANTINE_TRANSACTIONS)
    cursors = dict.fromkeys(days) if full_refresh else stamped_cursors(spark, silver_table, days)
    plan = plan_reads(spark, bronze_table, silver_table, "transaction_date", cursors, full_refresh)
    full, appended = read_plan(spark, bronze_table, plan, "transaction_date")
    read = [df for df in (full, appended) if df is not None]
    bronze_read = functools.reduce(lambda a, b: a.unionByName(b), read) if read else None
    received = bronze_read.count() if read else 0
    appended_days = (
        {r[0] for r in appended.select("transaction_date").distinct().collect()} if appended is not None else set()
    )
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
        return WriteResult(CommitInfo(silver_table, None, None), changes, counts, extra, checks=(*checks, held_back()))

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
        # The quarantine first (a crash before silver's commit rebuilds both); nothing held, no commit (most days).
        held_days = F.col("transaction_date").isin(sorted(rebuild))
        if not held.isEmpty() or not spark.table(quarantine_table).where(held_days).isEmpty():
            replace_days(
                spark, quarantine_table, conform(held, SILVER_QUARANTINE_TRANSACTIONS), "transaction_date", rebuild
            )
        stamp = cursor_stamp(plan.upstream_snapshot_id, rebuild)
        commit, checks = _replace(spark, catalog, SILVER_TRANSACTIONS, kept, rebuild, audit_branch, stamp=stamp)
    finally:
        cleaned.unpersist()
    checks = (*checks, held_back())
    extra["records_quarantined"] = checks[-1].violations
    extra["silver_snapshot_id"] = str(current_snapshot_id(spark, silver_table))
    if untouched := sorted(set(days) - set(rebuild)):  # report what every requested day holds, rewritten or not
        in_untouched = spark.table(silver_table).where(F.col("transaction_date").isin(untouched))
        counts |= count_by_day(in_untouched, untouched, "transaction_date")
    distinct_ids = bronze_read.where(F.col("transaction_id").isNotNull()).select("transaction_id").distinct().count()
    extra |= {"bronze_rows": received, "duplicates_removed": received - distinct_ids}
    if not appended_days:  # every rebuilt day was read whole: what did not reach silver was refused
        extra["rejected"] = distinct_ids - sum(counts[d.isoformat()] for d in rebuild)
    return WriteResult(commit, changes, counts, extra, checks=tuple(checks))


def merge_latest(current_silver, new_rows):
    """Silver rows of some days plus newly cleaned rows: one row per transaction id, the newest update winning (ties
    to the later batch, then to the new row, so a merge equals a full rebuild)."""
    from pyspark.sql import functions as F

    both = current_silver.withColumn("_new", F.lit(0)).unionByName(new_rows.withColumn("_new", F.lit(1)))
    return _newest(both, F.col("_new").desc()).drop("_new")


def daily_summary(silver_df):
    from pyspark.sql import functions as F

    approved = F.col("status").isin("APPROVED", "PROCESSED")

    def sum_if(condition):
        return F.coalesce(F.sum(F.when(condition, F.col("amount"))), F.lit(0)).cast("decimal(18,2)")

    return silver_df.groupBy("transaction_date", "currency").agg(
        F.count(F.lit(1)).alias("transactions"),
        F.count_if(approved).alias("approved"),
        F.count_if(F.col("status") == "DECLINED").alias("declined"),
        F.count_if(F.col("status") == "REFUNDED").alias("refunded"),
        F.count_if(F.col("status") == "PENDING").alias("pending"),
        sum_if(approved).alias("gross_amount"),
        sum_if(F.col("status") == "REFUNDED").alias("refunded_amount"),
        F.avg("amount").cast("decimal(12,2)").alias("average_amount"),
        F.countDistinct("customer_id").alias("distinct_customers"),
        F.countDistinct("merchant_id").alias("distinct_merchants"),
        F.current_timestamp().alias("_computed_at"),
    )


def build_gold(spark, catalog: str, days: list[dt.date], audit_branch: str | None = None) -> WriteResult:
    from pyspark.sql import functions as F

    silver = spark.table(SILVER_TRANSACTIONS.qualified(catalog)).where(F.col("transaction_date").isin(sorted(days)))
    changes = ensure_table(spark, catalog, GOLD_DAILY_SUMMARY)
    summary = conform(daily_summary(silver), GOLD_DAILY_SUMMARY)
    return write_days(spark, catalog, GOLD_DAILY_SUMMARY, summary, days, "transaction_date", changes, audit_branch)
