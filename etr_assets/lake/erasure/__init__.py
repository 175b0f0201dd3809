"""GDPR erasure: remove customers from every personal-data table and the raw zone, expire history, prove it
(docs/gdpr-erasure.md). Ids are validated positive integers and never formatted into SQL: they travel as a temp
view that the DELETE condition reads through a subquery."""

from __future__ import annotations

import dataclasses

from etr_assets.lake.erasure.audit import proof_audit_rows, raw_audit_rows, record_actions, table_audit_rows
from etr_assets.lake.erasure.proof import Proof, erase_raw_zone, prove_erased, scan_raw_zone
from etr_assets.lake.erasure.request import (
    DELETE,
    LOCAL_AUDIT_KEY,
    NOT_FOUND,
    VERIFIED,
    VERIFY,
    ErasureError,
    ErasureRequest,
    audit_key,
    ids_frame,
    matches_by_id,
    subject_hash,
    validate_customer_ids,
)
from etr_assets.lake.erasure.tables import TableErasure, erase_table
from etr_assets.lake.specs import TableSpec
from etr_assets.sources.raw_erasure import RawErasure
from etr_assets.sources.raw_zone import RawZone


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


# Each step does its work and records it; a job and erase_customers run the same steps.
def erase_raw_step(spark, catalog: str, raw: RawZone, request: ErasureRequest, feeds) -> RawErasure:
    result = erase_raw_zone(raw, request, feeds)
    record_actions(spark, catalog, raw_audit_rows(request, result, raw.storage.uri("")))
    return result


def erase_table_step(spark, catalog: str, spec: TableSpec, request: ErasureRequest) -> TableErasure:
    result = erase_table(spark, catalog, spec, request)
    record_actions(spark, catalog, table_audit_rows(request, result))
    return result


def prove_step(
    spark, catalog: str, raw: RawZone | None, request: ErasureRequest, specs, feeds, tables, raw_result
) -> Proof:
    proof = prove_erased(spark, catalog, raw, request, specs, feeds)
    record_actions(spark, catalog, proof_audit_rows(request, proof, held_ids(tables, raw_result)))
    return proof


LAYER_ORDER = ("bronze", "landing", "silver", "gold")


def erasure_order(specs) -> list[TableSpec]:
    """Upstream layers first, so a downstream rebuild during the erasure reads already-erased input."""
    rank = {name: i for i, name in enumerate(LAYER_ORDER)}
    return sorted(specs, key=lambda s: (rank.get(s.namespace, len(rank)), s.identifier))


def erasure_stages(specs) -> list[tuple[TableSpec, ...]]:
    """The tables in the order they are erased, one stage per layer (upstream first, then any other namespace):
    a stage's tables are independent of each other, and each stage starts once the one before is done."""
    stages: dict[str, list[TableSpec]] = {}
    for spec in erasure_order(specs):
        stages.setdefault(spec.namespace if spec.namespace in LAYER_ORDER else "", []).append(spec)
    return [tuple(stage) for stage in stages.values()]


def erase_customers(
    spark, catalog: str, raw: RawZone | None, request: ErasureRequest, specs: tuple[TableSpec, ...], feeds=()
) -> ErasureReport:
    """The whole sequence in this process: the raw zone (`feeds`), the tables (`specs`) stage by stage, the proof;
    each step audited as it completes (what was done stays recorded if a later step fails)."""
    raw_result = erase_raw_step(spark, catalog, raw, request, feeds) if raw is not None else None
    results = [erase_table_step(spark, catalog, spec, request) for stage in erasure_stages(specs) for spec in stage]
    proof = prove_step(spark, catalog, raw, request, specs, feeds, results, raw_result)
    return ErasureReport(tuple(results), raw_result, proof)


# re-exported for the pipeline, the Dagster layer and the tests
__all__ = [
    "DELETE",
    "LOCAL_AUDIT_KEY",
    "NOT_FOUND",
    "VERIFIED",
    "VERIFY",
    "ErasureError",
    "audit_key",
    "ids_frame",
    "matches_by_id",
    "scan_raw_zone",
    "subject_hash",
    "validate_customer_ids",
]
