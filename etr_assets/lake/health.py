"""Table health from metadata only (pyiceberg, no data file, no JVM), so sensors and checks answer in milliseconds;
the figures and thresholds: docs/maintenance.md."""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from etr_assets.lake.metadata import load_table, snapshot_row_count
from etr_assets.lake.quality import Severity
from etr_assets.lake.s3_costs import amplification, stored_bytes
from etr_assets.lake.specs import MIB, TableSpec
from etr_assets.settings import Settings

SMALL_FILE_RATIO = 0.75  # rewrite_data_files' default min-file-size-bytes is 75% of the target size
_FIGURES = (  # what figures() reports
    "rows data_files data_bytes average_file_bytes small_files small_file_share mergeable_small_files "
    "mergeable_small_file_share partitions delete_files snapshots oldest_snapshot_age_days manifests "
    "metadata_file_bytes stored_bytes storage_amplification"
).split()


@dataclasses.dataclass(frozen=True)
class TableHealth:
    table: str
    exists: bool
    status: Severity = Severity.OK
    reasons: tuple[str, ...] = ()  # one per threshold passed, naming the figure and the limit
    rows: int | None = 0  # metadata.row_count's; None when metadata cannot tell (`rows_unknown` says why)
    rows_unknown: str = ""
    data_files: int = 0
    data_bytes: int = 0
    average_file_bytes: int = 0
    small_files: int = 0
    small_file_share: float = 0.0
    mergeable_small_files: int = 0
    mergeable_small_file_share: float = 0.0
    small_file_bytes: int = 0
    partitions: int = 0
    delete_files: int = 0
    snapshots: int = 0
    oldest_snapshot_age_days: float = 0.0
    manifests: int = 0
    metadata_file_bytes: int = 0
    stored_bytes: int = 0  # every file under the table's location: live, kept for time travel, orphaned
    storage_amplification: float | None = None  # stored bytes / the current snapshot's data and delete file bytes
    current_snapshot_id: int | None = None
    target_file_bytes: int = 0
    measured_seconds: float = 0.0

    @property
    def needs_maintenance(self) -> bool:
        return self.exists and self.status != Severity.OK

    def figures(self) -> dict[str, float]:
        """The numeric figures, by name (what a check plots and the maintenance log keeps); rows only when known."""
        return {name: getattr(self, name) for name in _FIGURES if getattr(self, name) is not None}

    def describe(self) -> str:
        if not self.exists:
            return f"{self.table}: not created yet"
        detail = "; ".join(self.reasons) if self.reasons else "within every threshold"
        return f"{self.table}: {self.status} ({detail})"


def table_health(settings: Settings, spec: TableSpec, now: dt.datetime | None = None) -> TableHealth:
    """Measure `spec`'s table from its metadata and judge it against `spec.health`."""
    started = time.perf_counter()
    if (table := load_table(settings, spec)) is None:
        return TableHealth(spec.identifier, exists=False)
    now = now or dt.datetime.now(dt.UTC)
    metadata, snapshot = table.metadata, table.current_snapshot()
    # a manifest whose entries are all deleted is skipped by planning: not counted
    manifests = (
        [m for m in snapshot.manifests(table.io) if m.has_added_files() or m.has_existing_files()] if snapshot else []
    )
    small_limit = int(spec.target_file_size_bytes * SMALL_FILE_RATIO)
    with ThreadPoolExecutor(max_workers=min(8, max(1, len(manifests)))) as pool:
        read = list(pool.map(lambda m: _manifest_figures(table.io, m, small_limit), manifests))
    small_by_partition = sum((f.small_by_partition for f in read), Counter())
    data_files, data_bytes = sum(f.data_files for f in read), sum(f.data_bytes for f in read)
    delete_files, delete_bytes = sum(f.delete_files for f in read), sum(f.delete_bytes for f in read)
    small_bytes, partitions = sum(f.small_bytes for f in read), frozenset().union(*(f.partitions for f in read))
    small = sum(small_by_partition.values())
    mergeable = sum(count - 1 for count in small_by_partition.values())
    oldest_ms = min((s.timestamp_ms for s in metadata.snapshots), default=None)
    rows, stored = snapshot_row_count(table, snapshot), stored_bytes(table)
    health = TableHealth(
        table=spec.identifier,
        exists=True,
        rows=rows.rows,
        rows_unknown=rows.unknown,
        data_files=data_files,
        data_bytes=data_bytes,
        average_file_bytes=data_bytes // data_files if data_files else 0,
        small_files=small,
        small_file_share=small / data_files if data_files else 0.0,
        mergeable_small_files=mergeable,
        mergeable_small_file_share=mergeable / data_files if data_files else 0.0,
        small_file_bytes=small_bytes,
        partitions=len(partitions),
        delete_files=delete_files,
        snapshots=len(metadata.snapshots),
        oldest_snapshot_age_days=(now.timestamp() * 1000 - oldest_ms) / 86_400_000 if oldest_ms else 0.0,
        manifests=len(manifests),
        metadata_file_bytes=len(table.io.new_input(table.metadata_location)) if table.metadata_location else 0,
        stored_bytes=stored,
        storage_amplification=amplification(stored, data_bytes + delete_bytes),
        current_snapshot_id=snapshot.snapshot_id if snapshot else None,
        target_file_bytes=spec.target_file_size_bytes,
    )
    status, reasons = judge(spec, health)
    return dataclasses.replace(health, status=status, reasons=reasons, measured_seconds=time.perf_counter() - started)


@dataclasses.dataclass(frozen=True)
class _ManifestFigures:
    """What health counts in one manifest's live entries."""

    data_files: int
    data_bytes: int
    delete_files: int
    delete_bytes: int
    small_bytes: int
    small_by_partition: Counter  # (spec id, partition) -> small data files
    partitions: frozenset


# A manifest never changes once written: each is read once per process (the health sensor's code server reads every
# table each day, and between two readings a table gains a manifest or two of up to 8 kept per kind).
_MANIFESTS_KEPT = 4096
_read_manifests: dict[tuple[str, int], _ManifestFigures] = {}  # emptied when full


def _manifest_figures(io, manifest, small_limit: int) -> _ManifestFigures:
    from pyiceberg.manifest import ManifestContent

    key = (manifest.manifest_path, small_limit)
    if (known := _read_manifests.get(key)) is not None:
        return known
    data = manifest.content == ManifestContent.DATA
    files = size = small_bytes = 0
    small_by_partition: Counter = Counter()
    partitions = set()
    for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
        file = entry.data_file
        files, size = files + 1, size + file.file_size_in_bytes
        if data:
            partition = (manifest.partition_spec_id, tuple(file.partition[i] for i in range(len(file.partition))))
            partitions.add(partition)
            if file.file_size_in_bytes < small_limit:
                small_by_partition[partition] += 1
                small_bytes += file.file_size_in_bytes
    deletes = (0, 0) if data else (files, size)
    counted = (files, size) if data else (0, 0)
    figures = _ManifestFigures(*counted, *deletes, small_bytes, small_by_partition, frozenset(partitions))
    if len(_read_manifests) >= _MANIFESTS_KEPT:
        _read_manifests.clear()
    _read_manifests[key] = figures
    return figures


def retained_snapshots(spec: TableSpec) -> int:
    """Snapshots expire_snapshots always keeps (the spec's history.expire.min-snapshots-to-keep)."""
    return int(spec.table_properties["history.expire.min-snapshots-to-keep"])


def judge(spec: TableSpec, health: TableHealth) -> tuple[str, tuple[str, ...]]:
    """OK, WARN or ERROR, with one reason per threshold passed (figure, value and limit named)."""
    limits = spec.health
    findings: list[tuple[str, str]] = []

    def over(figure: str, value: float, limit: float, unit: str = "", errors: bool = True) -> None:
        if value <= limit:
            return
        level = Severity.ERROR if errors and value > limit * limits.error_factor else Severity.WARN
        findings.append((level, f"{figure} {value:g}{unit} > {limit:g}{unit}"))

    worth_merging = (
        health.mergeable_small_files >= limits.min_mergeable_small_files
        or health.small_file_bytes >= health.target_file_bytes
    )
    if worth_merging:  # a few tiny files of a new table: nothing compaction would improve
        share = round(health.mergeable_small_file_share, 3)
        over("mergeable small-file share", share, limits.max_small_file_share, errors=False)
    over("delete files", health.delete_files, limits.max_delete_files)
    # Expiry removes snapshots past the retention age beyond the newest it always keeps: until one is, maintenance
    # cannot lower the count (a table committed to 20 times a day keeps 140 for a 7-day retention).
    retention_days = int(spec.table_properties["history.expire.max-snapshot-age-ms"]) / 86_400_000
    if health.snapshots > retained_snapshots(spec) and health.oldest_snapshot_age_days > retention_days:
        over("snapshots", health.snapshots, limits.max_snapshots)
    if health.snapshots > retained_snapshots(spec):  # expiry keeps that many, however old: nothing to fix below it
        over("oldest snapshot age", round(health.oldest_snapshot_age_days, 1), limits.max_snapshot_age_days, " days")
    over("manifests", health.manifests, limits.max_manifests)
    over("metadata file", round(health.metadata_file_bytes / MIB, 2), limits.max_metadata_file_mb, " MB")
    kept_beyond_live = health.stored_bytes - health.stored_bytes / (health.storage_amplification or 1)
    if health.storage_amplification and kept_beyond_live >= health.target_file_bytes:
        over("storage amplification", health.storage_amplification, limits.max_storage_amplification, "x", False)
    status = max((level for level, _ in findings), key=list(Severity).index, default=Severity.OK)
    return status, tuple(f"{level}: {text}" for level, text in findings)
