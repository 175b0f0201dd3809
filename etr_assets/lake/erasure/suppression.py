"""The suppression list: customers erased once stay erased (docs/gdpr-erasure.md): the audit's keyed hashes, unless
lifted since; a record is matched by the same HMAC-SHA256 of its id computed in Spark, so no id is stored."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import TYPE_CHECKING

from etr_assets.errors import ErasureError
from etr_assets.lake.bookkeeping import GDPR_ACTIONS, record_rows
from etr_assets.lake.erasure.request import (
    DONE,
    ErasureRequest,
    audit_key,
    audit_row,
    subject_hash,
    subject_keys_sql,
    validate_customer_ids,
)
from etr_assets.lake.specs import TableSpec
from etr_assets.settings import Profile

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LIFT = "LIFT_SUPPRESSION"
PROFILE_ENV = "ETR_PROFILE"
_BLOCK = 64  # SHA-256's block size, in bytes (RFC 2104)


def subject_hash_column(key: bytes, id_column):
    """`subject_hash(key, id)` as a Spark column: HMAC-SHA256 of the id's decimal text, in lower-case hex
    (Spark 3.5 has no HMAC function: it is the RFC 2104 construction over `sha2`). Null for a null id."""
    from pyspark.sql import functions as F

    if len(key) > _BLOCK:  # HMAC's inner and outer keys: the key (hashed if longer) padded to a block, XOR 0x36/0x5c
        key = hashlib.sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    inner, outer = bytes(b ^ 0x36 for b in key), bytes(b ^ 0x5C for b in key)
    message = id_column.cast("bigint").cast("string").cast("binary")
    inner_digest = F.unhex(F.sha2(F.concat(F.lit(bytearray(inner)), message), 256))
    return F.sha2(F.concat(F.lit(bytearray(outer)), inner_digest), 256)


@dataclasses.dataclass(frozen=True)
class Suppression:
    """The hashes of the customers no load may store, and the key that hashes an id the same way."""

    key: bytes = dataclasses.field(repr=False)
    hashes: frozenset[str]

    def __bool__(self) -> bool:
        return bool(self.hashes)

    def holds(self, customer_id: int) -> bool:
        return subject_hash(self.key, customer_id) in self.hashes

    def is_suppressed(self, id_column):
        """True where the id's hash is on the list (a small set: Spark keeps it as a hash set in each task)."""
        from pyspark.sql import functions as F

        return F.coalesce(subject_hash_column(self.key, id_column).isin(sorted(self.hashes)), F.lit(False))

    def suppressed_keys(self, spec: TableSpec):
        """The ids a row of `spec`'s shape names that are suppressed (its subject column, and in a quarantined
        record ids written inside the refused line): an array, empty for a row naming none."""
        from pyspark.sql import functions as F

        return F.filter(F.array_distinct(F.expr(subject_keys_sql(spec))), lambda x: self.is_suppressed(x))


def suppression_list(spark: SparkSession, catalog: str, key: bytes | None = None) -> Suppression:
    """Read once per load: the hashes the audit marks erased and not lifted since. The key is only needed (and
    only required) when the list is not empty."""
    qualified = GDPR_ACTIONS.qualified(catalog)
    if not spark.catalog.tableExists(qualified):
        return Suppression(key or b"", frozenset())
    rows = spark.sql(
        f"SELECT subject_hash FROM {qualified} GROUP BY subject_hash HAVING "
        f"max(CASE WHEN action <> '{LIFT}' THEN executed_at END) > "
        f"coalesce(max(CASE WHEN action = '{LIFT}' THEN executed_at END), TIMESTAMP'1900-01-01')"
    ).collect()
    if not (hashes := frozenset(r[0] for r in rows)):
        return Suppression(key or b"", hashes)
    try:  # without a key: the erasure's, that of the profile this process runs (ETR_PROFILE, local when unset)
        return Suppression(key if key is not None else audit_key(os.environ.get(PROFILE_ENV) or Profile.LOCAL), hashes)
    except ErasureError as error:
        raise ErasureError(
            f"{len(hashes)} erased customer(s) are on the suppression list in {GDPR_ACTIONS.identifier}, and "
            f"loading needs the audit key to keep them out: {error}"
        ) from error


def lift_suppression(
    spark: SparkSession,
    catalog: str,
    key: bytes,
    customer_id: int,
    reference: str,
    reason: str,
    run_id: str = "",
    by: str = "",
) -> dict:
    """Lift the suppression of one customer (they signed up again and consented): an audited LIFT_SUPPRESSION row
    under their hash, with the reference, who and why; a customer not on the list is refused."""
    (customer_id,) = validate_customer_ids([customer_id])
    if not isinstance(reference, str) or not reference.strip():
        raise ErasureError("lifting a suppression needs a reference (the new consent's, or the ticket's)")
    if not isinstance(reason, str) or not reason.strip():
        raise ErasureError("lifting a suppression needs a reason (why this customer may be stored again)")
    if not suppression_list(spark, catalog, key).holds(customer_id):
        raise ErasureError(
            f"the customer is not on the suppression list in {GDPR_ACTIONS.identifier} (never erased under this "
            "audit key, or already lifted): nothing to lift"
        )
    detail = f"lifted by {by.strip()}: {reason.strip()}" if by and by.strip() else reason.strip()
    request = ErasureRequest(reference.strip()[:200], (customer_id,), key, run_id=run_id)
    row = audit_row(request, customer_id, LIFT, None, None, DONE, detail[:2000])
    record_rows(spark, catalog, GDPR_ACTIONS, [row])
    return row


def rows_of_suppressed(spark: SparkSession, catalog: str, specs, suppression: Suppression) -> dict[str, dict[str, int]]:
    """{hash: {table: rows}}: per suppressed hash, the rows naming that customer in each personal-data table's
    current snapshot (every hash listed, tables only where rows were found)."""
    from pyspark.sql import functions as F

    found: dict[str, dict[str, int]] = {h: {} for h in sorted(suppression.hashes)}
    if not suppression:
        return found
    for spec in specs:
        qualified = spec.qualified(catalog)
        if not spec.subject_column or not spark.catalog.tableExists(qualified):
            continue
        named = spark.table(qualified).select(F.explode(suppression.suppressed_keys(spec)).alias("_id"))
        hashed = named.select(subject_hash_column(suppression.key, F.col("_id")).alias("_hash"))
        for row in hashed.groupBy("_hash").count().collect():
            found.setdefault(row["_hash"], {})[spec.identifier] = row["count"]
    return found
