"""Table maintenance with Iceberg's Spark procedures: compaction, manifests, expiry, orphans (docs/maintenance.md).
Each step is a plain function, reusable alone (erasure expires snapshots right away)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from etr_assets.lake.bookkeeping import TABLE_MAINTENANCE_LOG, record_rows
from etr_assets.lake.health import TableHealth, retained_snapshots, table_health
from etr_assets.lake.retry import run_with_retries
from etr_assets.lake.scd2 import BRANCH_PREFIX as SCD2_BRANCH_PREFIX
from etr_assets.lake.specs import TableSpec
from etr_assets.lake.timetravel import naive_utc
from etr_assets.lake.wap import AUDIT_BRANCH_PREFIX
from etr_assets.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ORPHAN_MIN_AGE = dt.timedelta(days=3)
# Iceberg refuses to look for orphans younger than this: a running write's files are not committed yet.
ORPHAN_SAFETY_AGE = dt.timedelta(hours=24)
# apache/iceberg #4346: S3FileIO's metadata says s3://, Hadoop's listing s3a://; any other prefix mismatch fails
# the call instead of deleting files that are in fact live.
EQUAL_SCHEMES = {"s3a,s3n": "s3"}
PREFIX_MISMATCH_MODE = "ERROR"


@dataclasses.dataclass(frozen=True)
class CompactionResult:
    rewritten_data_files: int = 0
    added_data_files: int = 0
    rewritten_bytes: int = 0
    removed_delete_files: int = 0


@dataclasses.dataclass(frozen=True)
class ManifestRewriteResult:
    rewritten_manifests: int = 0
    added_manifests: int = 0


@dataclasses.dataclass(frozen=True)
class ExpireResult:
    expired_snapshots: int = 0
    deleted_data_files: int = 0
    deleted_delete_files: int = 0
    deleted_manifest_files: int = 0  # manifests and manifest lists
    retain_last: int = 0

    @property
    def deleted_files(self) -> int:
        return self.deleted_data_files + self.deleted_delete_files + self.deleted_manifest_files


@dataclasses.dataclass(frozen=True)
class OrphanResult:
    removed: tuple[str, ...] = ()  # locations of the deleted files


@dataclasses.dataclass(frozen=True)
class MaintenanceResult:
    table: str
    before: TableHealth
    after: TableHealth
    compaction: CompactionResult
    manifests: ManifestRewriteResult
    expiry: ExpireResult
    orphans: OrphanResult
    started_at: dt.datetime
    finished_at: dt.datetime
    audit_branches_dropped: tuple[str, ...] = ()

    @property
    def seconds(self) -> float:
        return (self.finished_at - self.started_at).total_seconds()

    def log_row(self, run_id: str = "") -> dict[str, object]:
        """The row `monitoring.table_maintenance_log` keeps for this maintenance."""
        before, after = self.before, self.after
        row: dict[str, object] = {
            "table_name": self.table,
            "run_id": run_id,
            "started_at": naive_utc(self.started_at),
            "finished_at": naive_utc(self.finished_at),
            "status_before": str(before.status),  # plain text: Spark cannot pickle an enum
            "status_after": str(after.status),
            "reasons_before": "; ".join(before.reasons) or None,
        }
        figures = ("data_files", "small_files", "delete_files", "snapshots", "manifests", "metadata_file_bytes")
        for figure in (*figures, "data_bytes"):
            column = figure.replace("metadata_file_bytes", "metadata_bytes")
            row[f"{column}_before"] = getattr(before, figure)
            row[f"{column}_after"] = getattr(after, figure)
        return row | {
            "rewritten_data_files": self.compaction.rewritten_data_files,
            "added_data_files": self.compaction.added_data_files,
            "removed_delete_files": self.compaction.removed_delete_files,
            "rewritten_manifests": self.manifests.rewritten_manifests,
            "added_manifests": self.manifests.added_manifests,
            "expired_snapshots": self.expiry.expired_snapshots,
            "expired_files": self.expiry.deleted_files,
            "orphan_files_removed": len(self.orphans.removed),
            "seconds": self.seconds,
            "audit_branches_dropped": ", ".join(self.audit_branches_dropped) or None,
        }


def _timestamp_literal(moment: dt.datetime) -> str:
    """A Spark TIMESTAMP literal with its offset, so the session's time zone cannot shift it."""
    if moment.tzinfo is None:
        raise ValueError(f"{moment!r} has no time zone: pass an aware datetime (UTC)")
    return f"TIMESTAMP '{moment.astimezone(dt.UTC).strftime('%Y-%m-%d %H:%M:%S.%f')}+00:00'"


def _call(spark: SparkSession, catalog: str, procedure: str, arguments: dict[str, str]) -> list[dict]:
    """CALL a procedure; arguments are SQL expressions built here from specs and numbers, never user text."""
    named = ", ".join(f"{name} => {value}" for name, value in arguments.items())
    return [row.asDict() for row in spark.sql(f"CALL {catalog}.system.{procedure}({named})").collect()]


def _sql_map(mapping: dict[str, str]) -> str:
    return "map(" + ", ".join(f"'{k}', '{v}'" for k, v in mapping.items()) + ")"


def _procedure(spark, catalog: str, spec: TableSpec, procedure: str, **arguments: str) -> Callable[..., int]:
    """CALL `procedure` on the table, retried on commit conflicts: `count(*names)` sums those columns of its row."""

    def run() -> Callable[..., int]:
        rows = _call(spark, catalog, procedure, {"table": f"'{spec.identifier}'", **arguments})
        row = rows[0] if rows else {}
        return lambda *names: sum(int(row.get(name) or 0) for name in names)

    return run_with_retries(run, f"{procedure} on {spec.qualified(catalog)}")


def compact(spark: SparkSession, catalog: str, spec: TableSpec, has_delete_files: bool = True) -> CompactionResult:
    """rewrite_data_files toward the spec's target file size, applying delete files (then dropping them)."""
    options = {
        "target-file-size-bytes": str(spec.target_file_size_bytes),
        "min-input-files": "2",  # merge any two small files of a partition (Iceberg's default waits for 5)
        "delete-file-threshold": "1",  # a data file with any delete file is rewritten with its deletes applied
        "remove-dangling-deletes": "true",  # delete files whose data files are all rewritten are dropped
    }
    count = _procedure(spark, catalog, spec, "rewrite_data_files", options=_sql_map(options))
    removed = count("removed_delete_files_count")
    if has_delete_files:  # the rewritten files' position deletes stay live until rewritten themselves
        rewritten = _procedure(
            spark, catalog, spec, "rewrite_position_delete_files", options="map('rewrite-all', 'true')"
        )
        removed += rewritten("rewritten_delete_files_count") - rewritten("added_delete_files_count")
    return CompactionResult(
        count("rewritten_data_files_count"), count("added_data_files_count"), count("rewritten_bytes_count"), removed
    )


def rewrite_manifests(spark: SparkSession, catalog: str, spec: TableSpec) -> ManifestRewriteResult:
    count = _procedure(spark, catalog, spec, "rewrite_manifests")
    return ManifestRewriteResult(count("rewritten_manifests_count"), count("added_manifests_count"))


def expire_snapshots(
    spark: SparkSession,
    catalog: str,
    spec: TableSpec,
    older_than: dt.datetime | None = None,
    retain_last: int | None = None,
) -> ExpireResult:
    """Expire snapshots committed before `older_than` beyond the newest `retain_last`, deleting the files only
    they referenced. Defaults come from the spec's history.expire.* properties; erasure passes `older_than=now,
    retain_last=1` so deleted rows are physically gone. Snapshots a branch or tag still references are kept."""
    max_age_ms = int(spec.table_properties["history.expire.max-snapshot-age-ms"])
    older_than = older_than or dt.datetime.now(dt.UTC) - dt.timedelta(milliseconds=max_age_ms)
    retain_last = retained_snapshots(spec) if retain_last is None else retain_last
    if retain_last < 1:
        raise ValueError(f"expire_snapshots on {spec.identifier}: retain_last={retain_last} must be at least 1")
    snapshots = f"SELECT snapshot_id FROM {spec.qualified(catalog)}.snapshots"
    before = {row[0] for row in spark.sql(snapshots).collect()}
    count = _procedure(
        spark,
        catalog,
        spec,
        "expire_snapshots",
        older_than=_timestamp_literal(older_than),
        retain_last=str(retain_last),
    )
    return ExpireResult(
        len(before - {row[0] for row in spark.sql(snapshots).collect()}),
        count("deleted_data_files_count"),
        count("deleted_position_delete_files_count", "deleted_equality_delete_files_count"),
        count("deleted_manifest_files_count", "deleted_manifest_lists_count"),
        retain_last,
    )


def orphan_file_arguments(spec: TableSpec, older_than: dt.datetime) -> dict[str, str]:
    """The named arguments of remove_orphan_files (s3/s3a/s3n treated as one scheme; other mismatches fail)."""
    return {
        "table": f"'{spec.identifier}'",
        "older_than": _timestamp_literal(older_than),
        "equal_schemes": _sql_map(EQUAL_SCHEMES),
        "prefix_mismatch_mode": f"'{PREFIX_MISMATCH_MODE}'",
    }


def remove_orphan_files(
    spark: SparkSession, catalog: str, spec: TableSpec, older_than: dt.datetime | None = None
) -> OrphanResult:
    """Delete files under the table's location that no snapshot references and that are older than
    `older_than` (default: three days ago, so no running write's uncommitted files are touched)."""
    now = dt.datetime.now(dt.UTC)
    older_than = older_than or now - ORPHAN_MIN_AGE
    if older_than > now - ORPHAN_SAFETY_AGE:
        raise ValueError(
            f"remove_orphan_files on {spec.identifier}: older_than {older_than.isoformat()} is less than 24 hours "
            "ago; files of writes still running would look orphaned"
        )
    rows = _call(spark, catalog, "remove_orphan_files", orphan_file_arguments(spec, older_than))
    return OrphanResult(tuple(row["orphan_file_location"] for row in rows))


def maintain_table(
    spark: SparkSession,
    settings: Settings,
    spec: TableSpec,
    run_id: str = "",
    snapshots_older_than: dt.datetime | None = None,
) -> MaintenanceResult:
    """Every step in order on one table, with health before and after, logged to table_maintenance_log.
    `snapshots_older_than`: expiry's cutoff instead of the spec's retention (a benchmark's simulated calendar)."""
    catalog = settings.catalog
    started_at = dt.datetime.now(dt.UTC)
    clock = time.perf_counter()
    before = table_health(settings, spec)
    if not before.exists:
        raise ValueError(f"cannot maintain {spec.identifier}: the table has not been created yet")
    dropped = drop_stale_audit_branches(spark, spec.qualified(catalog))  # before expiry: their snapshots can go
    compaction = compact(spark, catalog, spec, has_delete_files=before.delete_files > 0)
    manifests = rewrite_manifests(spark, catalog, spec)
    expiry = expire_snapshots(spark, catalog, spec, older_than=snapshots_older_than)
    orphans = remove_orphan_files(spark, catalog, spec)
    after = table_health(settings, spec)
    finished_at = started_at + dt.timedelta(seconds=time.perf_counter() - clock)
    result = MaintenanceResult(
        spec.identifier, before, after, compaction, manifests, expiry, orphans, started_at, finished_at, dropped
    )
    record_rows(spark, catalog, TABLE_MAINTENANCE_LOG, [result.log_row(run_id)])
    return result


# An `audit_*` or `scd2_apply_*` branch left behind is a failed audit or a killed run's; older than this, no running
# write can still be using it.
AUDIT_BRANCH_GRACE = dt.timedelta(days=1)


def drop_stale_audit_branches(spark: SparkSession, qualified: str, now: dt.datetime | None = None) -> tuple[str, ...]:
    """Drop `audit_*` and `scd2_apply_*` branches whose newest snapshot was committed more than AUDIT_BRANCH_GRACE
    before `now`."""
    cutoff = naive_utc((now or dt.datetime.now(dt.UTC)) - AUDIT_BRANCH_GRACE)
    rows = spark.sql(
        f"SELECT r.name, s.committed_at FROM {qualified}.refs r JOIN {qualified}.snapshots s "
        f"ON r.snapshot_id = s.snapshot_id WHERE r.type = 'BRANCH'"
    ).collect()
    stale = [r[0] for r in rows if r[0].startswith((AUDIT_BRANCH_PREFIX, SCD2_BRANCH_PREFIX)) and r[1] < cutoff]
    for name in stale:
        spark.sql(f"ALTER TABLE {qualified} DROP BRANCH IF EXISTS `{name.replace('`', '``')}`")
    return tuple(sorted(stale))
