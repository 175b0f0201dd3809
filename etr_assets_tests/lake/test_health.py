"""Table health from metadata (pyiceberg, no JVM in the measure) on real Iceberg tables made by Spark."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from urllib.parse import urlparse

import pytest

from etr_assets.errors import SpecError
from etr_assets.lake.evolve import ensure_table
from etr_assets.lake.health import TableHealth, judge, table_health
from etr_assets.lake.quality import Severity
from etr_assets.lake.specs import Column, HealthThresholds, TableSpec

COLUMNS = (Column("id", "bigint"), Column("day", "date"))
MERGE_ON_READ = {"write.delete.mode": "merge-on-read", "write.update.mode": "merge-on-read"}


def spec_named(name: str, **kwargs) -> TableSpec:
    return TableSpec("silver", name, "health test table", COLUMNS, partition_by=("days(day)",), **kwargs)


def insert(lake, table: str, first_id: int, day: str, rows: int = 1) -> None:
    lake.sql(f"INSERT INTO {table} SELECT id, DATE'{day}' FROM range({first_id}, {first_id + rows})")


def test_a_table_written_once_per_day_is_healthy(lake, settings):
    spec = spec_named("daily")
    ensure_table(lake, settings.catalog, spec)
    for n, day in enumerate(("2025-01-01", "2025-01-02", "2025-01-03")):
        insert(lake, spec.qualified(settings.catalog), n * 10, day, rows=10)

    health = table_health(settings, spec)
    assert health.status == Severity.OK and health.reasons == ()
    assert (health.rows, health.data_files, health.partitions, health.snapshots) == (30, 3, 3, 3)
    # Every file is far under the 128 MB target, but each is alone in its day: nothing to merge.
    assert (health.small_files, health.small_file_share, health.mergeable_small_files) == (3, 1.0, 0)
    assert health.average_file_bytes == health.data_bytes // 3 and health.data_bytes > 0
    assert health.manifests == 3 and health.delete_files == 0
    metadata_dir = Path(urlparse(settings.warehouse).path) / "silver" / "daily" / "metadata"
    version = (metadata_dir / "version-hint.text").read_text().strip()
    assert health.metadata_file_bytes == (metadata_dir / f"v{version}.metadata.json").stat().st_size
    assert (
        health.current_snapshot_id
        == lake.sql(
            f"SELECT snapshot_id FROM {spec.qualified(settings.catalog)}.snapshots ORDER BY committed_at DESC LIMIT 1"
        ).first()[0]
    )


def test_many_tiny_appends_and_deletes_make_a_table_warn_with_the_reasons_named(lake, settings):
    spec = spec_named(
        "tiny", properties=MERGE_ON_READ, health=HealthThresholds(max_delete_files=1, min_mergeable_small_files=4)
    )
    table = spec.qualified(settings.catalog)
    ensure_table(lake, settings.catalog, spec)
    for n in range(8):
        insert(lake, table, n * 10, "2025-01-01", rows=2)
    lake.sql(f"DELETE FROM {table} WHERE id = 30")  # one row of a two-row file: a position delete file
    lake.sql(f"DELETE FROM {table} WHERE id = 50")

    health = table_health(settings, spec)
    assert health.status == Severity.WARN
    assert (health.data_files, health.small_files, health.mergeable_small_files, health.partitions) == (8, 8, 7, 1)
    assert health.mergeable_small_file_share == pytest.approx(7 / 8)
    assert health.delete_files == 2 and health.rows == 14
    assert health.snapshots == 10 and health.manifests == 3  # the appends' 8 merged into one, a delete's each
    assert health.reasons == ("WARN: mergeable small-file share 0.875 > 0.5", "WARN: delete files 2 > 1")
    # With the default floor (16 mergeable files, or small files filling a target file) seven tiny files of a new
    # table are not worth a warning: compaction would not make reads noticeably faster.
    default_floor = dataclasses.replace(spec, health=HealthThresholds(max_delete_files=1))
    assert judge(default_floor, health)[1] == ("WARN: delete files 2 > 1",)
    print(f"health of a 10-snapshot table measured in {health.measured_seconds * 1000:.0f} ms")


def test_a_reading_reads_only_the_manifests_it_has_not_read_and_counts_as_a_first_reading(lake, settings, monkeypatch):
    """Manifests never change: the health sensor's daily reading reads those written since (S3 GETs that would
    otherwise grow with the manifests a table keeps), and says what a first reading says."""
    from pyiceberg.manifest import ManifestFile

    from etr_assets.lake import health

    spec = spec_named("reread", properties=MERGE_ON_READ)
    table, now = spec.qualified(settings.catalog), dt.datetime.now(dt.UTC)
    ensure_table(lake, settings.catalog, spec)
    for n in range(3):
        insert(lake, table, n * 10, "2025-01-01", rows=2)
    read, fetch = set(), ManifestFile.fetch_manifest_entry
    monkeypatch.setattr(
        ManifestFile, "fetch_manifest_entry", lambda m, *a, **k: read.add(m.manifest_path) or fetch(m, *a, **k)
    )
    manifests = lambda: {r[0] for r in lake.sql(f"SELECT path FROM {table}.manifests").collect()}  # noqa: E731
    kept = manifests()
    assert table_health(settings, spec, now).manifests == 3 and read == kept

    insert(lake, table, 100, "2025-01-02", rows=2)
    lake.sql(f"DELETE FROM {table} WHERE id = 10")  # a delete manifest beside the append's
    read.clear()
    again = table_health(settings, spec, now)
    assert again.manifests == 5 and read == manifests() - kept and len(read) == 2
    health._read_manifests.clear()
    first = table_health(settings, spec, now)
    assert read == manifests() and (again.data_files, again.delete_files, again.rows) == (4, 1, 7)
    assert dataclasses.replace(again, measured_seconds=0) == dataclasses.replace(first, measured_seconds=0)


def test_thresholds_come_from_the_spec_and_far_past_a_limit_is_an_error(lake, settings):
    keeps_one = {"history.expire.min-snapshots-to-keep": "1"}
    limits = HealthThresholds(max_snapshots=1, max_manifests=2, error_factor=2, max_snapshot_age_days=30)
    spec = spec_named("strict", health=limits, properties=keeps_one)
    ensure_table(lake, settings.catalog, spec)
    for n in range(3):
        insert(lake, spec.qualified(settings.catalog), n, f"2025-01-0{n + 1}")
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=8)  # past the 7-day retention: expiry could remove two

    health = table_health(settings, spec, now=later)
    assert health.status == Severity.ERROR
    assert health.reasons == ("ERROR: snapshots 3 > 1", "WARN: manifests 3 > 2")
    relaxed = dataclasses.replace(spec, health=HealthThresholds())
    assert table_health(settings, relaxed, now=later).status == Severity.OK  # the same table under the default limits


def test_the_snapshot_count_is_judged_only_once_expiry_could_lower_it():
    spec = spec_named("busy")  # 100 snapshots at most; expiry keeps 10, and those of the last 7 days
    # a log committed to 20 times a day: 140 snapshots, all inside the retention, that maintenance cannot remove
    busy = TableHealth("silver.busy", exists=True, snapshots=140, oldest_snapshot_age_days=6.9)
    assert judge(spec, busy) == (Severity.OK, ())
    aged = dataclasses.replace(busy, oldest_snapshot_age_days=7.5)
    assert judge(spec, aged) == (Severity.WARN, ("WARN: snapshots 140 > 100",))
    keeps_all = dataclasses.replace(spec, properties={"history.expire.min-snapshots-to-keep": "200"})
    assert judge(keeps_all, aged) == (Severity.OK, ())


def test_commits_merge_their_manifests_once_eight_pile_up(lake, settings):
    spec = spec_named("appended")
    ensure_table(lake, settings.catalog, spec)
    manifests = []
    for n in range(17):
        insert(lake, spec.qualified(settings.catalog), n, "2025-01-01")
        manifests.append(table_health(settings, spec).manifests)
    # one more a commit up to 7; the eighth commit merges them: reads never list more than 7 however many commits
    assert manifests == [1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4, 5, 6, 7, 1, 2, 3]


def test_old_snapshots_count_only_beyond_those_expiry_always_keeps(lake, settings):
    keeps_two = spec_named("aged", properties={"history.expire.min-snapshots-to-keep": "2"})
    ensure_table(lake, settings.catalog, keeps_two)
    for n in range(3):
        insert(lake, keeps_two.qualified(settings.catalog), n, "2025-01-01")
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=20)

    health = table_health(settings, keeps_two, now=later)
    assert health.oldest_snapshot_age_days == pytest.approx(20, abs=0.1)
    assert health.status == Severity.WARN and health.reasons[-1].startswith("WARN: oldest snapshot age 20")
    keeps_ten = dataclasses.replace(keeps_two, properties={})  # 3 snapshots, expiry keeps 10: nothing to expire
    assert not any("age" in reason for reason in table_health(settings, keeps_ten, now=later).reasons)


def test_a_table_never_created_is_reported_as_such(settings):
    health = table_health(settings, spec_named("absent"))
    assert not health.exists and not health.needs_maintenance
    assert health.describe() == "silver.absent: not created yet"


def test_judging_is_plain_arithmetic_over_the_figures():
    spec = spec_named("figures", health=HealthThresholds(max_metadata_file_mb=1, error_factor=4))
    big_metadata = TableHealth("silver.figures", exists=True, metadata_file_bytes=5 * 1024 * 1024, snapshots=1)
    assert judge(spec, big_metadata) == (Severity.ERROR, ("ERROR: metadata file 5 MB > 1 MB",))
    assert judge(spec, dataclasses.replace(big_metadata, metadata_file_bytes=2 * 1024 * 1024))[0] == Severity.WARN
    all_small = dataclasses.replace(big_metadata, metadata_file_bytes=0, mergeable_small_file_share=1.0)
    assert judge(spec, all_small)[0] == Severity.WARN  # small files never make an ERROR


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_small_file_share", 1.5, "must be in"),
        ("max_snapshots", 0, "must be positive"),
        ("error_factor", 0.5, "must be at least 1"),
    ],
)
def test_thresholds_refuse_nonsense(field, value, message):
    with pytest.raises(SpecError, match=f"{field}={value} {message}"):
        HealthThresholds(**{field: value})


def test_storage_amplification_counts_every_file_kept_and_warns_once_the_excess_fills_a_file(lake, settings):
    from etr_assets.lake.maintenance import expire_snapshots

    # A 1 KB target file: the files each overwrite leaves behind soon add up to more than one.
    spec = spec_named("rewritten", properties={"write.target-file-size-bytes": "1024"})
    table = spec.qualified(settings.catalog)
    ensure_table(lake, settings.catalog, spec)
    insert(lake, table, 0, "2025-01-01", rows=200)
    first = table_health(settings, spec)
    folder = Path(urlparse(settings.warehouse).path) / "silver" / "rewritten"
    on_disk = lambda: sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())  # noqa: E731
    assert first.stored_bytes == on_disk() and first.stored_bytes > first.data_bytes > 0
    assert first.storage_amplification == round(first.stored_bytes / first.data_bytes, 3)

    for n in range(1, 6):  # the day replaced five times: every replaced file stays for time travel
        lake.sql(f"INSERT OVERWRITE {table} SELECT id + {n}, day FROM {table}")
    kept = table_health(settings, spec)
    assert kept.stored_bytes == on_disk() and kept.storage_amplification > first.storage_amplification
    assert kept.status == Severity.WARN
    assert any(r.startswith("WARN: storage amplification") and r.endswith("> 2x") for r in kept.reasons)
    assert {"stored_bytes", "storage_amplification"} <= set(kept.figures())

    expire_snapshots(lake, settings.catalog, spec, older_than=dt.datetime.now(dt.UTC), retain_last=1)
    expired = table_health(settings, spec)
    assert expired.stored_bytes == on_disk() < kept.stored_bytes
    assert expired.storage_amplification < kept.storage_amplification  # the metadata of 1 KB files stays above 2x
