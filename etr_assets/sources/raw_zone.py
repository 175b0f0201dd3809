"""The raw zone: API responses as they arrived, a folder per batch, state markers written last so a crash loses
nothing, and an index of open batches so a day's cost does not grow with all batches ever (docs/raw-zone.md)."""

from __future__ import annotations

import abc
import dataclasses
import datetime as dt
import json
import os
import secrets
import tempfile
from pathlib import Path

from etr_assets.errors import RawZoneError

PENDING, MANIFEST, COMPLETE = ".pending", "_manifest.json", ".complete"
OPEN_INDEX = "_pending"  # {source}/{endpoint}/_pending/{batch_id}: one empty entry per batch not yet complete
INDEX_BUILT = "_index.json"  # in OPEN_INDEX: every open batch has its entry (written once, by `rebuild_index`)
ABANDONED = "abandoned"  # the outcome of a batch closed by hand without loading it


class RawStorage(abc.ABC):
    """Where raw files live: a local folder here; S3 in the `s3` and `aws` profiles."""

    @abc.abstractmethod
    def write_bytes(self, key: str, data: bytes) -> None: ...

    @abc.abstractmethod
    def read_bytes(self, key: str) -> bytes: ...

    @abc.abstractmethod
    def exists(self, key: str) -> bool: ...

    @abc.abstractmethod
    def list_children(self, prefix: str, starting: str = "") -> list[str]:
        """Names directly under ``prefix`` (folders and files) that start with ``starting``, sorted."""

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key`` if there: only index entries (raw files and a batch's markers are never deleted)."""

    def touch(self, key: str) -> None:
        """An empty object at ``key`` (an index entry, whose name is all it says)."""
        self.write_bytes(key, b"")

    @abc.abstractmethod
    def uri(self, key: str) -> str:
        """What Spark reads for ``key``."""


class LocalStorage(RawStorage):
    def __init__(self, root: str | Path):
        self.root = Path(root)

    def write_bytes(self, key: str, data: bytes) -> None:
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write then rename: a reader never sees half a file, even if the process dies mid-write.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def read_bytes(self, key: str) -> bytes:
        try:
            return (self.root / key).read_bytes()
        except FileNotFoundError:
            raise RawZoneError(f"raw file {(self.root / key)} does not exist") from None

    def exists(self, key: str) -> bool:
        return (self.root / key).exists()

    def touch(self, key: str) -> None:
        # An empty file cannot be seen half-written: created in place, it is there whole or not at all.
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def delete(self, key: str) -> None:
        (self.root / key).unlink(missing_ok=True)

    def list_children(self, prefix: str, starting: str = "") -> list[str]:
        folder = self.root / prefix
        if not folder.is_dir():
            return []
        return sorted(
            p.name for p in folder.iterdir() if p.name.startswith(starting) and not p.name.startswith(".tmp-")
        )

    def uri(self, key: str) -> str:
        return str(self.root / key)


@dataclasses.dataclass(frozen=True)
class Batch:
    source: str
    endpoint: str
    batch_id: str

    @property
    def key(self) -> str:
        return f"{self.source}/{self.endpoint}/{self.batch_id}"

    @property
    def day(self) -> dt.date:
        return dt.date.fromisoformat(self.batch_id[:10])


def batch_day_of_file(uri):
    """`Batch.day` of a batch's file, as a Spark Column of the file's URI (a Column): its folder is the batch id."""
    from pyspark.sql import functions as F

    return F.to_date(F.substring(F.element_at(F.split(uri, "/"), -2), 1, 10))


@dataclasses.dataclass(frozen=True)
class BatchManifest:
    files: tuple[str, ...]
    records: int
    fetched_at: str


@dataclasses.dataclass(frozen=True)
class OpenBatch:
    batch: Batch
    sealed: bool  # False: the download never finished, the day must be fetched again
    age: dt.timedelta
    run_id: str | None = None  # the run that started it (the Dagster run id its fetch was given), if recorded


class RawZone:
    def __init__(self, storage: RawStorage):
        self.storage = storage

    def start_batch(
        self, source: str, endpoint: str, day: dt.date, now: dt.datetime | None = None, run_id: str | None = None
    ) -> Batch:
        """A new pending batch of `day`; `run_id`: the run fetching it, recorded in `.pending` (see `open_batches`)."""
        now = now or dt.datetime.now(dt.UTC)
        batch = Batch(source, endpoint, f"{day.isoformat()}_{now:%Y%m%dT%H%M%S%fZ}_{secrets.token_hex(3)}")
        # Indexed before anything of it exists: a crash leaves a batch `pending()` finds, or nothing at all.
        self.storage.touch(_index_key(batch))
        marker = {"started_at": now.isoformat(), "day": day.isoformat(), **({"run_id": run_id} if run_id else {})}
        self.storage.write_bytes(f"{batch.key}/{PENDING}", json.dumps(marker).encode())
        return batch

    def write_lines(self, batch: Batch, number: int, lines: list[str]) -> str:
        """One JSON-lines part file holding `lines` (each one record's text, no line break) as given."""
        name = f"part-{number:05d}.jsonl"
        self.storage.write_bytes(f"{batch.key}/{name}", "".join(line + "\n" for line in lines).encode("utf-8"))
        return name

    def seal(self, batch: Batch, files: list[str], records: int) -> BatchManifest:
        manifest = BatchManifest(tuple(files), records, dt.datetime.now(dt.UTC).isoformat())
        self.storage.write_bytes(f"{batch.key}/{MANIFEST}", json.dumps(dataclasses.asdict(manifest)).encode())
        return manifest

    def mark_complete(self, batch: Batch, detail: dict | None = None) -> None:
        info = {"completed_at": dt.datetime.now(dt.UTC).isoformat(), **(detail or {})}
        self.storage.write_bytes(f"{batch.key}/{COMPLETE}", json.dumps(info).encode())
        # Unindexed only once .complete is written: a crash in between leaves an entry `pending()` removes.
        self.storage.delete(_index_key(batch))

    def settle(self, batch: Batch, detail: dict) -> None:
        """After `batch` is committed: mark it complete, and older pending batches of its day (folders and index
        entries: a crash can leave an entry with no folder) as superseded."""
        entries = self.storage.list_children(_index_folder(batch.source, batch.endpoint), f"{batch.day.isoformat()}_")
        indexed = {Batch(batch.source, batch.endpoint, name) for name in entries if _looks_like_batch(name)}
        day_batches = set(self.batches(batch.source, batch.endpoint, batch.day)) | indexed
        for older in sorted(day_batches, key=lambda b: b.batch_id):
            if older.batch_id < batch.batch_id and not self.is_complete(older):
                state = "superseded" if self.manifest(older) is not None else "abandoned (download never finished)"
                self.mark_complete(older, {**detail, "outcome": state, "superseded_by": batch.batch_id})
        if not self.is_complete(batch):
            self.mark_complete(batch, {**detail, "outcome": "loaded"})

    def abandon(self, batch: Batch, reason: str, detail: dict | None = None) -> None:
        """Close a pending batch without loading it (kept as evidence, never chosen for its day again)."""
        if self.is_complete(batch):
            raise RawZoneError(
                f"raw batch {batch.key} is not pending (already {self.outcome(batch)}): nothing to abandon"
            )
        self.mark_complete(batch, {**(detail or {}), "outcome": ABANDONED, "reason": reason})

    def outcome(self, batch: Batch) -> str | None:
        """How a complete batch was closed (loaded, superseded, abandoned...); None while pending."""
        if not self.is_complete(batch):
            return None
        return json.loads(self.storage.read_bytes(f"{batch.key}/{COMPLETE}")).get("outcome", "loaded")

    def pending(self, source: str, endpoint: str) -> list[Batch]:
        """Batches not yet committed (sealed or not), oldest first, from the index of open batches (built first,
        once, where `_index.json` is missing); an entry whose batch is complete is removed here."""
        folder = _index_folder(source, endpoint)
        names = self.storage.list_children(folder)
        if INDEX_BUILT not in names:
            self.rebuild_index(source, endpoint)
            names = self.storage.list_children(folder)
        found = []
        for batch in (Batch(source, endpoint, name) for name in names if _looks_like_batch(name)):
            if self.is_complete(batch):
                self.storage.delete(_index_key(batch))
            else:
                found.append(batch)
        return found

    def rebuild_index(self, source: str, endpoint: str) -> int:
        """Index every batch of the endpoint that is not complete, then write `_index.json`; returns how many.
        Safe alongside running loads: it only adds entries, and `pending()` removes those of complete batches."""
        open_batches = [b for b in self.batches(source, endpoint) if not self.is_complete(b)]
        for batch in open_batches:
            self.storage.touch(_index_key(batch))
        built = {"built_at": dt.datetime.now(dt.UTC).isoformat(), "open_batches": len(open_batches)}
        self.storage.write_bytes(f"{_index_folder(source, endpoint)}/{INDEX_BUILT}", json.dumps(built).encode())
        return len(open_batches)

    def open_batches(
        self, source: str, endpoint: str, now: dt.datetime, older_than: dt.timedelta = dt.timedelta(0)
    ) -> list[OpenBatch]:
        """Pending batches started at least `older_than` ago, oldest first: whether each one's download finished,
        its age and the run that started it (read from the index and each open batch's markers)."""
        found = []
        for batch in self.pending(source, endpoint):
            pending = f"{batch.key}/{PENDING}"  # a crash can come before this marker is written
            marker = json.loads(self.storage.read_bytes(pending)) if self.storage.exists(pending) else {}
            age, run_id = now - self._started_at(batch, marker), marker.get("run_id") or None
            if age >= older_than:
                found.append(OpenBatch(batch, sealed=self.manifest(batch) is not None, age=age, run_id=run_id))
        return found

    def stale(self, source: str, endpoint: str, now: dt.datetime, older_than: dt.timedelta) -> list[OpenBatch]:
        """Pending batches started longer ago than `older_than`: a load that failed or never ran."""
        return self.open_batches(source, endpoint, now, older_than)

    @staticmethod
    def _started_at(batch: Batch, marker: dict) -> dt.datetime:
        """When the batch started: from its .pending marker, else from its id (a crash can precede the marker)."""
        if "started_at" in marker:
            return dt.datetime.fromisoformat(marker["started_at"])
        return dt.datetime.strptime(batch.batch_id.split("_")[1], "%Y%m%dT%H%M%S%fZ").replace(tzinfo=dt.UTC)

    def batches(self, source: str, endpoint: str, day: dt.date | None = None) -> list[Batch]:
        """The batch folders of an endpoint (of one `day`: by its name prefix; else all, for erasure), oldest first."""
        names = self.storage.list_children(f"{source}/{endpoint}", f"{day.isoformat()}_" if day else "")
        found = [Batch(source, endpoint, name) for name in names if _looks_like_batch(name)]
        return [b for b in found if day is None or b.day == day]

    def manifest(self, batch: Batch) -> BatchManifest | None:
        if not self.storage.exists(f"{batch.key}/{MANIFEST}"):
            return None
        raw = json.loads(self.storage.read_bytes(f"{batch.key}/{MANIFEST}"))
        return BatchManifest(tuple(raw["files"]), int(raw["records"]), raw["fetched_at"])

    def is_complete(self, batch: Batch) -> bool:
        return self.storage.exists(f"{batch.key}/{COMPLETE}")

    def latest_sealed(self, source: str, endpoint: str, day: dt.date) -> Batch | None:
        """The newest fully downloaded batch of a day: the one that defines that day's records."""
        for batch in reversed(self.batches(source, endpoint, day)):
            if self.manifest(batch) is not None and (not self.is_complete(batch) or self.outcome(batch) != ABANDONED):
                return batch
        return None

    def uncommitted(self, source: str, endpoint: str, day: dt.date) -> list[Batch]:
        """Downloaded batches of a day not yet committed to Iceberg, oldest first."""
        return [
            b for b in self.batches(source, endpoint, day) if self.manifest(b) is not None and not self.is_complete(b)
        ]

    def file_uris(self, batch: Batch) -> list[str]:
        if (manifest := self.manifest(batch)) is None:
            raise RawZoneError(f"raw batch {batch.key} has no {MANIFEST}: its download did not finish")
        return [self.storage.uri(f"{batch.key}/{name}") for name in manifest.files]


def _index_folder(source: str, endpoint: str) -> str:
    return f"{source}/{endpoint}/{OPEN_INDEX}"


def _index_key(batch: Batch) -> str:
    return f"{_index_folder(batch.source, batch.endpoint)}/{batch.batch_id}"


def _looks_like_batch(name: str) -> bool:
    try:
        dt.date.fromisoformat(name[:10])
    except ValueError:
        return False
    return name[10:11] == "_"


def local_raw_zone(root: str | Path) -> RawZone:
    return RawZone(LocalStorage(root))
