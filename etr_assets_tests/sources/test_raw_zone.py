"""Raw zone batches and their markers on the local file system."""

import datetime as dt
import json

import pytest

from etr_assets.errors import RawZoneError
from etr_assets.sources.raw_zone import local_raw_zone
from etr_assets_tests.sources.raw_parts import write_part

DAY = dt.date(2025, 1, 5)


def test_batch_lifecycle_pending_then_sealed_then_complete(tmp_path):
    raw = local_raw_zone(tmp_path)
    batch = raw.start_batch("bnpl", "transactions", DAY)
    folder = tmp_path / "bnpl" / "transactions" / batch.batch_id
    assert (folder / ".pending").exists() and batch.day == DAY
    assert raw.latest_sealed("bnpl", "transactions", DAY) is None  # half-downloaded: never loaded

    name = write_part(raw, batch, 1, [{"id": 1, "note": "ünïcode"}, {"id": 2}])
    raw.seal(batch, [name], 2)
    assert raw.latest_sealed("bnpl", "transactions", DAY) == batch
    assert raw.uncommitted("bnpl", "transactions", DAY) == [batch]
    lines = (folder / name).read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [{"id": 1, "note": "ünïcode"}, {"id": 2}]

    raw.mark_complete(batch, {"snapshot_id": "42"})
    assert raw.is_complete(batch) and raw.uncommitted("bnpl", "transactions", DAY) == []
    assert (folder / name).exists()  # raw data stays after loading


def test_batches_sort_oldest_first_and_filter_by_day(tmp_path):
    raw = local_raw_zone(tmp_path)
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    later = raw.start_batch("bnpl", "transactions", DAY, now=t0 + dt.timedelta(hours=1))
    earlier = raw.start_batch("bnpl", "transactions", DAY, now=t0)
    other_day = raw.start_batch("bnpl", "transactions", DAY - dt.timedelta(days=1), now=t0)
    assert raw.batches("bnpl", "transactions", DAY) == [earlier, later]
    assert raw.batches("bnpl", "transactions")[0] == other_day


def test_reading_an_unsealed_batch_names_it(tmp_path):
    raw = local_raw_zone(tmp_path)
    batch = raw.start_batch("bnpl", "transactions", DAY)
    with pytest.raises(RawZoneError, match=f"raw batch {batch.key} has no _manifest.json"):
        raw.file_uris(batch)


def test_writes_are_atomic_no_temp_files_left(tmp_path):
    raw = local_raw_zone(tmp_path)
    batch = raw.start_batch("bnpl", "transactions", DAY)
    write_part(raw, batch, 1, [{"id": 1}])
    leftovers = [p for p in tmp_path.rglob("*") if p.name.startswith(".tmp-")]
    assert leftovers == []
