"""Every table of the lake, declared once. ALL_SPECS is what erasure, `etr tables` and bootstrap iterate."""

from etr_assets.lake.bookkeeping import DATA_QUALITY_METRICS, GDPR_ACTIONS, TABLE_CHANGES, TABLE_MAINTENANCE_LOG
from etr_assets.lake.specs import TableSpec
from etr_assets.tables.entities import (
    BRONZE_CUSTOMERS,
    BRONZE_MERCHANTS,
    GOLD_CUSTOMER_ACTIVITY,
    GOLD_CUSTOMER_PROFILES,
    LANDING_CUSTOMERS,
    LANDING_MERCHANTS,
)
from etr_assets.tables.quarantine import (
    QUARANTINE_CUSTOMERS,
    QUARANTINE_MERCHANTS,
    QUARANTINE_TRANSACTIONS,
    SILVER_QUARANTINE_TRANSACTIONS,
)
from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, GOLD_DAILY_SUMMARY, SILVER_TRANSACTIONS

ALL_SPECS: tuple[TableSpec, ...] = (
    BRONZE_TRANSACTIONS,
    BRONZE_CUSTOMERS,
    BRONZE_MERCHANTS,
    QUARANTINE_TRANSACTIONS,
    QUARANTINE_CUSTOMERS,
    QUARANTINE_MERCHANTS,
    LANDING_CUSTOMERS,
    LANDING_MERCHANTS,
    SILVER_TRANSACTIONS,
    SILVER_QUARANTINE_TRANSACTIONS,
    GOLD_DAILY_SUMMARY,
    GOLD_CUSTOMER_ACTIVITY,
    GOLD_CUSTOMER_PROFILES,
    GDPR_ACTIONS,
    TABLE_CHANGES,
    DATA_QUALITY_METRICS,
    TABLE_MAINTENANCE_LOG,
)


def spec_for(identifier: str) -> TableSpec:
    """The spec of `namespace.name`; a clear error listing the known tables otherwise."""
    for spec in ALL_SPECS:
        if spec.identifier == identifier:
            return spec
    known = ", ".join(s.identifier for s in ALL_SPECS)
    raise KeyError(f"no table spec named {identifier!r}; known tables: {known}")


def personal_data_specs() -> tuple[TableSpec, ...]:
    """Tables erasure must visit: derived from the specs, never a hand-kept list."""
    return tuple(spec for spec in ALL_SPECS if spec.holds_personal_data)
