"""Light reads of table metadata through pyiceberg (no JVM), where nothing needs computing: `etr tables`, run
summaries, health checks and sensors."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol
from urllib.parse import urlparse

from etr_assets.errors import MetadataUnreadable
from etr_assets.lake.s3_costs import amplification, stored_bytes
from etr_assets.lake.specs import TableSpec
from etr_assets.settings import Profile, Settings

if TYPE_CHECKING:
    from pyiceberg.table.snapshots import Operation


@dataclasses.dataclass(frozen=True)
class RowCount:
    """The rows `SELECT count(*)` returns, from metadata; `rows` is None when it cannot tell (`unknown`: why)."""

    rows: int | None
    unknown: str = ""

    def __str__(self) -> str:
        return f"{self.rows:,}" if self.rows is not None else f"unknown ({self.unknown})"


@dataclasses.dataclass(frozen=True)
class PositionDeleteFile:  # a live position-delete file of a snapshot, as the row count needs it
    records: int  # the positions it deletes
    deletion_vector: bool  # a format v3 deletion vector (a Puffin blob), rather than a Parquet/Avro/ORC file
    data_file: str | None  # the one data file its positions are in; None for a partition-scoped file


class SnapshotFiles(Protocol):
    """A snapshot's live files from its manifests: pyiceberg's here, the Java API's in `lake.writes`."""

    def position_delete_files(self) -> Iterable[PositionDeleteFile]: ...

    def data_file_paths(self) -> Iterable[str]: ...


EQUALITY_DELETES_UNKNOWN = "equality deletes: which rows they match only reading the table tells"
PARTITION_SCOPED_UNKNOWN = (
    "partition-scoped position deletes: whether their data files were all since rewritten only reading them tells"
)


def row_count(summary: Mapping[str, str], files: SnapshotFiles) -> RowCount:
    """The rows a `SELECT count(*)` of the snapshot returns, from its summary and, with position deletes, its
    manifests (why it is exact, and when it cannot tell: docs/quality-and-health.md#row-counts-from-metadata)."""
    num = lambda key: int(summary.get(key, 0) or 0)
    if num("total-equality-deletes"):
        return RowCount(None, EQUALITY_DELETES_UNKNOWN)
    if deleted := num("total-position-deletes"):
        delete_files = [f for f in files.position_delete_files() if not f.deletion_vector]
        if any(f.data_file is None for f in delete_files):
            return RowCount(None, PARTITION_SCOPED_UNKNOWN)
        if delete_files:
            live = set(files.data_file_paths())
            deleted -= sum(f.records for f in delete_files if f.data_file not in live)
    return RowCount(num("total-records") - deleted)


# Iceberg's reserved field id of a position-delete file's `file_path` column (its bounds name the data files).
_PATH_ID = 2147483546


class PyIcebergSnapshotFiles:
    """`SnapshotFiles` of a pyiceberg table's snapshot (its manifests are read only when asked)."""

    def __init__(self, table, snapshot) -> None:
        self._table, self._snapshot = table, snapshot

    def _live_files(self, content):
        for manifest in self._snapshot.manifests(self._table.io) if self._snapshot else ():
            if manifest.content == content:
                for entry in manifest.fetch_manifest_entry(self._table.io, discard_deleted=True):
                    yield entry.data_file

    def position_delete_files(self) -> Iterable[PositionDeleteFile]:
        from pyiceberg.manifest import DataFileContent, FileFormat, ManifestContent

        for file in self._live_files(ManifestContent.DELETES):
            if file.content == DataFileContent.POSITION_DELETES:
                # The data file it is scoped to: its `file_path` bounds are equal (Iceberg's own test,
                # `ContentFileUtil.referencedDataFile`; pyiceberg does not read the v3 `referenced_data_file` field).
                lower, upper = (file.lower_bounds or {}).get(_PATH_ID), (file.upper_bounds or {}).get(_PATH_ID)
                scoped = lower.decode() if lower is not None and lower == upper else None
                yield PositionDeleteFile(file.record_count, file.file_format == FileFormat.PUFFIN, scoped)

    def data_file_paths(self) -> Iterable[str]:
        from pyiceberg.manifest import ManifestContent

        return (file.file_path for file in self._live_files(ManifestContent.DATA))


def snapshot_row_count(table, snapshot=None) -> RowCount:
    """`row_count` of a pyiceberg table's snapshot (default: the current one; a table never written has 0 rows)."""
    snapshot = snapshot or table.current_snapshot()
    summary = snapshot.summary.additional_properties if snapshot and snapshot.summary else {}
    return row_count(summary, PyIcebergSnapshotFiles(table, snapshot))


@dataclasses.dataclass(frozen=True)
class TableStats:
    table: str
    exists: bool
    rows: int | None = 0  # None: metadata cannot tell (`rows_unknown` says why)
    rows_unknown: str = ""
    snapshots: int = 0
    data_files: int = 0
    delete_files: int = 0
    bytes: int = 0  # the current snapshot's data and delete files
    stored_bytes: int = 0  # every file under the table's location (expired snapshots' files until expiry deletes them)
    amplification: float | None = None  # stored_bytes / bytes; None for an empty table
    current_snapshot_id: int | None = None
    last_updated: dt.datetime | None = None  # the metadata's last change: a write, or only maintenance or an ALTER
    last_write: dt.datetime | None = None  # when the current snapshot was committed; None: never written
    location: str = ""
    has_spec: bool = True  # False: a table someone made in the catalog that no spec of the project declares
    problem: str = ""  # why the table could not be read (it exists, but its metadata is damaged or missing)


class TableName(NamedTuple):
    """A table of the catalog by name, for tables that have no spec (anything with namespace and name works)."""

    namespace: str
    name: str

    @property
    def identifier(self) -> str:
        return f"{self.namespace}.{self.name}"


_VERSION_FILE = re.compile(r"^v(\d+)\.metadata\.json$")


def catalog_tables(settings: Settings) -> list[TableName]:
    """Every table the profile's catalog holds, whatever made it."""
    if settings.profile == Profile.LOCAL:  # folders of the warehouse with metadata
        root = Path(urlparse(settings.warehouse).path)
        return sorted(TableName(p.parent.parent.name, p.parent.name) for p in root.glob("*/*/metadata") if p.is_dir())
    found = catalog(settings)
    return sorted(TableName(ns[-1], name) for ns in found.list_namespaces() for _, name in found.list_tables(ns))


def load_table(settings: Settings, spec: TableSpec | TableName):
    """The pyiceberg table of a spec or TableName; None if never created; MetadataUnreadable if unreadable."""
    if settings.profile == Profile.LOCAL:
        from pyiceberg.table import StaticTable

        # The Hadoop catalog's current metadata.json: its number is in metadata/version-hint.text, or, as Iceberg
        # does without a hint, the highest version present.
        folder = Path(urlparse(settings.warehouse).path) / spec.namespace / spec.name / "metadata"
        hint = folder / "version-hint.text"
        if hint.exists():
            metadata = folder / f"v{hint.read_text().strip()}.metadata.json"
            if not metadata.exists():
                raise MetadataUnreadable(
                    f"metadata file missing: {metadata} (named by {hint.name}; the table's history is damaged)"
                )
        else:  # listed only then: the hint is the normal case and `etr tables` reads every table
            files = folder.iterdir() if folder.is_dir() else ()
            found = ((int(m.group(1)), p) for p in files if (m := _VERSION_FILE.match(p.name)))
            if (metadata := max(found, default=(0, None))[1]) is None:  # never created
                return None
        try:
            return StaticTable.from_metadata(str(metadata))
        except Exception as error:  # truncated or garbled JSON, a metadata file that is not Iceberg's
            raise MetadataUnreadable(f"metadata unreadable: {metadata}: {_first_line(error)}") from error

    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog(settings).load_table((spec.namespace, spec.name))
    except NoSuchTableError:
        return None


@functools.lru_cache(maxsize=8)
def catalog(settings: Settings):
    """pyiceberg's view of the profile's catalog (s3: the JDBC catalog's database; aws: Glue), one per process and
    settings: a SqlCatalog's engine keeps its pool's connections until the garbage collector finds it, and one per
    table reading ran a benchmark's PostgreSQL out of connections. Credentials are never properties: boto3 and
    pyarrow read the environment or role."""
    s3 = {"s3.endpoint": settings.s3_endpoint, "s3.path-style-access": "true"} if settings.s3_endpoint else {}
    if settings.profile == Profile.S3:
        from pyiceberg.catalog.sql import SqlCatalog

        # jdbc:postgresql://host:port/db -> postgresql+psycopg2://user:password@host:port/db
        parsed = urlparse(settings.jdbc_url.removeprefix("jdbc:"))
        auth = settings.jdbc_user + (f":{settings.jdbc_password}" if settings.jdbc_password else "")
        netloc = f"{auth}@{parsed.netloc}" if auth else parsed.netloc
        uri = f"{parsed.scheme}+psycopg2://{netloc}{parsed.path}"
        region = {"s3.region": settings.region} if s3 else {}
        return SqlCatalog(settings.catalog, uri=uri, warehouse=settings.warehouse, **s3, **region)
    if settings.profile == Profile.AWS:
        from pyiceberg.catalog.glue import GlueCatalog

        props = {"client.region": settings.region, "warehouse": settings.warehouse, **s3}
        if settings.glue_endpoint:
            props["glue.endpoint"] = settings.glue_endpoint
        return GlueCatalog(settings.catalog, **props)
    raise ValueError("the local profile's Hadoop catalog has no pyiceberg catalog; use load_table")


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:300]


def table_stats(settings: Settings, spec: TableSpec | TableName) -> TableStats:
    has_spec = not isinstance(spec, TableName)
    try:
        table = load_table(settings, spec)
    except Exception as error:  # unreadable metadata, or a catalog answering garbage: the others still listed
        problem = str(error) if isinstance(error, MetadataUnreadable) else f"metadata unreadable: {_first_line(error)}"
        return TableStats(spec.identifier, exists=True, has_spec=has_spec, problem=problem)
    if table is None:
        return TableStats(spec.identifier, exists=False, has_spec=has_spec)
    metadata, snapshot = table.metadata, table.current_snapshot()
    summary = snapshot.summary.additional_properties if snapshot and snapshot.summary else {}
    num = lambda key: int(summary.get(key, 0) or 0)
    rows, stored = snapshot_row_count(table, snapshot), stored_bytes(table)
    return TableStats(
        table=spec.identifier,
        exists=True,
        rows=rows.rows,
        rows_unknown=rows.unknown,
        snapshots=len(metadata.snapshots),
        data_files=num("total-data-files"),
        delete_files=num("total-delete-files"),
        bytes=num("total-files-size"),
        stored_bytes=stored,
        amplification=amplification(stored, num("total-files-size")),
        current_snapshot_id=snapshot.snapshot_id if snapshot else None,
        last_updated=dt.datetime.fromtimestamp(metadata.last_updated_ms / 1000, dt.UTC),
        last_write=dt.datetime.fromtimestamp(snapshot.timestamp_ms / 1000, dt.UTC) if snapshot else None,
        location=metadata.location,
        has_spec=has_spec,
    )


def all_table_stats(settings: Settings, specs) -> list[TableStats]:
    """Every spec's table (created or not), then every other table of the catalog."""
    declared = {(s.namespace, s.name) for s in specs}
    try:
        others = [table_stats(settings, t) for t in catalog_tables(settings) if (t.namespace, t.name) not in declared]
    except Exception as error:  # the catalog cannot be listed: still report the declared tables
        problem = f"cannot list the catalog: {_first_line(error)}"
        others = [TableStats("(catalog)", exists=False, has_spec=False, problem=problem)]
    return [table_stats(settings, s) for s in specs] + others


# A table a query reads or writes: `[catalog.]namespace.name[.metadata table or branch_/tag_ ref]` after a keyword.
_TABLE_REFERENCE = re.compile(
    r"\b(?:FROM|JOIN|INTO|UPDATE|TABLE|DESCRIBE|DESC)\s+`?(\w+)`?\.`?(\w+)`?(?:\.`?(\w+)`?)?(?:\.`?(\w+)`?)?",
    re.IGNORECASE,
)


def unknown_tables(settings: Settings, query: str) -> list[tuple[str, list[str]]]:
    """Tables `query` names (`namespace.name` only) that the catalog does not hold, each with the nearest names it
    does: from metadata (no JVM), so a misspelt table fails in a moment; what the regex cannot see is left to Spark."""
    import difflib

    known = {t.identifier for t in catalog_tables(settings)}
    missing: dict[str, list[str]] = {}
    for match in _TABLE_REFERENCE.finditer(query):
        if re.search(r"\bCREATE\s+(?:OR\s+REPLACE\s+)?TABLE$", query[: match.start() + len("TABLE")], re.IGNORECASE):
            continue  # the table this statement creates
        parts = [p for p in match.groups() if p]
        parts = parts[1:] if parts[0] == settings.catalog else parts
        if len(parts) < 2:
            continue
        name = f"{parts[0]}.{parts[1]}"
        if name not in known and name not in missing:
            missing[name] = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.5)
    return list(missing.items())


@dataclasses.dataclass(frozen=True)
class MainChange:
    """One move of a table's main branch, as its snapshot log records it: `snapshot_id` became current `at_ms`. A
    commit to main moves it to the snapshot it makes; publishing a branch (a fast-forward) to the branch's head, the
    commits made on the branch coming with it; a rollback back to a snapshot committed before the one it left."""

    snapshot_id: int
    at_ms: int
    operation: Operation | None  # of the snapshot (None: it has no summary)
    committed_ms: int
    added_rows: int = 0
    removed_rows: int = 0  # rows its deletes remove: deleted-records and position deletes
    equality_deletes: int = 0  # delete records that remove the rows they match (which, only reading tells)
    rollback: bool = False
    records_before: int | None = None  # total-records of the snapshot main left, and of this one (for a rollback)
    records_after: int | None = None

    @property
    def position(self) -> tuple[int, int]:
        return self.at_ms, self.snapshot_id

    @property
    def operation_name(self) -> str:
        return self.operation.value if self.operation is not None else "unknown"

    @property
    def rewrite_only(self) -> bool:
        """A rewrite that changes no rows (`replace`: compaction, manifests)."""
        from pyiceberg.table.snapshots import Operation

        return self.operation is Operation.REPLACE

    def describe(self) -> str:
        when = f"at {utc_text(self.at_ms)}"
        if self.rollback:
            known = None not in (self.records_before, self.records_after)
            records = f" (records {self.records_before:,} -> {self.records_after:,})" if known else ""
            back = f"rollback to {self.operation_name} {self.snapshot_id} of {utc_text(self.committed_ms)}"
            return f"{back} {when}{records}"
        rows = f"+{self.added_rows}/-{self.removed_rows} rows"
        if self.added_rows and self.removed_rows:  # an overwrite rewrites whole files: what it changed is the net
            rows += f", net {self.added_rows - self.removed_rows:+d}"
        if self.equality_deletes:
            rows += f", {self.equality_deletes} equality deletes"
        return f"{self.operation_name} {self.snapshot_id} {when} ({rows})"


def utc_text(ms: int) -> str:
    return f"{dt.datetime.fromtimestamp(ms / 1000, dt.UTC):%Y-%m-%d %H:%M:%S} UTC"


def main_changes(table, since: tuple[int, int] | None, first_look: int) -> list[MainChange]:
    """The moves of main after `since` (a change's `position`), oldest first, read back from the end of the snapshot
    log so only what is new is read; `since` None: the last `first_look` moves. Expired snapshots are left out."""
    metadata, log = table.metadata, table.metadata.snapshot_log
    new = []
    for index in range(len(log) - 1, -1, -1):
        entry = log[index]
        if since is None and len(new) == first_look:
            break
        if since is not None and (entry.timestamp_ms < since[0] or (entry.timestamp_ms, entry.snapshot_id) == since):
            break
        new.append(index)
    changes = []
    for index in reversed(new):
        entry = log[index]
        if (snapshot := metadata.snapshot_by_id(entry.snapshot_id)) is None:
            continue
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        num = lambda key, summary=summary: int(summary.get(key, 0) or 0)
        left = metadata.snapshot_by_id(log[index - 1].snapshot_id) if index else None
        rollback = left is not None and snapshot.timestamp_ms < left.timestamp_ms
        totals = lambda s: (
            int(s.summary.additional_properties.get("total-records", 0) or 0) if s and s.summary else None
        )
        changes.append(
            MainChange(
                snapshot_id=snapshot.snapshot_id,
                at_ms=entry.timestamp_ms,
                operation=snapshot.summary.operation if snapshot.summary else None,
                committed_ms=snapshot.timestamp_ms,
                added_rows=num("added-records"),
                removed_rows=num("deleted-records") + num("added-position-deletes"),
                equality_deletes=num("added-equality-deletes"),
                rollback=rollback,
                records_before=totals(left) if rollback else None,
                records_after=totals(snapshot) if rollback else None,
            )
        )
    return changes
