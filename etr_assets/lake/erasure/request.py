"""An erasure request: validated subject ids, the reference, the audit key and the keyed hash the audit keeps;
and how rows, files and lines are matched against the ids."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import hmac
import os
from typing import TYPE_CHECKING

from etr_assets.errors import ErasureError
from etr_assets.lake.bookkeeping import GDPR_ACTIONS
from etr_assets.lake.frames import local_frame
from etr_assets.lake.specs import TableSpec, _sql_string
from etr_assets.settings import Profile
from etr_assets.sources.raw_erasure import id_field_pattern

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

AUDIT_KEY_ENV = "ETR_AUDIT_KEY"
# Development only: the local profile may run without a key; every other profile must set ETR_AUDIT_KEY.
LOCAL_AUDIT_KEY = "etr-local-audit-key-not-secret"
RAW_TEXT_COLUMN = "raw_text"  # quarantine tables keep the refused line here
MAX_ID = 2**63 - 1

DELETE, EXPIRE, VERIFY = "GDPR_DELETE", "GDPR_EXPIRE", "GDPR_VERIFY"
DONE, NOT_FOUND, VERIFIED, FAILED = "DONE", "NOT_FOUND", "VERIFIED", "FAILED"


def validate_customer_ids(values, where: str = "customer_ids") -> tuple[int, ...]:
    """Positive integers (ints or digit strings), at least one; duplicates removed, order kept."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ErasureError(f"{where} must be a list of customer ids, got {values!r}")
    ids: list[int] = []
    for index, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ErasureError(f"{where}[{index}]: {value!r} is not a customer id (a positive integer)")
        text = str(value).strip()
        if not text.isdigit() or not text.isascii() or not 0 < int(text) <= MAX_ID:
            raise ErasureError(f"{where}[{index}]: {value!r} is not a customer id (a positive integer up to {MAX_ID})")
        if int(text) not in ids:
            ids.append(int(text))
    if not ids:
        raise ErasureError(f"{where} is empty: name at least one customer to erase")
    return tuple(ids)


def validate_reference(reference) -> str:
    """The request's reference, stripped: non-empty, at most 200 printable characters."""
    if not isinstance(reference, str) or not reference.strip():
        raise ErasureError("request_reference is empty: give the reference of the erasure request")
    if len(reference) > 200 or any(ord(ch) < 32 for ch in reference):
        raise ErasureError(f"request_reference {reference[:40]!r}...: at most 200 printable characters")
    return reference.strip()


def audit_key(profile: str, environ: dict[str, str] | None = None) -> bytes:
    """The HMAC key for subject hashes, from ETR_AUDIT_KEY; a documented default only in the local profile."""
    if key := (os.environ if environ is None else environ).get(AUDIT_KEY_ENV, "").strip():
        return key.encode()
    if profile == Profile.LOCAL:
        return LOCAL_AUDIT_KEY.encode()
    raise ErasureError(
        f"{AUDIT_KEY_ENV} is not set: the {profile} profile needs a secret key to hash customer ids in "
        f"{GDPR_ACTIONS.identifier} (keep it in your secret store; the same key lets an auditor check an id later)"
    )


def subject_hash(key: bytes, customer_id: int) -> str:
    """HMAC-SHA256 of the id: stable for an auditor holding the key, meaningless to anyone else."""
    return hmac.new(key, str(customer_id).encode(), hashlib.sha256).hexdigest()


@dataclasses.dataclass(frozen=True)
class ErasureRequest:
    request_id: str
    customer_ids: tuple[int, ...]
    key: bytes = dataclasses.field(repr=False)
    requested_at: dt.datetime = dataclasses.field(default_factory=lambda: dt.datetime.now(dt.UTC))
    run_id: str = ""

    @classmethod
    def create(cls, request_id: str, customer_ids, key: bytes, run_id: str = "") -> ErasureRequest:
        return cls(validate_reference(request_id), validate_customer_ids(customer_ids), key, run_id=run_id)

    def hash_of(self, customer_id: int) -> str:
        return subject_hash(self.key, customer_id)


def audit_row(request: ErasureRequest, customer_id: int, action: str, table, rows, outcome: str, detail: str) -> dict:
    """A row of audit.gdpr_actions: the customer by keyed hash, never the id."""
    return {
        "request_id": request.request_id,
        "subject_hash": request.hash_of(customer_id),
        "action": action,
        "table_name": table,
        "rows_removed": rows,
        "outcome": outcome,
        "detail": detail,
        "executed_at": dt.datetime.now(dt.UTC).replace(tzinfo=None),
        "run_id": request.run_id,
    }


def subject_keys_sql(spec: TableSpec) -> str:
    """SQL array of the ids a row names: its subject column, plus ids inside the stored raw line (quarantine)."""
    keys = f"array(CAST({spec.subject_column} AS BIGINT))"
    if RAW_TEXT_COLUMN in spec.column_names:
        pattern = _sql_string(id_field_pattern(spec.subject_column))
        # The parsed field too: a key written with JSON escapes ("customer\u005fid") escapes the text pattern.
        parsed = f"CAST(get_json_object({RAW_TEXT_COLUMN}, {_sql_string('$.' + spec.subject_column)}) AS BIGINT)"
        keys = (
            f"concat({keys}, array({parsed}), "
            f"transform(regexp_extract_all({RAW_TEXT_COLUMN}, {pattern}, 1), x -> CAST(x AS BIGINT)))"
        )
    return keys


def ids_frame(spark: SparkSession, ids: tuple[int, ...]) -> DataFrame:
    from pyspark.sql import types as T

    return local_frame(spark, [(i,) for i in ids], T.StructType([T.StructField("_erase_id", T.LongType(), False)]))


def _named_ids(df: DataFrame, keys_sql: str, ids_df: DataFrame, *by) -> list:
    """(`by`..., `_erase_id`, `count`): the rows of `df` naming each id (a row naming two counts for both)."""
    from pyspark.sql import functions as F

    named = df.select(*by, F.explode(F.array_distinct(F.expr(keys_sql))).alias("_erase_id"))
    return named.join(F.broadcast(ids_df), "_erase_id").groupBy(*named.columns).count().collect()


def matches_by_id(df: DataFrame, spec: TableSpec, ids_df: DataFrame) -> dict[int, int]:
    return {r["_erase_id"]: r["count"] for r in _named_ids(df, subject_keys_sql(spec), ids_df)}


def files_holding(spark: SparkSession, spec: TableSpec, paths: list[str], ids_df) -> dict[str, dict[int, int]]:
    """Read these Parquet files directly (not through the table) and find rows naming the ids, per file."""
    columns = [spec.subject_column] + ([RAW_TEXT_COLUMN] if RAW_TEXT_COLUMN in spec.column_names else [])
    return files_naming(spark, spec.identifier, paths, subject_keys_sql(spec), columns, ids_df)


def files_naming(
    spark: SparkSession, label: str, paths: list[str], keys_sql: str, columns: list[str], ids_df: DataFrame
) -> dict[str, dict[int, int]]:
    from pyspark.sql import functions as F

    if not paths:
        return {}
    df = spark.read.option("mergeSchema", "true").parquet(*paths)
    if missing := [c for c in columns if c not in df.columns]:
        raise ErasureError(f"data files of {label} lack {missing}: cannot scan them for subjects")
    found: dict[str, dict[int, int]] = {}
    for r in _named_ids(df, keys_sql, ids_df, F.input_file_name().alias("_file")):
        found.setdefault(r["_file"], {})[r["_erase_id"]] = r["count"]
    return found


def data_files(spark: SparkSession, qualified: str) -> list[str]:
    """Every data file a remaining snapshot of any branch or tag references (`all_data_files`, content 0)."""
    return sorted(
        {r[0] for r in spark.sql(f"SELECT file_path FROM {qualified}.all_data_files WHERE content = 0").collect()}
    )
