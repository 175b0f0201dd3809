"""Customers and merchants: bronze (the observation log) and SCD2 histories, declared in YAML, and the gold tables
per customer and day built on them."""

from etr_assets.lake.specs import MIB, TARGET_FILE_SIZE, Check, Column, TableSpec
from etr_assets.tables.declared import source

# Declared in the BNPL source's YAML (etr_assets/defs/sources/bnpl/defs.yaml): bronze and the SCD2 histories.
_CUSTOMERS, _MERCHANTS = source("bnpl").feeds["customers"], source("bnpl").feeds["merchants"]
BRONZE_CUSTOMERS, LANDING_CUSTOMERS = _CUSTOMERS.raw.bronze, _CUSTOMERS.landing
BRONZE_MERCHANTS, LANDING_MERCHANTS = _MERCHANTS.raw.bronze, _MERCHANTS.landing

_CUSTOMER = {c.name: c for c in BRONZE_CUSTOMERS.columns}

_ACTIVITY = (
    Column("transactions", "bigint", "Transactions up to and including the day", required=True),
    Column("approved_amount", "decimal(18,2)", "Sum of APPROVED and PROCESSED amounts up to the day", required=True),
)
_COMPUTED_AT = Column("_computed_at", "timestamp", "When gold computed the row", required=True)
_PER_CUSTOMER_DAY = {  # the layout of both gold tables keyed by (day, customer)
    "partition_by": ("days(as_of_date)",),
    "write_order": ("as_of_date", "customer_id"),
    "properties": {TARGET_FILE_SIZE: str(32 * MIB)},
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
        LANDING_CUSTOMERS.column("credit_limit"),
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
