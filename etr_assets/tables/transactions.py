"""The eTR+ transaction tables: bronze (as received, declared in YAML), silver (typed, deduplicated), gold (daily
summary)."""

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
from etr_assets.tables.declared import source

STATUSES = ("PENDING", "APPROVED", "PROCESSED", "DECLINED", "REFUNDED")
_STATUS_LIST = ", ".join(f"'{s}'" for s in STATUSES)
# As received: declared in the BNPL source's YAML (etr_assets/defs/sources/bnpl/defs.yaml).
BRONZE_TRANSACTIONS = source("bnpl").raw_feed("transactions").bronze

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
