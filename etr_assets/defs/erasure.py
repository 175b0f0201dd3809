"""The `gdpr_erasure` job: erase customers everywhere, expire history, prove nothing is left. Launched with the
request's reference only, so the ids never reach Dagster; each table step holds its writer's pool."""

import dagster as dg
from pydantic import Field

from etr_assets.defs.common import table_key, table_pool
from etr_assets.defs.resources import LakeResource, RawZoneResource
from etr_assets.defs.run_guard import in_process_executor
from etr_assets.lake.erasure import ErasureRequest, RawErasure, TableErasure, audit_key, erase_table_step, held_ids
from etr_assets.lake.erasure.store import RequestStore, open_request_store
from etr_assets.lake.specs import TableSpec
from etr_assets.pipeline.erasure import erase_raw_step, erasure_stages, prove_step
from etr_assets.settings import Settings
from etr_assets.tables.feeds import writer_spec

# Outputs (they carry the ids) stay in memory: never pickled into the instance's storage.
MEMORY_IO_MANAGER = "gdpr_memory_io_manager"
ERASURE_RESOURCES = {MEMORY_IO_MANAGER: dg.mem_io_manager}
_IN_MEMORY = dg.Out(io_manager_key=MEMORY_IO_MANAGER)


class ErasureConfig(dg.Config):
    """The reference only: with no `customer_ids` field, a config naming ids is refused before a run exists."""

    request_reference: str = Field(
        description="Reference of a request recorded with `etr erase --reference REF ID...`, e.g. GDPR-2025-0042 "
        "(the customer ids are read from that request, never given here)"
    )


def request_store(raw_zone: RawZoneResource) -> RequestStore:
    return open_request_store(raw_zone.root, s3_endpoint=raw_zone.s3_endpoint, region=raw_zone.region)


def _request_op(settings: Settings):
    @dg.op(
        name="gdpr_request",
        out=_IN_MEMORY,
        description="Reads the request recorded by `etr erase` under its reference (an unknown reference or one "
        "already carried out fails here), checks every id is a positive integer, and reads the audit key "
        "(ETR_AUDIT_KEY) so a missing key fails here, before anything is deleted. Shows counts, never the ids.",
    )
    def gdpr_request(
        context: dg.OpExecutionContext, config: ErasureConfig, raw_zone: RawZoneResource
    ) -> ErasureRequest:
        key = audit_key(settings.profile)
        store = request_store(raw_zone)
        ids = store.pending_ids(config.request_reference)
        request = ErasureRequest.create(config.request_reference, ids, key, run_id=context.run_id)
        context.log.info(f"erasure request {request.request_id}: {len(ids)} customer(s) to erase")
        metadata = {
            "request": request.request_id,
            "customers": len(request.customer_ids),
            "request_file": store.uri(request.request_id),
        }
        context.add_output_metadata(metadata)
        return request

    return gdpr_request


@dg.op(
    out=_IN_MEMORY,
    description="Rewrites every raw-zone file (transactions and customers endpoints) that holds one of the customers "
    "without their records, and lowers its batch manifest's record count. Markers are untouched: a pending batch "
    "stays pending and loadable. Recorded in audit.gdpr_actions.",
)
def erase_raw_zone(
    context: dg.OpExecutionContext, request: ErasureRequest, lake: LakeResource, raw_zone: RawZoneResource
) -> RawErasure:
    result = erase_raw_step(lake.session(), lake.catalog, raw_zone.zone(), request)
    context.log.info(f"raw zone: {result.records_removed} record(s) removed from {len(result.files_rewritten)} file(s)")
    metadata = {
        "records_removed": result.records_removed,
        "files_rewritten": len(result.files_rewritten),
        "manifests_updated": result.manifests_updated,
        "files": dg.MetadataValue.md("\n".join(f"- `{uri}`" for uri in result.files_rewritten) or "none"),
    }
    context.add_output_metadata(metadata)
    return result


def _table_op(settings: Settings, spec: TableSpec, observe: bool):
    @dg.op(
        name=f"erase_{spec.namespace}_{spec.name}",
        out=_IN_MEMORY,
        ins={"request": dg.In(ErasureRequest), "after": dg.In(dg.Nothing)},
        pool=table_pool(settings, writer_spec(spec)),
        description=f"Erases the customers from {spec.identifier} (by {spec.subject_column}"
        + (", and ids inside the refused line's raw_text" if "raw_text" in spec.column_names else "")
        + "): deletes their rows from main and other branches, drops failed audit_* branches and tags holding them, "
        "then expires every older snapshot so the rows are physically gone. Skips the table if it never held them.",
    )
    def erase(context: dg.OpExecutionContext, request: ErasureRequest, lake: LakeResource) -> TableErasure:
        result = erase_table_step(lake.session(), lake.catalog, spec, request)
        expired = result.expired.expired_snapshots if result.expired else 0
        if not result.held:
            context.log.info(f"{spec.identifier}: never held these customers; left alone")
        else:
            context.log.info(
                f"{spec.identifier}: {result.rows_removed} row(s) removed; dropped "
                f"{list(result.refs_dropped) or 'no refs'}; expired {expired} snapshot(s)"
            )
        if observe and result.held:  # the table's asset page shows that an erasure changed it, and which request
            observation = dg.AssetObservation(
                asset_key=table_key(spec),
                description=f"GDPR erasure {request.request_id}: {result.rows_removed} row(s) removed, history expired",
                metadata={
                    "gdpr_request": request.request_id,
                    "rows_removed": result.rows_removed,
                    "snapshot_id": str(result.snapshot_id),
                },
            )
            context.log_event(observation)
        metadata = {
            "table": spec.qualified(lake.catalog),
            "held_customers": len(result.held_ids),
            "rows_removed": result.rows_removed,
            "rows_removed_on_branches": sum(result.branches_erased.values()),
            "refs_dropped": ", ".join(result.refs_dropped) or "none",
            "expired_snapshots": expired,
            "deleted_data_files": result.expired.deleted_data_files if result.expired else 0,
            "snapshot_id": str(result.snapshot_id) if result.snapshot_id is not None else "none",
        }
        context.add_output_metadata(metadata)
        return result

    return erase


@dg.op(
    description="The proof: reads every data file any kept snapshot of each personal-data table references (the "
    "Parquet files themselves), every raw-zone file, and each table as of the moment the request started; fails "
    "the run naming every place a customer was still found. Also reads every table now for every customer erased "
    "so far (the suppression list): `suppressed_customers_found_again` must be 0. Writes GDPR_VERIFY rows to "
    "audit.gdpr_actions. Once proven, rewrites the request with the keyed hashes only: the ids are then kept nowhere.",
    ins={"request": dg.In(ErasureRequest), "raw": dg.In(RawErasure), "tables": dg.In(list)},
)
def prove_erasure(
    context: dg.OpExecutionContext,
    request: ErasureRequest,
    raw: RawErasure,
    tables: list,
    lake: LakeResource,
    raw_zone: RawZoneResource,
) -> None:
    proof = prove_step(lake.session(), lake.catalog, raw_zone.zone(), request, tables, raw)
    metadata = {
        "proof": "VERIFIED" if proof.passed else "FAILED",
        "tables_scanned": proof.tables_scanned,
        "data_files_scanned": proof.data_files_scanned,
        "raw_files_scanned": proof.raw_files_scanned,
        "copies_found": len(proof.findings),
        "customers_not_found_anywhere": len(set(request.customer_ids) - held_ids(tables, raw)),
        "rows_removed_by_table": dg.MetadataValue.json({t.table: t.rows_removed for t in tables if t.held}),
        "time_travel_before_erasure": dg.MetadataValue.json(proof.time_travel),
        # Every customer erased so far (this request's and earlier ones'), read in every table now: must all be 0.
        "suppression": proof.suppression(),
        "suppressed_customers": len(proof.suppressed),
        "suppressed_customers_found_again": len(proof.suppressed_found),
        "suppressed_rows_found": sum(proof.suppressed.values()),
        "findings": dg.MetadataValue.md("\n".join(f"- {f}" for f in proof.findings) or "none: no copy left"),
    }
    context.log.info(proof.summary())
    if not proof.passed:
        raise dg.Failure(
            description=f"erasure {request.request_id} is not proven: {proof.summary()}", metadata=metadata
        )
    store = request_store(raw_zone)
    store.close(request, context.run_id)  # the ids leave the request: only their keyed hashes stay
    metadata["request_file"] = f"{store.uri(request.request_id)}: carried out, keyed hashes only"
    context.add_output_metadata(metadata)


def build_erasure_job(settings: Settings, asset_keys: frozenset[dg.AssetKey] = frozenset()) -> dg.JobDefinition:
    """`asset_keys`: table assets of the code location; an erasure leaves an observation on those it changed."""
    request_op = _request_op(settings)
    stages = erasure_stages()
    table_ops = {
        spec.identifier: _table_op(settings, spec, table_key(spec) in asset_keys) for stage in stages for spec in stage
    }

    @dg.job(
        name="gdpr_erasure",
        description="GDPR erasure with proof. Record the request first with `etr erase --reference REF ID...`, then "
        "launch with ops.gdpr_request.config.request_reference only (the ids never reach Dagster's storage). "
        "Erases the customers from the raw zone and every table whose spec marks personal data, "
        "expires older snapshots, then proves that no data file, raw file or pre-erasure read still holds them. "
        "What was done is in audit.gdpr_actions (keyed hashes, never the ids).",
        executor_def=in_process_executor,
        tags={"purpose": "gdpr"},
    )
    def gdpr_erasure():
        request = request_op()
        raw = erase_raw_zone(request)
        previous, results = [raw], []
        for stage in stages:  # the sequence of etr_assets.lake.erasure.erase_customers, as ops
            stage_results = [table_ops[spec.identifier](request=request, after=previous) for spec in stage]
            previous, results = stage_results, results + stage_results
        prove_erasure(request, raw, results)

    return gdpr_erasure
