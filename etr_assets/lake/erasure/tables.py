"""Erasing a table: DELETE the subjects' rows, drop failed audit branches and tags that hold them, lower a
branch's own snapshot retention for the expiry (restored after), expire, rewrite manifests, delete orphans."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import TYPE_CHECKING

from etr_assets.errors import ErasureError
from etr_assets.lake.copies import ORPHAN_GRACE, delete_file, normalized, orphan_files
from etr_assets.lake.erasure.request import (
    ErasureRequest,
    data_files,
    files_holding,
    ids_frame,
    matches_by_id,
    subject_keys_sql,
)
from etr_assets.lake.frames import quoted, temp_view
from etr_assets.lake.maintenance import ExpireResult, compact, expire_snapshots, rewrite_manifests
from etr_assets.lake.retry import run_with_retries
from etr_assets.lake.specs import TableSpec
from etr_assets.lake.wap import AUDIT_BRANCH_PREFIX
from etr_assets.lake.writes import current_snapshot_id, iceberg_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


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


def erase_table(spark: SparkSession, catalog: str, spec: TableSpec, request: ErasureRequest) -> TableErasure:
    """Delete the customers from main and other branches, drop refs that pin their rows, expire older snapshots."""
    from pyspark.sql import functions as F

    if not spec.subject_column:
        raise ErasureError(f"{spec.identifier} has no subject column: nothing identifies a customer in it")
    qualified = spec.qualified(catalog)
    if not spark.catalog.tableExists(qualified):
        return TableErasure(spec.identifier, frozenset(), {})
    ids_df = ids_frame(spark, request.customer_ids)
    in_orphans = orphans_holding(spark, spec, qualified, ids_df)
    held_ids = frozenset(
        i for hits in files_holding(spark, spec, data_files(spark, qualified), ids_df).values() for i in hits
    )
    held_ids |= {i for _, hits in in_orphans for i in hits}
    if not held_ids:  # never held them (in any snapshot still kept): leave the table and its history alone
        return TableErasure(spec.identifier, held_ids, {}, snapshot_id=current_snapshot_id(spark, qualified))

    with temp_view(spark, ids_df, "gdpr_ids") as view:
        condition = f"arrays_overlap({subject_keys_sql(spec)}, (SELECT collect_set(_erase_id) FROM {view}))"
        delete = lambda target: spark.sql(f"DELETE FROM {target} WHERE {condition}")
        # Replace every file of a branch with its live rows minus the customers: one overwrite commit.
        rewrite = lambda target: spark.table(target).where(f"NOT {condition}").writeTo(target).overwrite(F.lit(True))
        if removed := matches_by_id(spark.table(qualified), spec, ids_df):
            run_with_retries(lambda: delete(qualified), f"erasing from {qualified}")
        branches_erased, dropped = {}, []
        for ref in spark.sql(f"SELECT name, type FROM {qualified}.refs WHERE name <> 'main'").collect():
            name, kind = ref["name"], ref["type"]
            if kind == "BRANCH" and name.startswith(AUDIT_BRANCH_PREFIX):
                spark.sql(f"ALTER TABLE {qualified} DROP BRANCH IF EXISTS {quoted(name)}")
                dropped.append(f"branch {name}")
                continue
            rows = spark.read.format("iceberg").option("branch" if kind == "BRANCH" else "tag", name).load(qualified)
            held = matches_by_id(rows, spec, ids_df)
            # A merge-on-read branch can keep a customer's older rows in its files behind deletion vectors (a MERGE
            # closed them), and rewrite_data_files cannot compact a branch (Iceberg 1.10): rewrite its rows.
            rewritten = kind == "BRANCH" and spec.merge_on_read
            if not (held or rewritten):
                continue
            if kind == "BRANCH":
                target = f"{qualified}.{quoted('branch_' + name)}"
                erase = rewrite if rewritten else delete
                run_with_retries(lambda t=target, e=erase: e(t), f"erasing from {target}")
                branches_erased[name] = sum(held.values())
            else:
                spark.sql(f"ALTER TABLE {qualified} DROP TAG IF EXISTS {quoted(name)}")
                dropped.append(f"tag {name}")
    if spec.merge_on_read:
        compact(spark, catalog, spec)  # a delete file only hides rows: rewrite the data files without them
    overridden = _lower_branch_retention(spark, qualified)
    try:
        # The current manifests still list the deleted files as DELETED entries, bounds included: rewrite them,
        # then expire every older snapshot (the files only they referenced go with them).
        rewrite_manifests(spark, catalog, spec)
        expired = expire_snapshots(spark, catalog, spec, older_than=dt.datetime.now(dt.UTC), retain_last=1)
    finally:
        _restore_branch_retention(spark, qualified, overridden)
    cutoff = dt.datetime.now(dt.UTC) - ORPHAN_GRACE  # younger: a running write may still commit it
    deleted = tuple(orphan.path for orphan, _ in in_orphans if orphan.modified <= cutoff)
    for path in deleted:
        delete_file(spark, path)
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
        tuple(orphan.path for orphan, _ in in_orphans if orphan.modified > cutoff),
    )


def orphans_holding(
    spark: SparkSession, spec: TableSpec, qualified: str, ids_df: DataFrame
) -> list[tuple[object, dict[int, int]]]:
    """(orphan file, {id: rows}) for every unreferenced file of the table's data folder naming a customer."""
    orphans = {normalized(o.path): o for o in orphan_files(spark, qualified)}
    found = files_holding(spark, spec, [o.path for o in orphans.values()], ids_df)
    return [(orphans[normalized(path)], hits) for path, hits in found.items()]


def _retention_text(retention: dict) -> str:
    parts = []
    if retention["min_snapshots_to_keep"] is not None:
        parts.append(f"kept {retention['min_snapshots_to_keep']} snapshot(s)")
    if retention["max_snapshot_age_in_ms"] is not None:
        parts.append(f"kept snapshots for {retention['max_snapshot_age_in_ms'] / 86_400_000:g} day(s)")
    return "retention lowered for the erasure, then restored; it " + " and ".join(parts)


def _lower_branch_retention(spark: SparkSession, qualified: str) -> dict[str, dict]:
    """Give every branch with its own snapshot retention the erasure's (keep only its head) until restored."""
    rows = spark.sql(
        f"SELECT name, snapshot_id, min_snapshots_to_keep, max_snapshot_age_in_ms, max_reference_age_in_ms "
        f"FROM {qualified}.refs WHERE type = 'BRANCH' AND name <> 'main'"
    ).collect()
    retention = {
        r["name"]: r.asDict()
        for r in rows
        if r["min_snapshots_to_keep"] is not None or r["max_snapshot_age_in_ms"] is not None
    }
    if retention:
        manage = iceberg_table(spark, qualified).manageSnapshots()
        for name in retention:
            manage = manage.setMinSnapshotsToKeep(name, 1).setMaxSnapshotAgeMs(name, 1)
        manage.commit()
    return retention


def _restore_branch_retention(spark: SparkSession, qualified: str, retention: dict[str, dict]) -> None:
    """Put each branch's own retention back exactly (unset values stay unset): re-create the ref at its head."""
    if not retention:
        return
    heads = {r[0]: r[1] for r in spark.sql(f"SELECT name, snapshot_id FROM {qualified}.refs").collect()}
    manage = iceberg_table(spark, qualified).manageSnapshots()
    for name, original in retention.items():
        manage = manage.removeBranch(name).createBranch(name, heads[name])
        if original["min_snapshots_to_keep"] is not None:
            manage = manage.setMinSnapshotsToKeep(name, int(original["min_snapshots_to_keep"]))
        if original["max_snapshot_age_in_ms"] is not None:
            manage = manage.setMaxSnapshotAgeMs(name, int(original["max_snapshot_age_in_ms"]))
        if original["max_reference_age_in_ms"] is not None:
            manage = manage.setMaxRefAgeMs(name, int(original["max_reference_age_in_ms"]))
    manage.commit()
