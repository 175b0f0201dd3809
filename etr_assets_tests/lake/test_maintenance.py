"""Maintenance on real Iceberg tables: compaction, manifests, expiry, orphan files, the log, a concurrent writer."""

from __future__ import annotations

import datetime as dt
import os
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest

from etr_assets.lake.bookkeeping import TABLE_MAINTENANCE_LOG
from etr_assets.lake.evolve import ensure_table
from etr_assets.lake.maintenance import (
    expire_snapshots,
    maintain_table,
    orphan_file_arguments,
    remove_orphan_files,
)
from etr_assets.lake.quality import Severity
from etr_assets.lake.specs import Column, HealthThresholds, TableSpec

# Merge-on-read so deletes leave delete files for compaction to apply; expiry keeps the newest two snapshots.
SPEC = TableSpec(
    "silver",
    "ledger",
    "maintenance test table",
    (Column("id", "bigint"), Column("day", "date")),
    partition_by=("days(day)",),
    properties={
        "write.delete.mode": "merge-on-read",
        "history.expire.max-snapshot-age-ms": "1",
        "history.expire.min-snapshots-to-keep": "2",
    },
    health=HealthThresholds(min_mergeable_small_files=2),  # a handful of tiny files counts as worth merging here
)


def insert(lake, table: str, first_id: int, rows: int = 2, day: str = "2025-01-01") -> None:
    lake.sql(f"INSERT INTO {table} SELECT id, DATE'{day}' FROM range({first_id}, {first_id + rows})")


def ids(lake, table: str) -> list[int]:
    return sorted(r[0] for r in lake.sql(f"SELECT id FROM {table}").collect())


@pytest.fixture
def ledger_with_a_delete(lake, settings) -> str:
    ensure_table(lake, settings.catalog, SPEC)
    table = SPEC.qualified(settings.catalog)
    for n in range(6):
        insert(lake, table, n * 10)
    lake.sql(f"DELETE FROM {table} WHERE id = 20")  # a position delete file
    return table


@pytest.mark.slow
def test_maintenance_compacts_applies_deletes_expires_and_logs_before_and_after(lake, settings, ledger_with_a_delete):
    rows_before = ids(lake, ledger_with_a_delete)
    result = maintain_table(lake, settings, SPEC, run_id="run-1")

    assert ids(lake, ledger_with_a_delete) == rows_before  # same rows, fewer files
    before, after = result.before, result.after
    assert before.status == Severity.WARN and (before.data_files, before.delete_files, before.snapshots) == (6, 1, 7)
    assert after.status == Severity.OK and (after.data_files, after.delete_files, after.manifests) == (1, 0, 1)
    assert after.snapshots == 2  # expiry kept the spec's min-snapshots-to-keep
    assert result.compaction.rewritten_data_files == 6 and result.compaction.added_data_files == 1
    # On v3 (the local profile's) the compaction leaves the deletion-vector manifests behind: the rewrite merges
    # them with the data manifest into one (on v2 compaction alone left one, and nothing was rewritten).
    assert result.manifests.added_manifests <= 1
    # The 7 snapshots before and the ones maintenance committed itself, all but the newest 2.
    assert result.expiry.expired_snapshots >= before.snapshots - 2 + 2
    assert result.expiry.deleted_data_files == 6 and result.orphans.removed == ()

    (row,) = lake.sql(f"SELECT * FROM {TABLE_MAINTENANCE_LOG.qualified(settings.catalog)}").collect()
    assert (row["table_name"], row["run_id"], row["status_before"], row["status_after"]) == (
        "silver.ledger",
        "run-1",
        "WARN",
        "OK",
    )
    assert (
        row["data_files_before"],
        row["data_files_after"],
        row["delete_files_before"],
        row["delete_files_after"],
    ) == (6, 1, 1, 0)
    assert (row["snapshots_before"], row["snapshots_after"]) == (7, 2)
    assert row["expired_snapshots"] == result.expiry.expired_snapshots and row["removed_delete_files"] == 1
    assert row["rewritten_data_files"] == 6 and row["orphan_files_removed"] == 0
    assert "mergeable small-file share" in row["reasons_before"]
    print(f"maintenance of a 6-file table took {result.seconds:.1f} s")


def test_expire_snapshots_now_keeps_only_the_last(lake, settings, ledger_with_a_delete):
    """What erasure calls: every older snapshot goes, so deleted rows are physically gone."""
    deleted_file = lake.sql(f"SELECT file_path FROM {ledger_with_a_delete}.files WHERE content = 0").collect()
    result = expire_snapshots(lake, settings.catalog, SPEC, older_than=dt.datetime.now(dt.UTC), retain_last=1)
    assert result.expired_snapshots == 6 and result.retain_last == 1
    assert lake.sql(f"SELECT count(*) FROM {ledger_with_a_delete}.snapshots").first()[0] == 1
    assert all(Path(urlparse(r[0]).path).exists() for r in deleted_file)  # live files stay
    with pytest.raises(ValueError, match="retain_last=0 must be at least 1"):
        expire_snapshots(lake, settings.catalog, SPEC, retain_last=0)


def test_orphan_files_older_than_three_days_are_removed_and_fresh_ones_kept(lake, settings, ledger_with_a_delete):
    data_dir = Path(urlparse(settings.warehouse).path) / "silver" / "ledger" / "data"
    old_orphan, fresh_orphan = data_dir / "left-by-a-crashed-write.parquet", data_dir / "being-written-now.parquet"
    for path in (old_orphan, fresh_orphan):
        path.write_bytes(b"not referenced by any snapshot")
    four_days_ago = (dt.datetime.now(dt.UTC) - dt.timedelta(days=4)).timestamp()
    os.utime(old_orphan, (four_days_ago, four_days_ago))
    rows_before = ids(lake, ledger_with_a_delete)

    result = remove_orphan_files(lake, settings.catalog, SPEC)
    assert [Path(urlparse(p).path).name for p in result.removed] == [old_orphan.name]
    assert not old_orphan.exists() and fresh_orphan.exists()
    assert ids(lake, ledger_with_a_delete) == rows_before  # every live file is still there
    with pytest.raises(ValueError, match="less than 24 hours ago"):
        remove_orphan_files(lake, settings.catalog, SPEC, older_than=dt.datetime.now(dt.UTC) - dt.timedelta(hours=2))


def test_orphan_removal_treats_s3_and_s3a_as_one_scheme_and_fails_on_other_mismatches():
    # apache/iceberg #4346: metadata written by S3FileIO says s3://, Hadoop's listing says s3a://; without this
    # every live file would look orphaned. Any other mismatch (bucket, authority) fails instead of deleting.
    arguments = orphan_file_arguments(SPEC, dt.datetime(2025, 1, 1, tzinfo=dt.UTC))
    assert arguments == {
        "table": "'silver.ledger'",
        "older_than": "TIMESTAMP '2025-01-01 00:00:00.000000+00:00'",
        "equal_schemes": "map('s3a,s3n', 's3')",
        "prefix_mismatch_mode": "'ERROR'",
    }
    with pytest.raises(ValueError, match="has no time zone"):
        orphan_file_arguments(SPEC, dt.datetime(2025, 1, 1))


@pytest.mark.slow
def test_maintenance_during_a_concurrent_writer_loses_no_row(lake, settings, ledger_with_a_delete):
    appended: list[int] = []
    errors: list[Exception] = []

    def writer() -> None:
        try:
            for n in range(100, 110):
                insert(lake, ledger_with_a_delete, n * 10, rows=3)
                appended.extend(range(n * 10, n * 10 + 3))
        except Exception as error:  # noqa: BLE001 - reported by the assertion below, not lost in the thread
            errors.append(error)

    rows_before = ids(lake, ledger_with_a_delete)
    thread = threading.Thread(target=writer)
    thread.start()
    result = maintain_table(lake, settings, SPEC, run_id="concurrent")
    thread.join()

    assert errors == []
    assert ids(lake, ledger_with_a_delete) == sorted(rows_before + appended)  # nothing lost, nothing doubled
    assert result.compaction.rewritten_data_files >= 6


@pytest.mark.slow
def test_audit_branches_left_by_failed_or_killed_runs_are_dropped_once_stale_and_logged(
    lake, settings, ledger_with_a_delete, monkeypatch
):
    from etr_assets.lake import maintenance
    from etr_assets.lake.maintenance import drop_stale_audit_branches

    lake.sql(f"ALTER TABLE {ledger_with_a_delete} CREATE BRANCH audit_killed_run")
    lake.sql(f"ALTER TABLE {ledger_with_a_delete} CREATE BRANCH scd2_apply_killed")  # a killed SCD2 daily apply's
    lake.sql(f"ALTER TABLE {ledger_with_a_delete} CREATE BRANCH analysis")  # someone's own branch: never touched
    assert (
        drop_stale_audit_branches(lake, ledger_with_a_delete) == ()
    )  # younger than a day: a running write may still use it
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=2)
    assert drop_stale_audit_branches(lake, ledger_with_a_delete, now=later) == ("audit_killed_run", "scd2_apply_killed")
    assert {r[0] for r in lake.sql(f"SELECT name FROM {ledger_with_a_delete}.refs").collect()} == {"main", "analysis"}

    lake.sql(f"ALTER TABLE {ledger_with_a_delete} CREATE BRANCH audit_other_run")
    monkeypatch.setattr(maintenance, "AUDIT_BRANCH_GRACE", dt.timedelta(0))  # as if a day had passed
    result = maintain_table(lake, settings, SPEC, run_id="r1")
    assert result.audit_branches_dropped == ("audit_other_run",)
    logged = lake.sql(
        f"SELECT audit_branches_dropped FROM {TABLE_MAINTENANCE_LOG.qualified(settings.catalog)}"
    ).collect()
    assert [r[0] for r in logged] == ["audit_other_run"]
