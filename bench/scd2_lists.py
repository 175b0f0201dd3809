"""The customer lists the SCD2 benchmarks apply (bench/scd2.py, bench/scd2_late.py, bench/scd2_against.py): full
snapshots of the landing.customers spec's business columns, some keys changed in a tracked column."""

from __future__ import annotations

import datetime as dt

from etr_assets.tables.entities import LANDING_CUSTOMERS

HISTORY_DAYS = 3  # bronze already holds batch 0 as this many daily snapshots when batch 1 arrives
T0 = dt.datetime(2025, 1, 1, 12)
T1 = T0 + dt.timedelta(days=HISTORY_DAYS)  # when batch 1's changes happened: after the last day's snapshot
BUSINESS = [c.name for c in LANDING_CUSTOMERS.columns if not c.name.startswith("_")]
TRACKED = LANDING_CUSTOMERS.scd2.tracked


def batch(spark, keys: int, changed_percent: int, number: int, changed_at: dt.datetime = T1, salt: str = "moved"):
    """A full snapshot of `keys` customers; in batch 1, `changed_percent` of them moved city (a tracked column) at
    `changed_at` (`salt` picks which keys)."""
    from pyspark.sql import functions as F

    changed = (F.abs(F.xxhash64(F.col("id"), F.lit(salt))) % 100) < changed_percent if number else F.lit(False)
    id_text = F.col("id").cast("string")
    return spark.range(keys).select(
        (F.lit(100_001) + F.col("id")).alias("customer_id"),
        F.concat(F.lit("First"), id_text).alias("first_name"),
        F.concat(F.lit("Last"), (F.col("id") % 997).cast("string")).alias("last_name"),
        F.when(F.col("id") % 50 == 0, F.lit(None)).otherwise(F.concat(id_text, F.lit("@example.com"))).alias("email"),
        F.concat(F.lit("+6012"), F.lpad(id_text, 7, "0")).alias("phone"),
        F.date_add(F.lit(dt.date(1960, 1, 1)), (F.col("id") % 15_000).cast("int")).alias("date_of_birth"),
        F.concat(
            F.lit("City"), (F.col("id") % 40).cast("string"), F.when(changed, F.lit(f" ({salt})")).otherwise("")
        ).alias("city"),
        F.when(F.col("id") % 5 == 0, F.lit("SG")).otherwise(F.lit("MY")).alias("country"),
        F.element_at(F.array(F.lit("LOW"), F.lit("MEDIUM"), F.lit("HIGH")), (F.col("id") % 3 + 1).cast("int")).alias(
            "risk_segment"
        ),
        ((F.col("id") % 50 + 1) * 100).cast("decimal(12,2)").alias("credit_limit"),
        F.lit(dt.datetime(2024, 1, 1)).alias("created_at"),
        F.when(changed, F.lit(changed_at)).otherwise(F.lit(T0)).alias("updated_at"),
    )
