"""Quarantine tables: records a source sent that do not fit its bronze spec, kept with the reason."""

from etr_assets.lake.specs import MIB, Column, TableSpec


def quarantine_spec(endpoint: str, subject_column: str | None = None) -> TableSpec:
    """`bronze.quarantine_<endpoint>`; raw text may hold personal data, so it is erasable by subject."""
    subject = (Column(subject_column, "bigint", "Data subject, when it could be read from the record", pii=True),) if subject_column else ()
    return TableSpec(
        namespace="bronze",
        name=f"quarantine_{endpoint}",
        description=f"Records of the {endpoint} endpoint that failed validation: raw text, reason, file and line",
        columns=(
            Column("_batch_id", "string", "Raw-zone batch", required=True),
            Column("_batch_day", "date", "Business day of the batch", required=True),
            Column("source_file", "string", "Raw-zone file", required=True),
            Column("line_number", "bigint", "1-based line in the file", required=True),
            Column("raw_text", "string", "The record exactly as stored in the raw zone", required=True, pii=subject_column is not None),
            Column("reason", "string", "Why the record was refused", required=True),
            *subject,
            Column("quarantined_at", "timestamp", "When it was quarantined", required=True),
        ),
        partition_by=("days(_batch_day)",),
        properties={"write.target-file-size-bytes": str(8 * MIB)},
        subject_column=subject_column,
    )


QUARANTINE_TRANSACTIONS = quarantine_spec("transactions", "customer_id")
QUARANTINE_CUSTOMERS = quarantine_spec("customers", "customer_id")
QUARANTINE_MERCHANTS = quarantine_spec("merchants")
