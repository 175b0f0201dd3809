"""Synthetic BNPL transactions in the silver table's shape, generated inside Spark (millions of rows in seconds).

The distributions follow the synthetic API (`etr_assets/sources/synthetic_data.py`): status weights 3/46/44/4/3,
log-normal amounts, MYR/SGD/USD 80/12/8, instalments 3/4/6/12, four payment methods, a skew towards some
customers. The API builds records one by one in Python (about 20k a second), too slow for a year of millions,
so the benchmarks draw the same shape with Spark's functions from a seed: every run gets the same rows.
"""

from __future__ import annotations

import datetime as dt

FIRST_DAY = dt.date(2024, 1, 1)
ROWS_PER_SCALE = 3_650_000  # scale 1: 10,000 transactions a day for a year
DAYS = 365
CUSTOMERS_PER_ROW = 0.05  # about 20 transactions a customer a year: one customer touches a few days only


def sizes(scale: float, days: int | None = None, per_day: int | None = None) -> dict:
    """Rows, days and customers: from `scale`, or `days` x `per_day` rows (a default for the one not given: a
    year, or 10,000 rows a day). Customers follow the rows either way, so one keeps about 20 transactions."""
    if days or per_day:
        rows = (days or DAYS) * (per_day or ROWS_PER_SCALE // DAYS)
        days = days or DAYS
    else:
        rows = max(1_000, int(ROWS_PER_SCALE * scale))
        days = DAYS if rows >= 36_500 else max(7, rows // 1_000)
    return {"rows": rows, "days": days, "customers": max(100, int(rows * CUSTOMERS_PER_ROW))}


def _weighted(u, values: tuple, weights: tuple):
    """A categorical draw from a uniform column `u` in [0, 1)."""
    from pyspark.sql import functions as F

    total, bound, expr = sum(weights), 0.0, None
    for value, weight in zip(values, weights):
        bound += weight / total
        expr = F.when(u < bound, F.lit(value)) if expr is None else expr.when(u < bound, F.lit(value))
    return expr.otherwise(F.lit(values[-1]))


def transactions(spark, rows: int, days: int, customers: int, seed: int = 7, first_day: dt.date = FIRST_DAY):
    """`rows` silver transactions over `days` days from `first_day`, with `customers` distinct customer ids."""
    from pyspark.sql import functions as F

    def uniform(salt: int):
        # A deterministic uniform in [0, 1) per row and salt (rand(seed) depends on partitioning).
        return (F.abs(F.xxhash64(F.col("id"), F.lit(seed), F.lit(salt))) % 1_000_000) / 1_000_000.0

    base = spark.range(rows, numPartitions=max(2, rows // 500_000))
    day = (F.col("id") % days).cast("int")
    created_seconds = (uniform(1) * 86_400).cast("int")
    status = _weighted(uniform(2), ("PENDING", "APPROVED", "PROCESSED", "DECLINED", "REFUNDED"), (3, 46, 44, 4, 3))
    lag = F.when(status == "PENDING", 0).otherwise(60 + (-F.log(1 - uniform(3)) * 7200).cast("int"))
    # log-normal amount: exp(N(4.4, 1)) via Box-Muller on two uniforms, clamped like the API's
    normal = F.sqrt(-2 * F.log(1 - uniform(4))) * F.cos(2 * 3.141592653589793 * uniform(5))
    cents = F.least(F.greatest(F.round(F.exp(4.4 + normal) * 100), F.lit(500)), F.lit(250_000))
    created_epoch = F.unix_timestamp(F.lit(first_day.isoformat()), "yyyy-MM-dd") + day * 86_400 + created_seconds
    return base.select(
        (F.lit(10_000_000_000) + F.col("id")).alias("transaction_id"),
        (100_001 + (F.pow(uniform(6), 1.3) * customers).cast("bigint")).alias("customer_id"),
        (500_001 + (uniform(7) * 60).cast("bigint")).alias("merchant_id"),
        (cents / 100).cast("decimal(10,2)").alias("amount"),
        _weighted(uniform(8), ("MYR", "SGD", "USD"), (80, 12, 8)).alias("currency"),
        _weighted(uniform(9), (3, 4, 6, 12), (50, 25, 15, 10)).cast("int").alias("instalments"),
        _weighted(uniform(10), ("CARD", "FPX", "EWALLET", "DIRECT_DEBIT"), (45, 20, 25, 10)).alias("payment_method"),
        status.alias("status"),
        F.date_add(F.lit(first_day), day).alias("transaction_date"),
        F.timestamp_seconds(created_epoch).alias("created_at"),
        F.timestamp_seconds(created_epoch + lag).alias("updated_at"),
        F.concat(F.lit("bench_"), F.date_format(F.date_add(F.lit(first_day), day), "yyyyMMdd")).alias("_batch_id"),
        F.lit(dt.datetime(2025, 1, 1)).cast("timestamp").alias("_processed_at"),
    )
