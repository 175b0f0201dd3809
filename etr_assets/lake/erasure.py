"""GDPR erasure: remove customers from every personal-data table and the raw zone, expire history, prove it.

Which tables: every spec that marks personal data (`personal_data_specs()`), erased by its `subject_column`;
tables with a `raw_text` column (quarantine) also match ids written inside the stored line, since a refused
record may hold the id only there. Which raw files: every batch file of a feed whose bronze spec has a subject
column (the rewriting itself is `sources/raw_erasure.py`). Ids are validated positive integers and never formatted
into SQL: they travel as a temp view that the DELETE condition reads through a subquery.

History: Iceberg keeps deleted rows in older snapshots until they expire, so each affected table then expires
every snapshot older than now (keeping the current one). Refs would keep old snapshots alive: failed
write-audit-publish branches (`audit_*`) are dropped (they are unpublished attempts, rebuilt by the next run),
other branches are erased like main, and tags whose snapshot holds a customer are dropped (a tag cannot change).
A branch with a snapshot retention of its own has it lowered for the expiry and restored after (audited).
Manifests are then rewritten and expired again, so no kept manifest holds a DELETED entry whose bounds carry an
erased id (personal-data columns are written with metrics `counts`: new files carry no bounds at all). Files in
the table's data folder that no snapshot references (orphans) and that hold a customer are deleted, unless they
are younger than ORPHAN_GRACE (a running write's, not committed yet): those are named and the proof fails.

The proof reads the Parquet files themselves (every data file any remaining snapshot references, and every orphan
in each table's data folder), the manifests' bounds, every raw file, each table as of the moment the erasure
began, and every other table of the catalog with a column named like a subject column (a copy someone made).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import hmac
import os
import uuid

from etr_assets.lake.copies import (
    ORPHAN_GRACE,
    bounds_naming,
    catalog_tables,
    delete_file,
    normalized,
    orphan_files,
    subject_like_columns,
)
from etr_assets.lake.evolve import ensure_table
from etr_assets.lake.frames import spark_schema
from etr_assets.lake.maintenance import ExpireResult, compact, expire_snapshots, rewrite_manifests
from etr_assets.lake.retry import run_with_retries
from etr_assets.lake.specs import TableSpec, _sql_string
from etr_assets.lake.timetravel import NoSuchSnapshot, read_as_of
from etr_assets.lake.wap import AUDIT_BRANCH_PREFIX
from etr_assets.lake.writes import append, current_snapshot_id
from etr_assets.sources.raw_erasure import (
    RawErasure,
    RawFeedSubject,
    erase_raw_records,
    find_raw_records,
    id_field_pattern,
)
from etr_assets.sources.raw_zone import RawZone
from etr_assets.tables import personal_data_specs
from etr_assets.tables.operations import GDPR_ACTIONS

AUDIT_KEY_ENV = "ETR_AUDIT_KEY"
# Development only: the local profile may run without a key; every other profile must set ETR_AUDIT_KEY.
LOCAL_AUDIT_KEY = "etr-local-audit-key-not-secret"
RAW_TEXT_COLUMN = "raw_text"  # quarantine tables keep the refused line here
MAX_ID = 2**63 - 1

DELETE, EXPIRE, VERIFY = "GDPR_DELETE", "GDPR_EXPIRE", "GDPR_VERIFY"
DONE, NOT_FOUND, VERIFIED, FAILED = "DONE", "NOT_FOUND", "VERIFIED", "FAILED"


class ErasureError(ValueError):
    """A request that cannot be carried out as given; the message names the value and where it came from."""


# --- the request ----------------------------------------------------------------------------------------------
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


def audit_key(profile: str, environ: dict[str, str] | None = None) -> bytes:
    """The HMAC key for subject hashes, from ETR_AUDIT_KEY; a documented default only in the local profile."""
    env = os.environ if environ is None else environ
    key = env.get(AUDIT_KEY_ENV, "").strip()
    if key:
        return key.encode()
    if profile == "local":
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
        if not isinstance(request_id, str) or not request_id.strip():
            raise ErasureError("request_reference is empty: give the reference of the erasure request")
        if len(request_id) > 200 or any(ord(ch) < 32 for ch in request_id):
            raise ErasureError(f"request_reference {request_id[:40]!r}...: at most 200 printable characters")
        return cls(request_id.strip(), validate_customer_ids(customer_ids), key, run_id=run_id)

    def hash_of(self, customer_id: int) -> str:
        return subject_hash(self.key, customer_id)


# --- matching rows -------------------------------------------------------------------------------------------
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


def _match_columns(spec: TableSpec) -> list[str]:
    return [spec.subject_column] + ([RAW_TEXT_COLUMN] if RAW_TEXT_COLUMN in spec.column_names else [])


def _ids_frame(spark, ids: tuple[int, ...]):
    from pyspark.sql import types as T

    schema = T.StructType([T.StructField("_erase_id", T.LongType(), False)])
    return spark.createDataFrame([(i,) for i in ids], schema)


def matches_by_id(df, spec: TableSpec, ids_df) -> dict[int, int]:
    """Rows of `df` naming each id (a row naming two erased ids counts for both)."""
    from pyspark.sql import functions as F

    named = df.select(F.explode(F.array_distinct(F.expr(subject_keys_sql(spec)))).alias("_erase_id"))
    rows = named.join(F.broadcast(ids_df), "_erase_id").groupBy("_erase_id").count().collect()
    return {r["_erase_id"]: r["count"] for r in rows}


def files_holding(spark, spec: TableSpec, paths: list[str], ids_df) -> dict[str, dict[int, int]]:
    """Read these Parquet files directly (not through the table) and find rows naming the ids, per file."""
    return _files_naming(spark, spec.identifier, paths, subject_keys_sql(spec), _match_columns(spec), ids_df)


def _files_naming(
    spark, label: str, paths: list[str], keys_sql: str, columns: list[str], ids_df
) -> dict[str, dict[int, int]]:
    from pyspark.sql import functions as F

    if not paths:
        return {}
    df = spark.read.option("mergeSchema", "true").parquet(*paths)
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ErasureError(f"data files of {label} lack {missing}: cannot scan them for subjects")
    named = df.select(
        F.input_file_name().alias("_file"), F.explode(F.array_distinct(F.expr(keys_sql))).alias("_erase_id")
    )
    found: dict[str, dict[int, int]] = {}
    for r in named.join(F.broadcast(ids_df), "_erase_id").groupBy("_file", "_erase_id").count().collect():
        found.setdefault(r["_file"], {})[r["_erase_id"]] = r["count"]
    return found


def data_files(spark, qualified: str) -> list[str]:
    """Every data file a remaining snapshot of any branch or tag references (`all_data_files`, content 0)."""
    return sorted(
        {r[0] for r in spark.sql(f"SELECT file_path FROM {qualified}.all_data_files WHERE content = 0").collect()}
    )


def table_exists(spark, qualified: str) -> bool:
    return spark.catalog.tableExists(qualified)


# --- erasing a table -----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TableErasure:
    table: str  # namespace.name
    held_ids: frozenset[int]  # customers named by any data file of any remaining snapshot, before the erasure
    removed: dict[int, int]  # customer id -> rows deleted from main
    branches_erased: dict[str, int] = dataclasses.field(default_factory=dict)  # branch -> rows deleted
    refs_dropped: tuple[str, ...] = ()  # audit branches and tags removed so their snapshots could expire
    expired: ExpireResult | None = None  # what expiring older snapshots removed
    snapshot_id: int | None = None  # main after the erasure
    retention_overridden: tuple[str, ...] = ()  # branches whose own snapshot retention was lowered for the expiry
    orphans_deleted: tuple[str, ...] = ()  # unreferenced files of the data folder that held a customer
    orphans_left: tuple[str, ...] = ()  # such files younger than ORPHAN_GRACE (a running write's): named, not deleted

    @property
    def held(self) -> bool:
        return bool(self.held_ids)

    @property
    def rows_removed(self) -> int:
        return sum(self.removed.values())


def _delete_condition(spec: TableSpec, view: str) -> str:
    return f"arrays_overlap({subject_keys_sql(spec)}, (SELECT collect_set(_erase_id) FROM {view}))"


def _quoted(name: str) -> str:
    """A ref name as a Spark identifier (ref names come from the table, not from the request)."""
    return "`" + name.replace("`", "``") + "`"


def erase_table(spark, catalog: str, spec: TableSpec, request: ErasureRequest) -> TableErasure:
    """Delete the customers from main and other branches, drop refs that pin their rows, expire older snapshots."""
    if not spec.subject_column:
        raise ErasureError(f"{spec.identifier} has no subject column: nothing identifies a customer in it")
    qualified = spec.qualified(catalog)
    if not table_exists(spark, qualified):
        return TableErasure(spec.identifier, frozenset(), {})
    ids_df = _ids_frame(spark, request.customer_ids)
    in_orphans = _orphans_holding(spark, spec, qualified, ids_df)
    held_ids = frozenset(
        i for hits in files_holding(spark, spec, data_files(spark, qualified), ids_df).values() for i in hits
    )
    held_ids |= {i for _, hits in in_orphans for i in hits}
    if not held_ids:  # never held them (in any snapshot still kept): leave the table and its history alone
        return TableErasure(spec.identifier, held_ids, {}, snapshot_id=current_snapshot_id(spark, qualified))

    view = f"gdpr_ids_{uuid.uuid4().hex[:12]}"
    ids_df.createOrReplaceTempView(view)
    try:
        removed = matches_by_id(spark.table(qualified), spec, ids_df)
        if removed:
            run_with_retries(
                lambda: spark.sql(f"DELETE FROM {qualified} WHERE {_delete_condition(spec, view)}"),
                f"erasing from {qualified}",
            )
        branches_erased, dropped = {}, []
        for ref in spark.sql(f"SELECT name, type FROM {qualified}.refs WHERE name <> 'main'").collect():
            name, kind = ref["name"], ref["type"]
            if kind == "BRANCH" and name.startswith(AUDIT_BRANCH_PREFIX):
                spark.sql(f"ALTER TABLE {qualified} DROP BRANCH IF EXISTS {_quoted(name)}")
                dropped.append(f"branch {name}")
                continue
            held = matches_by_id(
                spark.read.format("iceberg").option("branch" if kind == "BRANCH" else "tag", name).load(qualified),
                spec,
                ids_df,
            )
            if not held:
                continue
            if kind == "BRANCH":
                target = f"{qualified}.{_quoted('branch_' + name)}"
                run_with_retries(
                    lambda t=target: spark.sql(f"DELETE FROM {t} WHERE {_delete_condition(spec, view)}"),
                    f"erasing from {target}",
                )
                branches_erased[name] = sum(held.values())
            else:
                spark.sql(f"ALTER TABLE {qualified} DROP TAG IF EXISTS {_quoted(name)}")
                dropped.append(f"tag {name}")
    finally:
        spark.catalog.dropTempView(view)
    if spec.table_properties.get("write.delete.mode") == "merge-on-read":
        compact(spark, catalog, spec)  # a delete file only hides rows: rewrite the data files without them
    overridden = _lower_branch_retention(spark, qualified)
    try:
        expired = expire_snapshots(spark, catalog, spec, older_than=dt.datetime.now(dt.UTC), retain_last=1)
        # The kept manifests still list the rewritten files as DELETED entries, bounds included: rewrite, expire.
        rewrite_manifests(spark, catalog, spec)
        again = expire_snapshots(spark, catalog, spec, older_than=dt.datetime.now(dt.UTC), retain_last=1)
        expired = dataclasses.replace(
            expired,
            expired_snapshot_ids=expired.expired_snapshot_ids + again.expired_snapshot_ids,
            deleted_data_files=expired.deleted_data_files + again.deleted_data_files,
            deleted_manifest_files=expired.deleted_manifest_files + again.deleted_manifest_files,
        )
    finally:
        _restore_branch_retention(spark, qualified, overridden)
    deleted, left = _erase_orphans(spark, in_orphans)
    return TableErasure(
        spec.identifier,
        held_ids,
        removed,
        branches_erased,
        tuple(dropped),
        expired,
        current_snapshot_id(spark, qualified),
        tuple(f"branch {name} ({_retention_text(r)})" for name, r in overridden.items()),
        deleted,
        left,
    )


def _orphans_holding(spark, spec: TableSpec, qualified: str, ids_df) -> list[tuple[object, dict[int, int]]]:
    """(orphan file, {id: rows}) for every unreferenced file of the table's data folder naming a customer."""
    orphans = {normalized(o.path): o for o in orphan_files(spark, qualified)}
    found = files_holding(spark, spec, [o.path for o in orphans.values()], ids_df)
    return [(orphans[normalized(path)], hits) for path, hits in found.items()]


def _erase_orphans(spark, holding) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Delete orphans holding a customer; leave (and return) those a running write may still commit."""
    cutoff = dt.datetime.now(dt.UTC) - ORPHAN_GRACE
    deleted, left = [], []
    for orphan, _hits in holding:
        if orphan.modified <= cutoff:
            delete_file(spark, orphan.path)
            deleted.append(orphan.path)
        else:
            left.append(orphan.path)
    return tuple(deleted), tuple(left)


# --- branches with a snapshot retention of their own ------------------------------------------------------
def _branch_retention(spark, qualified: str) -> dict[str, dict]:
    rows = spark.sql(
        f"SELECT name, snapshot_id, min_snapshots_to_keep, max_snapshot_age_in_ms, max_reference_age_in_ms "
        f"FROM {qualified}.refs WHERE type = 'BRANCH' AND name <> 'main'"
    ).collect()
    return {
        r["name"]: r.asDict()
        for r in rows
        if r["min_snapshots_to_keep"] is not None or r["max_snapshot_age_in_ms"] is not None
    }


def _retention_text(retention: dict) -> str:
    parts = []
    if retention["min_snapshots_to_keep"] is not None:
        parts.append(f"kept {retention['min_snapshots_to_keep']} snapshot(s)")
    if retention["max_snapshot_age_in_ms"] is not None:
        parts.append(f"kept snapshots for {retention['max_snapshot_age_in_ms'] / 86_400_000:g} day(s)")
    return "retention lowered for the erasure, then restored; it " + " and ".join(parts)


def _manage_snapshots(spark, qualified: str):
    table = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, qualified)
    return table.manageSnapshots()


def _lower_branch_retention(spark, qualified: str) -> dict[str, dict]:
    """Give every branch with its own snapshot retention the erasure's (keep only its head) until restored."""
    retention = _branch_retention(spark, qualified)
    if retention:
        manage = _manage_snapshots(spark, qualified)
        for name in retention:
            manage = manage.setMinSnapshotsToKeep(name, 1).setMaxSnapshotAgeMs(name, 1)
        manage.commit()
    return retention


def _restore_branch_retention(spark, qualified: str, retention: dict[str, dict]) -> None:
    """Put each branch's own retention back exactly (unset values stay unset): re-create the ref at its head."""
    if not retention:
        return
    heads = {r[0]: r[1] for r in spark.sql(f"SELECT name, snapshot_id FROM {qualified}.refs").collect()}
    manage = _manage_snapshots(spark, qualified)
    for name, original in retention.items():
        manage = manage.removeBranch(name).createBranch(name, heads[name])
        if original["min_snapshots_to_keep"] is not None:
            manage = manage.setMinSnapshotsToKeep(name, int(original["min_snapshots_to_keep"]))
        if original["max_snapshot_age_in_ms"] is not None:
            manage = manage.setMaxSnapshotAgeMs(name, int(original["max_snapshot_age_in_ms"]))
        if original["max_reference_age_in_ms"] is not None:
            manage = manage.setMaxRefAgeMs(name, int(original["max_reference_age_in_ms"]))
    manage.commit()


# --- the raw zone (sources/raw_erasure.py does the work; the feeds come from the pipeline) -------------------
def pipeline_feeds() -> tuple:
    """Every raw -> bronze feed of the pipeline (RawFeed: endpoint, bronze spec, quarantine spec)."""
    from etr_assets.lake.entities import CUSTOMERS, MERCHANTS
    from etr_assets.lake.transactions import TRANSACTIONS

    return (TRANSACTIONS, CUSTOMERS.raw, MERCHANTS.raw)


def raw_feeds_with_subjects() -> tuple[RawFeedSubject, ...]:
    """Raw endpoints holding personal data: the feeds whose bronze spec names a subject column."""
    return tuple(
        RawFeedSubject(f.source, f.endpoint, f.bronze.subject_column)
        for f in pipeline_feeds()
        if f.bronze.subject_column
    )


def erase_raw_zone(raw: RawZone, request: ErasureRequest) -> RawErasure:
    return erase_raw_records(raw, request.customer_ids, raw_feeds_with_subjects())


def scan_raw_zone(raw: RawZone, ids: tuple[int, ...]) -> tuple[int, dict[str, dict[int, int]]]:
    return find_raw_records(raw, ids, raw_feeds_with_subjects())


# --- the proof -----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Proof:
    passed: bool
    tables_scanned: int
    data_files_scanned: int
    raw_files_scanned: int
    findings: tuple[str, ...]  # where a copy was found: "<table> data file <path>: N row(s) of 1 subject(s)"
    found_ids: tuple[int, ...]  # which of the customers were still found (empty when passed)
    time_travel: dict[str, str]  # table -> what reading it as of the erasure's start gave

    def summary(self) -> str:
        head = "VERIFIED" if self.passed else f"FAILED: {len(self.findings)} copy(ies) left"
        return (
            f"{head}; scanned {self.data_files_scanned} data file(s) of {self.tables_scanned} table(s) and "
            f"{self.raw_files_scanned} raw file(s)" + ("" if self.passed else ": " + "; ".join(self.findings[:5]))
        )


def _as_of_read(spark, spec: TableSpec, qualified: str, when: dt.datetime, ids_df) -> tuple[str, dict[int, int]]:
    """What reading the table as it was at `when` gives: its snapshot is gone (fine) or it must hold no customer."""
    try:
        df = read_as_of(spark, qualified, when=when)
        found = matches_by_id(df, spec, ids_df)
    except NoSuchSnapshot:
        return "no snapshot left from before the erasure", {}
    except Exception as error:  # Iceberg refusing an expired snapshot, or its files being gone
        text = str(error).splitlines()[0][:160]
        if "snapshot" in text.lower() or "FileNotFound" in text or "does not exist" in text:
            return f"unreadable: {text}", {}
        raise
    if found:
        return f"returns {sum(found.values())} row(s) of erased customers", found
    return "returns none of the customers", {}


def _orphan_finding(table: str, orphan, hits: dict[int, int]) -> str:
    age = dt.datetime.now(dt.UTC) - orphan.modified
    recent = (
        f"; written {age.total_seconds():.0f} s ago, maybe by a write still running: run the erasure again once "
        "it has committed or failed"
        if age < ORPHAN_GRACE
        else ""
    )
    return (
        f"{table} orphan file {orphan.path} (no snapshot references it): "
        f"{sum(hits.values())} row(s) of {len(hits)} subject(s){recent}"
    )


def _unlisted_copies(spark, catalog: str, specs, ids_df) -> tuple[int, int, list[str], set[int]]:
    """Every other table of the catalog with a column named like a subject column: (tables, files, findings, ids)."""
    declared = {s.qualified(catalog) for s in specs}
    subjects = {s.subject_column for s in specs if s.subject_column} or {"customer_id"}
    tables = files = 0
    findings, found = [], set()
    for table in catalog_tables(spark, catalog):
        columns = subject_like_columns(table.columns, subjects)
        if table.qualified in declared or not columns:
            continue
        tables += 1
        keys = "array(" + ", ".join(f"CAST(`{c}` AS BIGINT)" for c in columns) + ")"
        paths = data_files(spark, table.qualified)
        orphans = {normalized(o.path) for o in orphan_files(spark, table.qualified)}
        files += len(paths) + len(orphans)
        for path, hits in _files_naming(
            spark, table.identifier, paths + sorted(orphans), keys, columns, ids_df
        ).items():
            where = "orphan file" if normalized(path) in orphans else "data file"
            findings.append(
                f"{table.identifier} (a table without a spec: drop it or erase the customers from it) {where} {path}: "
                f"{sum(hits.values())} row(s) of {len(hits)} subject(s)"
            )
            found.update(hits)
    return tables, files, findings, found


def prove_erased(
    spark, catalog: str, raw: RawZone | None, request: ErasureRequest, specs: tuple[TableSpec, ...] | None = None
) -> Proof:
    """Scan every data file and orphan of every personal-data table, its manifests' bounds, every raw file, each
    table as of before the erasure, and every other table of the catalog with a subject-like column."""
    specs = personal_data_specs() if specs is None else specs
    ids_df = _ids_frame(spark, request.customer_ids)
    findings: list[str] = []
    found_ids: set[int] = set()
    tables = files = 0
    time_travel: dict[str, str] = {}
    for spec in specs:
        qualified = spec.qualified(catalog)
        if not table_exists(spark, qualified):
            continue
        tables += 1
        paths = data_files(spark, qualified)
        files += len(paths)
        for path, hits in files_holding(spark, spec, paths, ids_df).items():
            findings.append(
                f"{spec.identifier} data file {path}: {sum(hits.values())} row(s) of {len(hits)} subject(s)"
            )
            found_ids.update(hits)
        orphans = _orphans_holding(spark, spec, qualified, ids_df)
        files += len(orphans)
        for orphan, hits in orphans:
            findings.append(_orphan_finding(spec.identifier, orphan, hits))
            found_ids.update(hits)
        for bound, named in bounds_naming(spark, qualified, spec.subject_column, request.customer_ids).items():
            findings.append(f"{spec.identifier} {bound}")
            found_ids.update(named)
        outcome, hits = _as_of_read(spark, spec, qualified, request.requested_at, ids_df)
        time_travel[spec.identifier] = outcome
        if hits:
            findings.append(f"{spec.identifier} as of {request.requested_at.isoformat()}: {outcome}")
            found_ids.update(hits)
    other_tables, other_files, other_findings, other_ids = _unlisted_copies(spark, catalog, specs, ids_df)
    tables, files = tables + other_tables, files + other_files
    findings += other_findings
    found_ids |= other_ids
    raw_files = 0
    if raw is not None:
        raw_files, raw_found = scan_raw_zone(raw, request.customer_ids)
        for uri, hits in raw_found.items():
            findings.append(f"raw file {uri}: {sum(hits.values())} line(s) of {len(hits)} subject(s)")
            found_ids.update(hits)
    return Proof(not findings, tables, files, raw_files, tuple(findings), tuple(sorted(found_ids)), time_travel)


# --- the audit trail -----------------------------------------------------------------------------------------
def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def _row(
    request: ErasureRequest,
    customer_id: int,
    action: str,
    table: str | None,
    rows: int | None,
    outcome: str,
    detail: str,
) -> dict:
    return {
        "request_id": request.request_id,
        "subject_hash": request.hash_of(customer_id),
        "action": action,
        "table_name": table,
        "rows_removed": rows,
        "outcome": outcome,
        "detail": detail,
        "executed_at": _now(),
        "run_id": request.run_id,
    }


def table_audit_rows(request: ErasureRequest, result: TableErasure) -> list[dict]:
    """A GDPR_DELETE row per customer the table held, and one GDPR_EXPIRE row each; nothing if it held none."""
    if not result.held:
        return []
    refs = f"; dropped {', '.join(result.refs_dropped)}" if result.refs_dropped else ""
    branches = f"; erased on branches {result.branches_erased}" if result.branches_erased else ""
    expiry = result.expired or ExpireResult()
    expired = (
        f"expired {expiry.expired_snapshots} older snapshot(s), deleting {expiry.deleted_data_files} data file(s){refs}"
    )
    if result.retention_overridden:
        expired += "; " + "; ".join(result.retention_overridden)
    if result.orphans_deleted:
        expired += f"; deleted {len(result.orphans_deleted)} unreferenced file(s) holding the customer"
    if result.orphans_left:
        expired += f"; LEFT {len(result.orphans_left)} recent unreferenced file(s) (a running write's?): run again"
    rows = []
    for customer_id in request.customer_ids:
        if customer_id not in result.held_ids:
            continue
        count = result.removed.get(customer_id, 0)
        where = "" if count else " (held only in older snapshots or refs)"
        rows.append(
            _row(
                request,
                customer_id,
                DELETE,
                result.table,
                count,
                DONE,
                f"{count} row(s) deleted from main{where}{branches}",
            )
        )
        rows.append(_row(request, customer_id, EXPIRE, result.table, None, DONE, expired))
    return rows


def raw_audit_rows(request: ErasureRequest, result: RawErasure, location: str) -> list[dict]:
    return [
        _row(
            request,
            customer_id,
            DELETE,
            location,
            result.removed[customer_id],
            DONE,
            f"{len(result.files_rewritten)} raw file(s) rewritten, {result.manifests_updated} manifest(s) updated",
        )
        for customer_id in request.customer_ids
        if result.removed.get(customer_id)
    ]


def proof_audit_rows(request: ErasureRequest, proof: Proof, held_anywhere: set[int]) -> list[dict]:
    """GDPR_VERIFY per customer (VERIFIED / FAILED); a customer found nowhere before also gets GDPR_DELETE NOT_FOUND."""
    rows = []
    for customer_id in request.customer_ids:
        if customer_id not in held_anywhere:
            rows.append(
                _row(request, customer_id, DELETE, None, 0, NOT_FOUND, "no table or raw file held this customer")
            )
        failed = customer_id in proof.found_ids
        detail = proof.summary() if failed or proof.passed else "this customer: none found; " + proof.summary()
        rows.append(_row(request, customer_id, VERIFY, None, None, FAILED if failed else VERIFIED, detail[:2000]))
    return rows


def record_actions(spark, catalog: str, rows: list[dict]) -> None:
    if not rows:
        return
    ensure_table(spark, catalog, GDPR_ACTIONS)
    append(spark, GDPR_ACTIONS.qualified(catalog), spark.createDataFrame(rows, spark_schema(GDPR_ACTIONS.columns)))


# --- all of it, without Dagster ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ErasureReport:
    tables: tuple[TableErasure, ...]
    raw: RawErasure | None
    proof: Proof

    def table(self, identifier: str) -> TableErasure:
        return next(t for t in self.tables if t.table == identifier)


def held_ids(tables, raw: RawErasure | None) -> set[int]:
    """Customers some table (in any kept snapshot) or raw file held before the erasure."""
    held = {i for t in tables for i in t.held_ids}
    return held | ({i for i, n in raw.removed.items() if n} if raw is not None else set())


def erase_customers(spark, catalog: str, raw: RawZone | None, request: ErasureRequest) -> ErasureReport:
    """Raw zone first, then tables layer by layer (upstream before downstream), then the proof; all audited."""
    raw_result, results, rows = None, [], []
    try:
        if raw is not None:
            raw_result = erase_raw_zone(raw, request)
            rows += raw_audit_rows(request, raw_result, raw.storage.uri(""))
        for spec in erasure_order(personal_data_specs()):
            result = erase_table(spark, catalog, spec, request)
            rows += table_audit_rows(request, result)
            results.append(result)
    finally:  # what was done is recorded even when a later table fails (one commit for all of it)
        record_actions(spark, catalog, rows)
    proof = prove_erased(spark, catalog, raw, request)
    record_actions(spark, catalog, proof_audit_rows(request, proof, held_ids(results, raw_result)))
    return ErasureReport(tuple(results), raw_result, proof)


LAYER_ORDER = ("bronze", "landing", "silver", "gold")


def erasure_order(specs) -> list[TableSpec]:
    """Upstream layers first, so a downstream rebuild during the erasure reads already-erased input."""
    rank = {name: i for i, name in enumerate(LAYER_ORDER)}
    return sorted(specs, key=lambda s: (rank.get(s.namespace, len(rank)), s.identifier))
