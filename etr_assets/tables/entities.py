"""Customers and merchants: every received record per snapshot day (bronze, the observation log), and their
history as SCD2 (landing, one version per change)."""

from etr_assets.lake.specs import (
    HISTORY_PARTITIONS,
    MERGE_ON_READ,
    MIB,
    ROW_GROUP_SIZE,
    SCD2_COLUMNS,
    SCD2_EXPECTATIONS,
    TARGET_FILE_SIZE,
    Check,
    Column,
    Scd2,
    TableSpec,
)
from etr_assets.tables.transactions import BRONZE_LINEAGE

_BRONZE_LINEAGE = (Column("_as_of", "date", "Day of the snapshot the record came in", required=True), *BRONZE_LINEAGE)
_SMALL = {TARGET_FILE_SIZE: str(32 * MIB)}
# SCD2 histories change a few rows of a keyed table each day: the daily MERGE writes the closed and new versions and
# deletion vectors (format v3; position deletes on v2) instead of rewriting every file that holds a changed key.
# Every daily apply reads the whole current partition three times; row groups of 8 MiB (Iceberg splits a file only
# between them) spread those scans over every core instead of a task per file (docs/benchmarks.md).
_HISTORY = {
    **_SMALL,
    **MERGE_ON_READ,
    ROW_GROUP_SIZE: str(8 * MIB),
    "read.split.target-size": str(8 * MIB),
}

_CUSTOMER_FIELDS = (
    Column("customer_id", "bigint", "Customer id", required=True, pii=True),
    Column("first_name", "string", "Given name", pii=True),
    Column("last_name", "string", "Family name", pii=True),
    Column("email", "string", "E-mail address", pii=True),
    Column("phone", "string", "Phone number", pii=True),
    Column("date_of_birth", "date", "Date of birth", pii=True),
    Column("city", "string", "City of residence", pii=True),
    Column("country", "string", "ISO 3166 country code"),
    Column("credit_limit", "string", "BNPL credit limit as sent (decimal text)"),
    Column("risk_segment", "string", "LOW, MEDIUM or HIGH"),
    Column("created_at", "timestamp", "When the customer signed up (UTC)"),
    Column("updated_at", "timestamp", "When the provider last changed the customer (UTC)", required=True),
)
BRONZE_CUSTOMERS = TableSpec(
    namespace="bronze",
    name="bnpl_customers_raw",
    description="Every customer record the API delivered, per snapshot day, with lineage",
    columns=_CUSTOMER_FIELDS + _BRONZE_LINEAGE,
    partition_by=("days(_as_of)",),
    write_order=("_as_of", "customer_id"),
    properties=_SMALL,
    subject_column="customer_id",
    checks=(
        Check(
            "credit_limit is a non-negative decimal with 2 fraction digits at most",
            r"credit_limit RLIKE '^[0-9]{1,10}([.][0-9]{1,2})?$'",
        ),
        Check("risk_segment is LOW, MEDIUM or HIGH", "risk_segment IN ('LOW', 'MEDIUM', 'HIGH')"),
    ),
)

_CUSTOMER = {c.name: c for c in _CUSTOMER_FIELDS}
_CUSTOMER_TRACKED = tuple(_CUSTOMER)[1:10]  # first_name .. risk_segment
_CREDIT_LIMIT = Column("credit_limit", "decimal(12,2)", "BNPL credit limit")

LANDING_CUSTOMERS = TableSpec(
    namespace="landing",
    name="customers",
    description="Customer history as SCD2: one version per change of a tracked attribute",
    columns=(
        _CUSTOMER["customer_id"],
        *(c for c in _CUSTOMER_FIELDS if c.name in _CUSTOMER_TRACKED and c.name != "credit_limit"),
        _CREDIT_LIMIT,
        Column("created_at", "timestamp", "When the customer signed up (UTC)"),
        Column("updated_at", "timestamp", "Source update time of the record that started this version", required=True),
        *SCD2_COLUMNS,
    ),
    partition_by=HISTORY_PARTITIONS,
    write_order=("customer_id", "_valid_from"),
    properties=_HISTORY,
    subject_column="customer_id",
    scd2=Scd2(key="customer_id", tracked=_CUSTOMER_TRACKED, sequence="updated_at"),
    expectations=SCD2_EXPECTATIONS,
)

_MERCHANT_FIELDS = (
    Column("merchant_id", "bigint", "Merchant id", required=True),
    Column("name", "string", "Trading name"),
    Column("category", "string", "Merchant category"),
    Column("mcc", "string", "Merchant category code (4 digits)"),
    Column("country", "string", "ISO 3166 country code"),
    Column("status", "string", "ACTIVE or SUSPENDED"),
    Column("created_at", "timestamp", "When the merchant was onboarded (UTC)"),
    Column("updated_at", "timestamp", "When the provider last changed the merchant (UTC)", required=True),
)

BRONZE_MERCHANTS = TableSpec(
    namespace="bronze",
    name="bnpl_merchants_raw",
    description="Every merchant record the API delivered, per snapshot day, with lineage",
    columns=_MERCHANT_FIELDS + _BRONZE_LINEAGE,
    partition_by=("days(_as_of)",),
    write_order=("_as_of", "merchant_id"),
    properties=_SMALL,
    checks=(
        Check("mcc is 4 digits", "mcc RLIKE '^[0-9]{4}$'"),
        Check("status is ACTIVE or SUSPENDED", "status IN ('ACTIVE', 'SUSPENDED')"),
    ),
)

LANDING_MERCHANTS = TableSpec(
    namespace="landing",
    name="merchants",
    description="Merchant history as SCD2: one version per change of a tracked attribute",
    columns=_MERCHANT_FIELDS + SCD2_COLUMNS,
    partition_by=HISTORY_PARTITIONS,
    write_order=("merchant_id", "_valid_from"),
    properties=_HISTORY,
    scd2=Scd2(key="merchant_id", tracked=("name", "category", "mcc", "country", "status"), sequence="updated_at"),
    expectations=SCD2_EXPECTATIONS,
)

_ACTIVITY = (
    Column("transactions", "bigint", "Transactions up to and including the day", required=True),
    Column("approved_amount", "decimal(18,2)", "Sum of APPROVED and PROCESSED amounts up to the day", required=True),
)
_COMPUTED_AT = Column("_computed_at", "timestamp", "When gold computed the row", required=True)
_PER_CUSTOMER_DAY = {  # the layout of both gold tables keyed by (day, customer)
    "partition_by": ("days(as_of_date)",),
    "write_order": ("as_of_date", "customer_id"),
    "properties": _SMALL,
    "subject_column": "customer_id",
}

# Running totals: a day's activity is the day before's plus the day's transactions, never all of silver.
GOLD_CUSTOMER_ACTIVITY = TableSpec(
    namespace="gold",
    name="customer_activity",
    description="Each customer's transactions up to the end of a day: the previous day's figures plus the day's",
    columns=(
        Column("as_of_date", "date", "Day the figures run up to (end of day, UTC)", required=True),
        _CUSTOMER["customer_id"],
        *_ACTIVITY,
        Column("last_transaction_date", "date", "Most recent transaction up to the day", required=True),
        _COMPUTED_AT,
    ),
    **_PER_CUSTOMER_DAY,
    expectations=(
        Check("activity figures are positive", "transactions > 0 AND approved_amount >= 0"),
        Check("no transaction after the day", "last_transaction_date <= as_of_date"),
    ),
)

GOLD_CUSTOMER_PROFILES = TableSpec(
    namespace="gold",
    name="customer_profiles",
    description="Each customer as of the end of a day (SCD2 as-of view) with their transactions up to that day",
    columns=(
        Column("as_of_date", "date", "Day the profile describes (end of day, UTC)", required=True),
        *(_CUSTOMER[n] for n in ("customer_id", "first_name", "last_name", "email", "city", "country", "risk_segment")),
        _CREDIT_LIMIT,
        *_ACTIVITY,
        Column("last_transaction_date", "date", "Most recent transaction up to the day"),
        Column("credit_used_ratio", "double", "approved_amount / credit_limit"),
        _COMPUTED_AT,
    ),
    **_PER_CUSTOMER_DAY,
    expectations=(
        Check("activity figures are not negative", "transactions >= 0 AND approved_amount >= 0"),
        Check("no transaction after the day", "last_transaction_date IS NULL OR last_transaction_date <= as_of_date"),
    ),
)
