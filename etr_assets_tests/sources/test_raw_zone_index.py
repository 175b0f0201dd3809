"""The index of open batches: what a day's raw-zone reads cost does not grow with the batches ever fetched.

Every test runs twice: on the local disk and on S3 (moto's real HTTP server). The storage is wrapped to count the
calls `RawZone` makes; on S3 the HTTP requests are counted too, with list pages of 10 keys so that a listing of
every batch would show up as more requests.
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import uuid

import pytest

from etr_assets.errors import RawZoneError
from etr_assets.sources.raw_zone import (
    COMPLETE,
    INDEX_BUILT,
    MANIFEST,
    OPEN_INDEX,
    PENDING,
    LocalStorage,
    RawStorage,
    RawZone,
)
from etr_assets.sources.s3_storage import S3Storage
from etr_assets_tests.infra import aws_test_env, create_bucket, s3_client
from etr_assets_tests.sources.raw_parts import write_part

REGION = "ap-southeast-5"
SOURCE = "bnpl"
TODAY = dt.date(2026, 3, 1)
NOW = dt.datetime(2026, 3, 2, 2, 0, tzinfo=dt.UTC)


class CountingStorage(RawStorage):
    """A storage that counts the calls made to it (and can be told to fail one kind of write, as a crash would)."""

    def __init__(self, inner: RawStorage):
        self.inner = inner
        self.calls: collections.Counter[str] = collections.Counter()
        self.fail_on: tuple[str, str] | None = None  # (method, key suffix): raise there, once

    def _call(self, method: str, key: str) -> None:
        self.calls[method] += 1
        if self.fail_on and self.fail_on[0] == method and key.endswith(self.fail_on[1]):
            self.fail_on = None
            raise RawZoneError(f"simulated crash: {method} {key}")

    def write_bytes(self, key: str, data: bytes) -> None:
        self._call("write_bytes", key)
        self.inner.write_bytes(key, data)

    def touch(self, key: str) -> None:
        self._call("touch", key)
        self.inner.touch(key)

    def delete(self, key: str) -> None:
        self._call("delete", key)
        self.inner.delete(key)

    def read_bytes(self, key: str) -> bytes:
        self._call("read_bytes", key)
        return self.inner.read_bytes(key)

    def exists(self, key: str) -> bool:
        self._call("exists", key)
        return self.inner.exists(key)

    def list_children(self, prefix: str, starting: str = "") -> list[str]:
        self._call("list_children", prefix)
        return self.inner.list_children(prefix, starting)

    def uri(self, key: str) -> str:
        return self.inner.uri(key)


class Zone:
    """A raw zone on one storage, with its call counts (and, on S3, its HTTP requests by operation)."""

    def __init__(self, inner: RawStorage, client=None):
        self.storage = CountingStorage(inner)
        self.raw = RawZone(self.storage)
        self.requests: collections.Counter[str] = collections.Counter()
        if client is not None:
            client.meta.events.register("before-call.s3", self._request)

    def _request(self, model, **_):
        self.requests[model.name] += 1

    def cost(self, action) -> tuple[object, dict[str, int], dict[str, int]]:
        """What `action()` returns, the storage calls it made and the S3 requests it sent."""
        self.storage.calls.clear()
        self.requests.clear()
        result = action()
        return result, dict(self.storage.calls), dict(self.requests)


@pytest.fixture(params=["local", "s3"])
def zone(request, tmp_path, monkeypatch):
    """A fresh raw zone: a folder, or a bucket on moto (list pages of 10 keys)."""
    if request.param == "local":
        return Zone(LocalStorage(tmp_path / "raw"))
    for name, value in aws_test_env(REGION).items():
        monkeypatch.setenv(name, value)
    client = s3_client(request.getfixturevalue("moto_endpoint"), REGION)
    bucket = f"etr-raw-{uuid.uuid4().hex[:12]}"
    create_bucket(client, bucket)
    return Zone(S3Storage(client, bucket, page_size=10), client)


def completed_batches(raw: RawZone, endpoint: str, count: int) -> None:
    """`count` batches, one a day before TODAY's week, downloaded and loaded: a history of `count` days."""
    first = TODAY - dt.timedelta(days=count + 7)
    for n in range(count):
        day = first + dt.timedelta(days=n)
        batch = raw.start_batch(SOURCE, endpoint, day, now=dt.datetime.combine(day, dt.time(2), dt.UTC))
        raw.seal(batch, [], 0)
        raw.mark_complete(batch, {"outcome": "loaded"})


def index_entries(raw: RawZone, endpoint: str) -> list[str]:
    return raw.storage.list_children(f"{SOURCE}/{endpoint}/{OPEN_INDEX}")


def a_days_reads(zone: Zone, endpoint: str, history: int) -> dict[str, tuple[dict, dict]]:
    """After `history` completed batches, with three open ones: what each read (and the day's settle) costs."""
    raw = zone.raw
    assert raw.pending(SOURCE, endpoint) == []  # the endpoint's first run: builds its (empty) index, once
    completed_batches(raw, endpoint, history)
    cut = raw.start_batch(SOURCE, endpoint, TODAY - dt.timedelta(days=1), now=NOW - dt.timedelta(hours=30))
    older = raw.start_batch(SOURCE, endpoint, TODAY, now=NOW - dt.timedelta(hours=10))
    raw.seal(older, [write_part(raw, older, 1, [{"id": 1}])], 1)
    newer = raw.start_batch(SOURCE, endpoint, TODAY, now=NOW - dt.timedelta(hours=1))
    raw.seal(newer, [write_part(raw, newer, 1, [{"id": 1}, {"id": 2}])], 2)
    assert index_entries(raw, endpoint) == [cut.batch_id, older.batch_id, newer.batch_id, INDEX_BUILT]

    steps = {
        "pending": lambda: raw.pending(SOURCE, endpoint),
        "stale": lambda: [(s.batch, s.sealed) for s in raw.stale(SOURCE, endpoint, NOW, dt.timedelta(hours=6))],
        "batches(day)": lambda: raw.batches(SOURCE, endpoint, TODAY),
        "latest_sealed": lambda: raw.latest_sealed(SOURCE, endpoint, TODAY),
        "uncommitted": lambda: raw.uncommitted(SOURCE, endpoint, TODAY),
        "settle": lambda: raw.settle(newer, {"snapshot_id": "1"}),
        "pending after settle": lambda: raw.pending(SOURCE, endpoint),
    }
    results, costs = {}, {}
    for name, step in steps.items():
        results[name], calls, requests = zone.cost(step)
        costs[name] = (calls, requests)

    assert results["pending"] == [cut, older, newer]
    assert results["stale"] == [(cut, False), (older, True)]  # newer: 1 h old, under the 6 h threshold
    assert results["batches(day)"] == [older, newer]
    assert results["latest_sealed"] == newer
    assert results["uncommitted"] == [older, newer]
    assert results["pending after settle"] == [cut]
    assert raw.outcome(older) == "superseded" and raw.outcome(newer) == "loaded"
    assert index_entries(raw, endpoint) == [cut.batch_id, INDEX_BUILT]
    return costs


# On S3, 300 days of history take ~1,500 requests to write (seconds, more on a loaded machine): CI's tier only.
@pytest.mark.parametrize("zone", ["local", pytest.param("s3", marks=pytest.mark.slow)], indirect=True)
def test_a_days_reads_cost_the_same_after_3_or_300_completed_batches(zone):
    # Side by side in one zone: neither endpoint's history costs the other anything either.
    short, long = (a_days_reads(zone, f"transactions{n}", n) for n in (3, 300))

    # pending(): one listing of the index, one `.complete` check per open batch, nothing read.
    assert long["pending"][0] == {"list_children": 1, "exists": 3}
    assert long == short, "a day's raw-zone reads cost more with a longer history"
    if isinstance(zone.storage.inner, S3Storage):  # the HTTP requests, with list pages of 10 keys
        assert long["pending"][1] == {"ListObjectsV2": 1, "HeadObject": 3}
        assert long["batches(day)"][1] == {"ListObjectsV2": 1}  # all 300 folders would take 30 pages


def write_legacy_batch(storage: RawStorage, endpoint: str, batch_id: str, sealed: bool, complete: bool) -> None:
    """A batch as an earlier version wrote it: markers in its folder, no index entry."""
    key = f"{SOURCE}/{endpoint}/{batch_id}"
    storage.write_bytes(f"{key}/{PENDING}", json.dumps({"started_at": NOW.isoformat()}).encode())
    if sealed:
        storage.write_bytes(f"{key}/part-00001.jsonl", b'{"id":1}\n')
        manifest = {"files": ["part-00001.jsonl"], "records": 1, "fetched_at": NOW.isoformat()}
        storage.write_bytes(f"{key}/{MANIFEST}", json.dumps(manifest).encode())
    if complete:
        storage.write_bytes(f"{key}/{COMPLETE}", json.dumps({"outcome": "loaded"}).encode())


def test_a_raw_zone_written_before_the_index_is_indexed_once_then_read_through_the_index(zone):
    raw, endpoint = zone.raw, "customers"
    ids = [f"2025-01-{d:02d}_20250101T020000000000Z_00000{d}" for d in range(1, 8)]
    open_ids = {ids[2]: True, ids[5]: False}  # a downloaded batch never loaded; a download cut off
    for batch_id in ids:
        sealed = open_ids.get(batch_id, True)
        write_legacy_batch(raw.storage.inner, endpoint, batch_id, sealed, complete=batch_id not in open_ids)
    assert index_entries(raw, endpoint) == []
    # A batch the new version starts before anything asked for pending batches: indexed by itself.
    started = raw.start_batch(SOURCE, endpoint, dt.date(2025, 1, 9), now=NOW)

    found, calls, _ = zone.cost(lambda: raw.pending(SOURCE, endpoint))
    assert [b.batch_id for b in found] == [ids[2], ids[5], started.batch_id]
    assert calls["list_children"] == 3  # the index (no _index.json), every batch, the index again
    assert index_entries(raw, endpoint) == [ids[2], ids[5], started.batch_id, INDEX_BUILT]
    assert json.loads(raw.storage.read_bytes(f"{SOURCE}/{endpoint}/{OPEN_INDEX}/{INDEX_BUILT}"))["open_batches"] == 3

    # From now on only the index is read: no listing of the endpoint's batches, one check per open batch.
    again, calls, _ = zone.cost(lambda: raw.pending(SOURCE, endpoint))
    assert again == found and calls == {"list_children": 1, "exists": 3}

    # The legacy batches behave as before: the downloaded one loads and leaves the index, the cut one stays.
    legacy = found[0]
    assert raw.latest_sealed(SOURCE, endpoint, legacy.day) == legacy
    raw.settle(legacy, {"snapshot_id": "7"})
    assert raw.pending(SOURCE, endpoint) == found[1:]
    assert raw.stale(SOURCE, endpoint, NOW + dt.timedelta(hours=7), dt.timedelta(hours=6))[0].sealed is False


def test_a_crash_between_the_index_entry_and_the_pending_marker_is_recovered(zone):
    """Killed after the entry, before `.pending`: the batch is pending, unsealed; the sensor sees it, and the next
    load of its day closes it."""
    raw, endpoint, day = zone.raw, "transactions", dt.date(2025, 1, 1)
    zone.storage.fail_on = ("write_bytes", f"/{PENDING}")
    with pytest.raises(RawZoneError, match="simulated crash"):
        raw.start_batch(SOURCE, endpoint, day, now=NOW - dt.timedelta(hours=8))
    [cut] = raw.pending(SOURCE, endpoint)
    assert cut.day == day and raw.manifest(cut) is None and not raw.is_complete(cut)
    [stale] = raw.stale(SOURCE, endpoint, NOW, dt.timedelta(hours=6))
    assert stale.batch == cut and not stale.sealed and stale.age == dt.timedelta(hours=8)  # its age from its id

    refetched = raw.start_batch(SOURCE, endpoint, day, now=NOW)
    raw.seal(refetched, [write_part(raw, refetched, 1, [{"id": 1}])], 1)
    assert raw.latest_sealed(SOURCE, endpoint, day) == refetched
    raw.settle(refetched, {"snapshot_id": "1"})
    assert raw.pending(SOURCE, endpoint) == []
    assert raw.outcome(cut) == "abandoned (download never finished)" and raw.outcome(refetched) == "loaded"
    assert index_entries(raw, endpoint) == [INDEX_BUILT]


def test_a_crash_after_complete_before_the_entry_is_removed_heals_in_pending(zone):
    raw, endpoint = zone.raw, "merchants"
    batch = raw.start_batch(SOURCE, endpoint, dt.date(2025, 1, 1), now=NOW)
    raw.seal(batch, [write_part(raw, batch, 1, [{"id": 1}])], 1)
    assert raw.pending(SOURCE, endpoint) == [batch]
    zone.storage.fail_on = ("delete", batch.batch_id)
    with pytest.raises(RawZoneError, match="simulated crash"):
        raw.settle(batch, {"snapshot_id": "1"})
    assert raw.is_complete(batch) and batch.batch_id in index_entries(raw, endpoint)  # a stale entry

    found, calls, _ = zone.cost(lambda: raw.pending(SOURCE, endpoint))
    assert found == [] and calls == {"list_children": 1, "exists": 1, "delete": 1}
    assert index_entries(raw, endpoint) == [INDEX_BUILT]
    # A rebuild racing a load can also leave an entry for a complete batch: the same healing removes it.
    raw.storage.touch(f"{SOURCE}/{endpoint}/{OPEN_INDEX}/{batch.batch_id}")
    assert raw.pending(SOURCE, endpoint) == [] and index_entries(raw, endpoint) == [INDEX_BUILT]


def test_abandoning_a_batch_removes_its_entry(zone):
    raw, endpoint = zone.raw, "customers"
    batch = raw.start_batch(SOURCE, endpoint, dt.date(2025, 1, 1), now=NOW)
    raw.seal(batch, [write_part(raw, batch, 1, [{"id": 1}])], 1)
    raw.abandon(batch, "the source will never fix it")
    assert raw.pending(SOURCE, endpoint) == [] and index_entries(raw, endpoint) == [INDEX_BUILT]
    assert raw.latest_sealed(SOURCE, endpoint, batch.day) is None


def test_list_children_by_name_prefix_touch_and_delete(zone):
    storage = zone.storage.inner
    for key in ("ep/2025-01-01_a/.pending", "ep/2025-01-02_b/.pending", "ep/2025-01-02_c/x", "ep/2025-01-020"):
        storage.write_bytes(key, b"{}")
    assert storage.list_children("ep", "2025-01-02_") == ["2025-01-02_b", "2025-01-02_c"]
    assert storage.list_children("ep", "2025-01-02") == ["2025-01-020", "2025-01-02_b", "2025-01-02_c"]  # "0" < "_"
    assert storage.list_children("ep", "2024") == [] and storage.list_children("nothing", "x") == []

    storage.touch("ep/_pending/2025-01-01_a")
    storage.touch("ep/_pending/2025-01-01_a")  # again: still one empty entry
    assert storage.read_bytes("ep/_pending/2025-01-01_a") == b""
    assert storage.list_children("ep/_pending") == ["2025-01-01_a"]
    storage.delete("ep/_pending/2025-01-01_a")
    storage.delete("ep/_pending/2025-01-01_a")  # gone already: no error
    assert not storage.exists("ep/_pending/2025-01-01_a") and storage.list_children("ep/_pending") == []


def test_an_s3_delete_refused_names_the_permission(monkeypatch, moto_endpoint):
    from botocore.stub import Stubber

    for name, value in aws_test_env(REGION).items():
        monkeypatch.setenv(name, value)
    client = s3_client(moto_endpoint, REGION)
    storage = S3Storage(client, "some-bucket")
    with Stubber(client) as stub:  # a 403 cannot be provoked from moto without IAM: stub this one answer
        stub.add_client_error("delete_object", service_error_code="AccessDenied", http_status_code=403)
        with pytest.raises(RawZoneError, match=r"s3://some-bucket/raw/bnpl/x/_pending/b .*s3:DeleteObject"):
            storage.delete("bnpl/x/_pending/b")
