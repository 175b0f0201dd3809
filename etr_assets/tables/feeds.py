"""The pipeline's feeds: which API endpoint fills which bronze, quarantine and landing table (so which asset writes
each table); and the quarantine tables, records refused by bronze or held back in silver, with the reason."""

from etr_assets.lake.feeds import EntityFeed, RawFeed
from etr_assets.lake.specs import MIB, TARGET_FILE_SIZE, Column, TableSpec
from etr_assets.sources.fetch import SOURCE
from etr_assets.tables.entities import BRONZE_CUSTOMERS, BRONZE_MERCHANTS, LANDING_CUSTOMERS, LANDING_MERCHANTS
from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, SILVER_TRANSACTIONS

_QUARANTINED_AT = Column("quarantined_at", "timestamp", "When it was quarantined", required=True)
_PROPERTIES = {TARGET_FILE_SIZE: str(8 * MIB)}


def quarantine_spec(endpoint: str, subject_column: str | None = None, key_column: str | None = None) -> TableSpec:
    """`bronze.quarantine_<endpoint>`, erasable by subject (raw text may hold personal data). `key_column`: kept
    when readable, since a refused record of a full snapshot still says its key was in it (SCD2 keeps the key)."""
    pii, subject = subject_column is not None, ()
    if subject_column:
        subject = (Column(subject_column, "bigint", "Data subject, when it could be read from the record", pii=True),)
    if key_column and key_column != subject_column:
        subject += (Column(key_column, "bigint", "The record's key, when it could be read (present in the snapshot)"),)
    return TableSpec(
        namespace="bronze",
        name=f"quarantine_{endpoint}",
        description=f"Records of the {endpoint} endpoint that failed validation: raw text, reason, file and line",
        columns=(
            Column("_batch_id", "string", "Raw-zone batch", required=True),
            Column("_batch_day", "date", "Business day of the batch", required=True),
            Column("source_file", "string", "Raw-zone file", required=True),
            Column("line_number", "bigint", "1-based line in the file", required=True),
            Column("raw_text", "string", "The record exactly as stored in the raw zone", required=True, pii=pii),
            Column("reason", "string", "Why the record was refused", required=True),
            *subject,
            _QUARANTINED_AT,
        ),
        partition_by=("days(_batch_day)",),
        properties=_PROPERTIES,
        subject_column=subject_column,
    )


QUARANTINE_TRANSACTIONS = quarantine_spec("transactions", "customer_id")
QUARANTINE_CUSTOMERS = quarantine_spec("customers", "customer_id", key_column="customer_id")
QUARANTINE_MERCHANTS = quarantine_spec("merchants", key_column="merchant_id")


def record_quarantine_spec(spec: TableSpec) -> TableSpec:
    """`<namespace>.quarantine_<name>`: rows of `spec` held back by a per-record expectation, with the rule broken."""
    return TableSpec(
        namespace=spec.namespace,
        name=f"quarantine_{spec.name.removeprefix('bnpl_').removesuffix('_clean')}",
        description=f"Rows of {spec.identifier} held back by a per-record expectation, with the rule they broke",
        columns=(
            *spec.columns,
            Column("reason", "string", "The per-record expectation the row broke", required=True),
            _QUARANTINED_AT,
        ),
        partition_by=spec.partition_by,
        properties=_PROPERTIES,
        subject_column=spec.subject_column,
    )


SILVER_QUARANTINE_TRANSACTIONS = record_quarantine_spec(SILVER_TRANSACTIONS)


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
