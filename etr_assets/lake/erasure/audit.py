"""The audit trail of an erasure (audit.gdpr_actions): what was done per table and raw location, and the proof's
verdict per subject, under a keyed hash of the id, never the id."""

from __future__ import annotations

import datetime as dt

from etr_assets.lake.bookkeeping import GDPR_ACTIONS, record_rows
from etr_assets.lake.erasure.proof import Proof
from etr_assets.lake.erasure.request import DELETE, DONE, EXPIRE, FAILED, NOT_FOUND, VERIFIED, VERIFY, ErasureRequest
from etr_assets.lake.erasure.tables import TableErasure
from etr_assets.lake.maintenance import ExpireResult
from etr_assets.sources.raw_erasure import RawErasure


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
        deleted = f"{count} row(s) deleted from main{where}{branches}"
        rows.append(_row(request, customer_id, DELETE, result.table, count, DONE, deleted))
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
    record_rows(spark, catalog, GDPR_ACTIONS, rows)
