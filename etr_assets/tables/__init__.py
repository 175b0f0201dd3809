"""Every table of the lake, declared once. ALL_SPECS is what erasure, `etr tables` and bootstrap iterate."""

from etr_assets.lake import bookkeeping
from etr_assets.lake.specs import TableSpec
from etr_assets.tables import entities, quarantine, transactions

ALL_SPECS: tuple[TableSpec, ...] = (
    transactions.BRONZE_TRANSACTIONS,
    entities.BRONZE_CUSTOMERS,
    entities.BRONZE_MERCHANTS,
    quarantine.QUARANTINE_TRANSACTIONS,
    quarantine.QUARANTINE_CUSTOMERS,
    quarantine.QUARANTINE_MERCHANTS,
    entities.LANDING_CUSTOMERS,
    entities.LANDING_MERCHANTS,
    transactions.SILVER_TRANSACTIONS,
    quarantine.SILVER_QUARANTINE_TRANSACTIONS,
    transactions.GOLD_DAILY_SUMMARY,
    entities.GOLD_CUSTOMER_ACTIVITY,
    entities.GOLD_CUSTOMER_PROFILES,
    bookkeeping.GDPR_ACTIONS,
    bookkeeping.TABLE_CHANGES,
    bookkeeping.DATA_QUALITY_METRICS,
    bookkeeping.TABLE_MAINTENANCE_LOG,
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
