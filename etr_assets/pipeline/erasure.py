"""The erasure plan of this pipeline: every table whose spec marks personal data, and the raw feeds with a subject
column. The machinery (erasing, expiring, proving, auditing) is `etr_assets.lake.erasure`; this binds it to the
pipeline's tables and feeds, declared once in `etr_assets.tables`."""

from __future__ import annotations

from etr_assets.lake import erasure as library
from etr_assets.lake.erasure import ErasureReport, ErasureRequest, Proof
from etr_assets.lake.specs import TableSpec
from etr_assets.sources.raw_erasure import RawErasure
from etr_assets.sources.raw_zone import RawZone
from etr_assets.tables import personal_data_specs
from etr_assets.tables.feeds import RAW_FEEDS


def erase_raw_zone(raw: RawZone, request: ErasureRequest) -> RawErasure:
    return library.erase_raw_zone(raw, request, RAW_FEEDS)


def scan_raw_zone(raw: RawZone, ids: tuple[int, ...]) -> tuple[int, dict[str, dict[int, int]]]:
    return library.scan_raw_zone(raw, ids, RAW_FEEDS)


def prove_erased(
    spark, catalog: str, raw: RawZone | None, request: ErasureRequest, specs: tuple[TableSpec, ...] | None = None
) -> Proof:
    """The proof over the pipeline's personal-data tables (or `specs`) and its raw feeds."""
    return library.prove_erased(spark, catalog, raw, request, specs or personal_data_specs(), RAW_FEEDS)


def erase_raw_step(spark, catalog: str, raw: RawZone, request: ErasureRequest) -> RawErasure:
    return library.erase_raw_step(spark, catalog, raw, request, RAW_FEEDS)


def prove_step(spark, catalog: str, raw: RawZone | None, request: ErasureRequest, tables, raw_result) -> Proof:
    return library.prove_step(spark, catalog, raw, request, personal_data_specs(), RAW_FEEDS, tables, raw_result)


def erasure_stages() -> list[tuple[TableSpec, ...]]:
    return library.erasure_stages(personal_data_specs())


def erase_customers(spark, catalog: str, raw: RawZone | None, request: ErasureRequest) -> ErasureReport:
    """The whole erasure without Dagster (the `gdpr_erasure` job runs the same steps as ops)."""
    return library.erase_customers(spark, catalog, raw, request, personal_data_specs(), RAW_FEEDS)
