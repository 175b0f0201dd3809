"""Erasing data subjects from the raw zone, and finding them there: a line names a subject when its JSON holds the
subject field with that id at any depth, or the text pattern finds it. Markers are never touched."""

from __future__ import annotations

import dataclasses
import json
import re

from etr_assets.sources.raw_zone import COMPLETE, MANIFEST, PENDING, RawZone

_MARKERS = {PENDING, MANIFEST, COMPLETE}


def id_field_pattern(field: str) -> str:
    """A JSON field holding an id, as number or digit string (also the SQL regex for quarantined raw text)."""
    return rf'"{re.escape(field)}"\s*:\s*"?(\d+)'


@dataclasses.dataclass(frozen=True)
class RawFeedSubject:
    source: str
    endpoint: str
    field: str  # the record field naming the subject


@dataclasses.dataclass(frozen=True)
class RawErasure:
    files_rewritten: tuple[str, ...]  # uris
    removed: dict[int, int]  # customer id -> records removed
    manifests_updated: int

    @property
    def records_removed(self) -> int:
        return sum(self.removed.values())


def _raw_files(raw: RawZone, feed: RawFeedSubject, batch_keys=None):
    """(batch, file name) of every data file of the feed's batch folders (or of `batch_keys`)."""
    for batch in raw.batches(feed.source, feed.endpoint):
        if batch_keys is not None and batch.key not in batch_keys:
            continue
        for name in raw.storage.list_children(batch.key):
            if name not in _MARKERS:
                yield batch, name


def _as_id(value) -> int | None:
    """An id as a JSON reader would take it: an integer, an integral number, or digit text."""
    if (isinstance(value, float) and value.is_integer()) or (isinstance(value, str) and value.strip().isdigit()):
        return int(value)
    return value if type(value) is int else None  # bool is an int subclass: not an id


def _parsed_ids(line: bytes, field: str) -> set[int]:
    """Ids held by `field` anywhere in the line's JSON (escapes decoded, nested objects and lists included)."""
    try:
        document = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return set()
    found, stack = set(), [document]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key == field and (named := _as_id(value)) is not None:
                    found.add(named)
                stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _lines_naming(lines: list[bytes], ids: set[int], field: str) -> dict[int, list[int]]:
    """Line indexes naming each id: the parsed JSON's field, or the text pattern (for lines that are not JSON)."""
    pattern, found = re.compile(id_field_pattern(field).encode()), {}
    for index, line in enumerate(lines):
        named = {int(m) for m in pattern.findall(line)} | (_parsed_ids(line, field) if line.strip() else set())
        for customer_id in named & ids:
            found.setdefault(customer_id, []).append(index)
    return found


def erase_raw_records(raw: RawZone, customer_ids, feeds: tuple[RawFeedSubject, ...], batch_keys=None) -> RawErasure:
    """Rewrite each raw file naming a customer without those lines (atomically), then lower its batch manifest's
    record count (after the files: a crash between leaves the data erased). `batch_keys`: only those batches."""
    ids, rewritten, removed, manifests = set(customer_ids), [], {}, 0  # removed: customer id -> records
    for feed in feeds:
        dropped_by_batch: dict = {}  # batch -> records removed from the files its manifest lists
        for batch, name in _raw_files(raw, feed, batch_keys):
            key = f"{batch.key}/{name}"
            lines = raw.storage.read_bytes(key).splitlines(keepends=True)
            if not (found := _lines_naming(lines, ids, feed.field)):
                continue
            drop = {i for indexes in found.values() for i in indexes}
            raw.storage.write_bytes(key, b"".join(line for i, line in enumerate(lines) if i not in drop))
            rewritten.append(raw.storage.uri(key))
            for customer_id, indexes in found.items():
                removed[customer_id] = removed.get(customer_id, 0) + len(indexes)
            if (manifest := raw.manifest(batch)) is not None and name in manifest.files:
                dropped_by_batch[batch] = dropped_by_batch.get(batch, 0) + sum(1 for i in drop if lines[i].strip())
        for batch, count in dropped_by_batch.items():
            manifest = raw.manifest(batch)
            fixed = dataclasses.replace(manifest, records=max(0, manifest.records - count))
            raw.storage.write_bytes(f"{batch.key}/{MANIFEST}", json.dumps(dataclasses.asdict(fixed)).encode())
            manifests += 1
    return RawErasure(tuple(rewritten), removed, manifests)


def find_raw_records(raw: RawZone, ids, feeds: tuple[RawFeedSubject, ...]) -> tuple[int, dict[str, dict[int, int]]]:
    """(files scanned, {uri: {id: lines}}) over every file of every batch of the feeds."""
    wanted, scanned, found = set(ids), 0, {}
    for feed in feeds:
        for batch, name in _raw_files(raw, feed):
            key = f"{batch.key}/{name}"
            scanned += 1
            if hits := _lines_naming(raw.storage.read_bytes(key).splitlines(), wanted, feed.field):
                found[raw.storage.uri(key)] = {i: len(lines) for i, lines in hits.items()}
    return scanned, found
