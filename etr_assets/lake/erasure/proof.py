"""The proof that nothing of the subjects is left: every data file and orphan, the manifests' bounds, each table
as of before the erasure, every other table of the catalog with a subject-like column, and every raw file."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable
from typing import TYPE_CHECKING

from etr_assets.errors import NoSuchSnapshot
from etr_assets.lake.copies import (
    ORPHAN_GRACE,
    bounds_naming,
    catalog_tables,
    normalized,
    orphan_files,
    subject_like_columns,
)
from etr_assets.lake.erasure.request import (
    ErasureRequest,
    data_files,
    files_holding,
    files_naming,
    ids_frame,
    matches_by_id,
)
from etr_assets.lake.erasure.tables import orphans_holding
from etr_assets.lake.feeds import RawFeed
from etr_assets.lake.specs import TableSpec
from etr_assets.lake.timetravel import read_as_of
from etr_assets.sources.raw_erasure import RawErasure, RawFeedSubject, erase_raw_records, find_raw_records
from etr_assets.sources.raw_zone import RawZone

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def raw_feeds_with_subjects(feeds: tuple[RawFeed, ...]) -> tuple[RawFeedSubject, ...]:
    """Raw endpoints holding personal data: the feeds whose bronze spec names a subject column."""
    return tuple(
        RawFeedSubject(f.source, f.endpoint, f.bronze.subject_column) for f in feeds if f.bronze.subject_column
    )


def erase_raw_zone(raw: RawZone, request: ErasureRequest, feeds: tuple[RawFeed, ...]) -> RawErasure:
    return erase_raw_records(raw, request.customer_ids, raw_feeds_with_subjects(feeds))


def scan_raw_zone(
    raw: RawZone, ids: tuple[int, ...], feeds: tuple[RawFeed, ...]
) -> tuple[int, dict[str, dict[int, int]]]:
    return find_raw_records(raw, ids, raw_feeds_with_subjects(feeds))


@dataclasses.dataclass(frozen=True)
class Proof:
    passed: bool
    tables_scanned: int
    data_files_scanned: int
    raw_files_scanned: int
    findings: tuple[str, ...]  # where a copy was found: "<table> data file <path>: N row(s) of 1 subject(s)"
    found_ids: tuple[int, ...]  # which of the customers were still found (empty when passed)
    time_travel: dict[str, str]  # table -> what reading it as of the erasure's start gave
    # Every suppressed customer (this request's and earlier ones'), by hash -> rows of theirs found now: all 0.
    suppressed: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def suppressed_found(self) -> dict[str, int]:
        return {h: n for h, n in self.suppressed.items() if n}

    def suppression(self) -> str:
        """The statement that nothing of any erased customer entered a table since their erasure (or how many did)."""
        back = self.suppressed_found
        return f"{len(self.suppressed)} erased customer(s) on the suppression list: " + (
            f"{len(back)} found again in a table" if back else "no row of theirs in any table since"
        )

    def summary(self) -> str:
        head = "VERIFIED" if self.passed else f"FAILED: {len(self.findings)} copy(ies) left"
        kept_out = f"; {self.suppression()}" if self.suppressed else ""
        return (
            f"{head}; scanned {self.data_files_scanned} data file(s) of {self.tables_scanned} table(s) and "
            f"{self.raw_files_scanned} raw file(s){kept_out}"
            + ("" if self.passed else ": " + "; ".join(self.findings[:5]))
        )


def _as_of_read(spark, spec: TableSpec, qualified: str, when: dt.datetime, ids_df) -> tuple[str, dict[int, int]]:
    """What reading the table as it was at `when` gives: its snapshot is gone (fine) or it must hold no customer."""
    try:
        found = matches_by_id(read_as_of(spark, qualified, when=when), spec, ids_df)
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


def _rows(hits: dict[int, int], unit: str = "row") -> str:
    return f"{sum(hits.values())} {unit}(s) of {len(hits)} subject(s)"


def _orphan_finding(table: str, orphan, hits: dict[int, int]) -> str:
    age = dt.datetime.now(dt.UTC) - orphan.modified
    recent = (
        f"; written {age.total_seconds():.0f} s ago, maybe by a write still running: run the erasure again once "
        "it has committed or failed"
        if age < ORPHAN_GRACE
        else ""
    )
    return f"{table} orphan file {orphan.path} (no snapshot references it): {_rows(hits)}{recent}"


def _unlisted_copies(spark, catalog: str, specs, ids_df) -> tuple[int, int, list[tuple[str, dict[int, int]]]]:
    """Every other table of the catalog with a column named like a subject column: (tables, files, findings)."""
    declared = {s.qualified(catalog) for s in specs}
    subjects = {s.subject_column for s in specs if s.subject_column} or {"customer_id"}
    tables = files = 0
    found = []
    for table in catalog_tables(spark, catalog):
        columns = subject_like_columns(table.columns, subjects)
        if table.qualified in declared or not columns:
            continue
        tables += 1
        keys = "array(" + ", ".join(f"CAST(`{c}` AS BIGINT)" for c in columns) + ")"
        paths = data_files(spark, table.qualified)
        orphans = {normalized(o.path) for o in orphan_files(spark, table.qualified)}
        files += len(paths) + len(orphans)
        for path, hits in files_naming(spark, table.identifier, paths + sorted(orphans), keys, columns, ids_df).items():
            where = "orphan file" if normalized(path) in orphans else "data file"
            unlisted = f"{table.identifier} (a table without a spec: drop it or erase the customers from it)"
            found.append((f"{unlisted} {where} {path}: {_rows(hits)}", hits))
    return tables, files, found


def prove_erased(
    spark: SparkSession,
    catalog: str,
    raw: RawZone | None,
    request: ErasureRequest,
    specs: tuple[TableSpec, ...],
    feeds: tuple[RawFeed, ...] = (),
) -> Proof:
    """Scan every data file, orphan and manifest bound of every personal-data table (`specs`), every raw file of
    `feeds`, each table as of before the erasure, and every other table of the catalog with a subject-like column."""
    from etr_assets.lake.erasure.suppression import Suppression, rows_of_suppressed, suppression_list

    ids_df = ids_frame(spark, request.customer_ids)
    found: list[tuple[str, Iterable[int]]] = []  # (where a copy is, the customers it names)
    tables = files = 0
    time_travel: dict[str, str] = {}
    for spec in specs:
        qualified = spec.qualified(catalog)
        if not spark.catalog.tableExists(qualified):
            continue
        tables += 1
        paths = data_files(spark, qualified)
        orphans = orphans_holding(spark, spec, qualified, ids_df)
        files += len(paths) + len(orphans)
        held = files_holding(spark, spec, paths, ids_df)
        found += [(f"{spec.identifier} data file {path}: {_rows(hits)}", hits) for path, hits in held.items()]
        found += [(_orphan_finding(spec.identifier, orphan, hits), hits) for orphan, hits in orphans]
        bounds = bounds_naming(spark, qualified, spec.subject_column, request.customer_ids)
        found += [(f"{spec.identifier} {bound}", named) for bound, named in bounds.items()]
        outcome, hits = _as_of_read(spark, spec, qualified, request.requested_at, ids_df)
        time_travel[spec.identifier] = outcome
        if hits:
            found.append((f"{spec.identifier} as of {request.requested_at.isoformat()}: {outcome}", hits))
    other_tables, other_files, other_found = _unlisted_copies(spark, catalog, specs, ids_df)
    tables, files, found = tables + other_tables, files + other_files, found + other_found
    raw_files = 0
    if raw is not None:
        raw_files, raw_found = scan_raw_zone(raw, request.customer_ids, feeds)
        found += [(f"raw file {uri}: {_rows(hits, 'line')}", hits) for uri, hits in raw_found.items()]
    # Every customer the audit marks erased (and this request's), by hash: their rows in the tables now.
    listed = suppression_list(spark, catalog, request.key).hashes | {request.hash_of(i) for i in request.customer_ids}
    suppressed = rows_of_suppressed(spark, catalog, specs, Suppression(request.key, frozenset(listed)))
    for subject, where in suppressed.items():
        if where:
            back = ", ".join(f"{table} {rows} row(s)" for table, rows in sorted(where.items()))
            ids = [i for i in request.customer_ids if request.hash_of(i) == subject]
            found.append((f"erased customer {subject[:12]}… (suppression list) is back: {back}", ids))
    return Proof(
        not found,
        tables,
        files,
        raw_files,
        tuple(finding for finding, _ in found),
        tuple(sorted({i for _, ids in found for i in ids})),
        time_travel,
        {subject: sum(where.values()) for subject, where in suppressed.items()},
    )
