"""The eTR+ transaction tables: bronze (as received), silver (typed, deduplicated), gold (daily summary)."""

from etr_assets.lake.specs import (
    MERGE_ON_READ,
    MIB,
    ROW_GROUP_SIZE,
    TARGET_FILE_SIZE,
    WAP_ENABLED,
    Check,
    Column,
    QualityRules,
    Reference,
    TableSpec,
    bloom_filter,
)

# Fields of the BNPL API's transaction record, as it sends them. Read with this schema, never inferred
# (apache/iceberg #4849); the amount stays text in bronze so no precision is lost before silver types it.
_API_FIELDS = (
    Column("transaction_id", "bigint", "Transaction id assigned by the BNPL provider", required=True),
    Column("customer_id", "bigint", "Customer who made the purchase", required=True, pii=True),
    Column("merchant_id", "bigint", "Merchant where the purchase was made", required=True),
    Column("amount", "string", "Purchase amount as sent by the API (decimal text)", required=True),
    Column("currency", "string", "ISO 4217 currency code", required=True),
    Column("instalments", "int", "Number of instalments the purchase is split into"),
    Column("payment_method", "string", "CARD, FPX, EWALLET or DIRECT_DEBIT"),
    Column("status", "string", "PENDING, APPROVED, PROCESSED, DECLINED or REFUNDED", required=True),
    Column("transaction_date", "date", "Business date of the purchase", required=True),
    Column("created_at", "timestamp", "When the provider created the transaction (UTC)"),
    Column("updated_at", "timestamp", "When the provider last changed the transaction (UTC)", required=True),
)

STATUSES = ("PENDING", "APPROVED", "PROCESSED", "DECLINED", "REFUNDED")
_STATUS_LIST = ", ".join(f"'{s}'" for s in STATUSES)
BRONZE_LINEAGE = (
    Column("_batch_id", "string", "Raw-zone batch the record arrived in", required=True),
    Column("_source_file", "string", "Raw-zone file the record was read from", required=True),
    Column("_ingested_at", "timestamp", "When the record was loaded into Iceberg", required=True),
)

BRONZE_TRANSACTIONS = TableSpec(
    namespace="bronze",
    name="bnpl_transactions_raw",
    description="BNPL transactions exactly as the API delivered them, one row per received record, with lineage",
    columns=_API_FIELDS + BRONZE_LINEAGE,
    partition_by=("days(transaction_date)",),
    write_order=("transaction_date", "transaction_id"),
    subject_column="customer_id",
    checks=(
        Check(
            "amount is a decimal with at most 8 integer and 2 fraction digits",
            r"amount RLIKE '^[0-9]{1,8}([.][0-9]{1,2})?$'",
        ),
        Check("amount is positive", "CAST(amount AS DECIMAL(10,2)) > 0"),
        Check("instalments is one of 3, 4, 6, 12", "instalments IN (3, 4, 6, 12)"),
        Check("status is one of " + ", ".join(STATUSES), f"upper(status) IN ({_STATUS_LIST})"),
        Check("currency is a 3-letter ISO code", "currency RLIKE '^[A-Za-z]{3}$'"),
        Check("updated_at is not before created_at", "updated_at >= created_at"),
    ),
)

SILVER_TRANSACTIONS = TableSpec(
    namespace="silver",
    name="bnpl_transactions_clean",
    description="One row per transaction: typed, validated, latest update wins",
    columns=(
        Column("transaction_id", "bigint", "Transaction id (unique)", required=True),
        Column("customer_id", "bigint", "Customer who made the purchase", required=True, pii=True),
        Column("merchant_id", "bigint", "Merchant where the purchase was made", required=True),
        Column("amount", "decimal(10,2)", "Purchase amount", required=True),
        Column("currency", "string", "ISO 4217 currency code, upper case", required=True),
        Column("instalments", "int", "Number of instalments"),
        Column("payment_method", "string", "Payment method, upper case"),
        Column("status", "string", "One of " + ", ".join(STATUSES), required=True),
        Column("transaction_date", "date", "Business date of the purchase", required=True),
        Column("created_at", "timestamp", "When the provider created the transaction (UTC)"),
        Column("updated_at", "timestamp", "When the provider last changed the transaction (UTC)", required=True),
        Column("_batch_id", "string", "Raw-zone batch of the winning record", required=True),
        Column("_processed_at", "timestamp", "When silver wrote the row", required=True),
    ),
    partition_by=("days(transaction_date)",),
    # By status inside a day, in row groups of 8 MiB: a day's PENDING rows are one row group or two, and a customer's
    # a few (each status sorted by customer). Published from an audit branch once checks pass; layout, bloom filter
    # and merge-on-read: docs/benchmarks.md, benchmark 1.
    write_order=("transaction_date", "status", "customer_id"),
    subject_column="customer_id",
    properties={
        WAP_ENABLED: "true",
        **MERGE_ON_READ,
        **bloom_filter("customer_id", ids_per_file=10_000),
        ROW_GROUP_SIZE: str(8 * MIB),
    },
    # Per record: a transaction that breaks one goes to silver.quarantine_transactions and its day publishes without
    # it. Per day (blocking): transaction_id unique in the whole table.
    expectations=(
        Check(
            "keys are present",
            "transaction_id IS NOT NULL AND customer_id IS NOT NULL AND merchant_id IS NOT NULL",
            per_record=True,
        ),
        Check("status is an accepted value", f"status IN ({_STATUS_LIST})", per_record=True),
        Check("amount is between 0.01 and 100000", "amount BETWEEN 0.01 AND 100000", per_record=True),
    ),
    unique_key="transaction_id",
    quality=QualityRules(references=(Reference("customer_id", "landing.customers", "customer_id"),)),
)

GOLD_DAILY_SUMMARY = TableSpec(
    namespace="gold",
    name="bnpl_daily_summary",
    description="Per day and currency: transaction counts by outcome, amounts and distinct customers",
    columns=(
        Column("transaction_date", "date", "Business date", required=True),
        Column("currency", "string", "ISO 4217 currency code", required=True),
        Column("transactions", "bigint", "Transactions of the day", required=True),
        Column("approved", "bigint", "Transactions APPROVED or PROCESSED", required=True),
        Column("declined", "bigint", "Transactions DECLINED", required=True),
        Column("refunded", "bigint", "Transactions REFUNDED", required=True),
        Column("pending", "bigint", "Transactions still PENDING", required=True),
        Column("gross_amount", "decimal(18,2)", "Sum of APPROVED and PROCESSED amounts", required=True),
        Column("refunded_amount", "decimal(18,2)", "Sum of REFUNDED amounts", required=True),
        Column("average_amount", "decimal(12,2)", "Mean amount over all transactions"),
        Column("distinct_customers", "bigint", "Customers with at least one transaction", required=True),
        Column("distinct_merchants", "bigint", "Merchants with at least one transaction", required=True),
        Column("_computed_at", "timestamp", "When gold computed the row", required=True),
    ),
    partition_by=("days(transaction_date)",),
    write_order=("transaction_date", "currency"),
    properties={TARGET_FILE_SIZE: str(32 * MIB), WAP_ENABLED: "true"},
    expectations=(
        Check("outcome counts add up", "approved + declined + refunded + pending = transactions"),
        Check("amounts are not negative", "gross_amount >= 0 AND refunded_amount >= 0"),
    ),
)
