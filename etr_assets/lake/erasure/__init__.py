"""GDPR erasure: remove customers from every personal-data table and the raw zone, expire history, prove it
(docs/gdpr-erasure.md). Ids are never formatted into SQL: the DELETE reads them from a temp view."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from etr_assets.errors import ErasureError
from etr_assets.lake.bookkeeping import GDPR_ACTIONS, record_rows
from etr_assets.lake.erasure.proof import Proof, erase_raw_zone, prove_erased, scan_raw_zone
from etr_assets.lake.erasure.request import (
    DELETE,
    DONE,
    EXPIRE,
    FAILED,
    LOCAL_AUDIT_KEY,
    NOT_FOUND,
    VERIFIED,
    VERIFY,
    ErasureRequest,
    audit_key,
    audit_row,
    ids_frame,
    matches_by_id,
    subject_hash,
    validate_customer_ids,
)
from etr_assets.lake.erasure.tables import TableErasure, erase_table
from etr_assets.lake.maintenance import ExpireResult
from etr_assets.lake.specs import TableSpec
from etr_assets.sources.raw_erasure import RawErasure
from etr_assets.sources.raw_zone import RawZone

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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


# Each step records its work in audit.gdpr_actions (a keyed hash, never the id); a job and erase_customers run them.
def erase_raw_step(spark: SparkSession, catalog: str, raw: RawZone, request: ErasureRequest, feeds) -> RawErasure:
    result = erase_raw_zone(raw, request, feeds)
    detail = f"{len(result.files_rewritten)} raw file(s) rewritten, {result.manifests_updated} manifest(s) updated"
    location, removed = raw.storage.uri(""), result.removed
    rows = [
        audit_row(request, i, DELETE, location, removed[i], DONE, detail)
        for i in request.customer_ids
        if removed.get(i)
    ]
    record_rows(spark, catalog, GDPR_ACTIONS, rows)
    return result


def erase_table_step(spark: SparkSession, catalog: str, spec: TableSpec, request: ErasureRequest) -> TableErasure:
    """A GDPR_DELETE row per customer the table held, and one GDPR_EXPIRE row each; nothing if it held none."""
    result = erase_table(spark, catalog, spec, request)
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
    for customer_id in (i for i in request.customer_ids if i in result.held_ids):
        count = result.removed.get(customer_id, 0)
        where = "" if count else " (held only in older snapshots or refs)"
        deleted = f"{count} row(s) deleted from main{where}{branches}"
        rows.append(audit_row(request, customer_id, DELETE, result.table, count, DONE, deleted))
        rows.append(audit_row(request, customer_id, EXPIRE, result.table, None, DONE, expired))
    record_rows(spark, catalog, GDPR_ACTIONS, rows)
    return result


def prove_step(
    spark: SparkSession, catalog: str, raw: RawZone | None, request: ErasureRequest, tables, raw_result, specs, feeds
):
    """GDPR_VERIFY per customer (VERIFIED / FAILED); a customer found nowhere before also gets GDPR_DELETE NOT_FOUND."""
    proof = prove_erased(spark, catalog, raw, request, specs, feeds)
    held_anywhere, rows = held_ids(tables, raw_result), []
    for customer_id in request.customer_ids:
        if customer_id not in held_anywhere:
            rows.append(
                audit_row(request, customer_id, DELETE, None, 0, NOT_FOUND, "no table or raw file held this customer")
            )
        failed = customer_id in proof.found_ids
        detail = proof.summary() if failed or proof.passed else "this customer: none found; " + proof.summary()
        rows.append(audit_row(request, customer_id, VERIFY, None, None, FAILED if failed else VERIFIED, detail[:2000]))
    record_rows(spark, catalog, GDPR_ACTIONS, rows)
    return proof


LAYER_ORDER = ("bronze", "landing", "silver", "gold")


def erasure_stages(specs) -> list[tuple[TableSpec, ...]]:
    """The tables in erasure order: a stage per layer, upstream first (a rebuild then reads erased input)."""
    rank = {name: i for i, name in enumerate(LAYER_ORDER)}
    stages: dict[str, list[TableSpec]] = {}
    for spec in sorted(specs, key=lambda s: (rank.get(s.namespace, len(rank)), s.identifier)):
        stages.setdefault(spec.namespace if spec.namespace in rank else "", []).append(spec)
    return [tuple(stage) for stage in stages.values()]


def erase_customers(
    spark: SparkSession,
    catalog: str,
    raw: RawZone | None,
    request: ErasureRequest,
    specs: tuple[TableSpec, ...],
    feeds=(),
) -> ErasureReport:
    """The whole sequence in this process: raw zone, tables stage by stage, proof; each step audited as it ends."""
    raw_result = erase_raw_step(spark, catalog, raw, request, feeds) if raw is not None else None
    results = [erase_table_step(spark, catalog, spec, request) for stage in erasure_stages(specs) for spec in stage]
    proof = prove_step(spark, catalog, raw, request, results, raw_result, specs, feeds)
    return ErasureReport(tuple(results), raw_result, proof)


# re-exported for the pipeline, the Dagster layer and the tests
__all__ = ["DELETE", "LOCAL_AUDIT_KEY", "NOT_FOUND", "VERIFIED", "VERIFY", "ErasureError", "audit_key", "ids_frame"]
__all__ += ["matches_by_id", "scan_raw_zone", "subject_hash", "validate_customer_ids"]
