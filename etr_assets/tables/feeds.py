"""The pipeline's feeds, declared once beside the table specs: which API endpoint fills which bronze, quarantine and
landing table, and so which asset writes each table."""

from etr_assets.lake.feeds import EntityFeed, RawFeed
from etr_assets.lake.specs import TableSpec
from etr_assets.sources.fetch import SOURCE
from etr_assets.tables.entities import BRONZE_CUSTOMERS, BRONZE_MERCHANTS, LANDING_CUSTOMERS, LANDING_MERCHANTS
from etr_assets.tables.quarantine import (
    QUARANTINE_CUSTOMERS,
    QUARANTINE_MERCHANTS,
    QUARANTINE_TRANSACTIONS,
    SILVER_QUARANTINE_TRANSACTIONS,
)
from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, SILVER_TRANSACTIONS

_DAY = "transaction_date"  # the batch's business day, and a record field that must equal it
TRANSACTIONS = RawFeed(
    SOURCE, "transactions", BRONZE_TRANSACTIONS, QUARANTINE_TRANSACTIONS, day_column=_DAY, record_day_column=_DAY
)
CUSTOMERS = EntityFeed(
    RawFeed(SOURCE, "customers", BRONZE_CUSTOMERS, QUARANTINE_CUSTOMERS, day_column="_as_of", key_column="customer_id"),
    LANDING_CUSTOMERS,
)
MERCHANTS = EntityFeed(
    RawFeed(SOURCE, "merchants", BRONZE_MERCHANTS, QUARANTINE_MERCHANTS, day_column="_as_of", key_column="merchant_id"),
    LANDING_MERCHANTS,
)
RAW_FEEDS: tuple[RawFeed, ...] = (TRANSACTIONS, CUSTOMERS.raw, MERCHANTS.raw)

# Tables written as a side effect of another table's asset (its quarantine), by the spec that asset writes.
_WRITTEN_WITH = {
    **{feed.quarantine.identifier: feed.bronze for feed in RAW_FEEDS},
    SILVER_QUARANTINE_TRANSACTIONS.identifier: SILVER_TRANSACTIONS,
}


def writer_spec(spec: TableSpec) -> TableSpec:
    """The table whose asset writes `spec`: a quarantine table is written by the asset of the table it guards."""
    return _WRITTEN_WITH.get(spec.identifier, spec)
