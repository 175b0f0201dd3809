"""Every table of the lake, declared once: each declared source's (YAML) and this pipeline's own (Python). ALL_SPECS
is what erasure, `etr tables` and bootstrap iterate."""

from etr_assets.lake import bookkeeping
from etr_assets.lake.specs import TableSpec
from etr_assets.tables import entities, feeds, transactions
from etr_assets.tables.declared import SOURCES

ALL_SPECS: tuple[TableSpec, ...] = (
    *(spec for declared in SOURCES for spec in declared.specs),
    transactions.SILVER_TRANSACTIONS,
    feeds.SILVER_QUARANTINE_TRANSACTIONS,
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
    by_name = {spec.identifier: spec for spec in ALL_SPECS}
    if identifier not in by_name:
        raise KeyError(f"no table spec named {identifier!r}; known tables: {', '.join(by_name)}")
    return by_name[identifier]


def personal_data_specs() -> tuple[TableSpec, ...]:
    """Tables erasure must visit: derived from the specs, never a hand-kept list."""
    return tuple(spec for spec in ALL_SPECS if spec.holds_personal_data)
