"""The pipeline's feeds: which API endpoint fills which bronze, quarantine and landing table (so which asset writes
each table), every declared source's (etr_assets/tables/declared.py); and silver's record quarantine."""

from etr_assets.lake.feeds import EntityFeed, RawFeed
from etr_assets.lake.specs import MIB, TARGET_FILE_SIZE, Column, TableSpec
from etr_assets.tables.declared import QUARANTINED_AT, SOURCES, source
from etr_assets.tables.transactions import SILVER_TRANSACTIONS


def record_quarantine_spec(spec: TableSpec) -> TableSpec:
    """`<namespace>.quarantine_<name>`: rows of `spec` held back by a per-record expectation, with the rule broken."""
    return TableSpec(
        namespace=spec.namespace,
        name=f"quarantine_{spec.name.removeprefix('bnpl_').removesuffix('_clean')}",
        description=f"Rows of {spec.identifier} held back by a per-record expectation, with the rule they broke",
        columns=(
            *spec.columns,
            Column("reason", "string", "The per-record expectation the row broke", required=True),
            QUARANTINED_AT,
        ),
        partition_by=spec.partition_by,
        properties={TARGET_FILE_SIZE: str(8 * MIB)},
        subject_column=spec.subject_column,
    )


SILVER_QUARANTINE_TRANSACTIONS = record_quarantine_spec(SILVER_TRANSACTIONS)

_BNPL = source("bnpl")
TRANSACTIONS: RawFeed = _BNPL.raw_feed("transactions")
CUSTOMERS: EntityFeed = _BNPL.feeds["customers"]
MERCHANTS: EntityFeed = _BNPL.feeds["merchants"]
QUARANTINE_TRANSACTIONS, QUARANTINE_CUSTOMERS = (feed.quarantine for feed in (TRANSACTIONS, CUSTOMERS.raw))
# Every declared endpoint's feed, whichever source declared it.
RAW_FEEDS: tuple[RawFeed, ...] = tuple(feed for declared in SOURCES for feed in declared.raw_feeds)
ENTITY_FEEDS: tuple[EntityFeed, ...] = tuple(feed for declared in SOURCES for feed in declared.entity_feeds)

# Tables written as a side effect of another table's asset (its quarantine), by the spec that asset writes.
_WRITTEN_WITH = {
    **{feed.quarantine.identifier: feed.bronze for feed in RAW_FEEDS},
    SILVER_QUARANTINE_TRANSACTIONS.identifier: SILVER_TRANSACTIONS,
}


def writer_spec(spec: TableSpec) -> TableSpec:
    """The table whose asset writes `spec`: a quarantine table is written by the asset of the table it guards."""
    return _WRITTEN_WITH.get(spec.identifier, spec)
