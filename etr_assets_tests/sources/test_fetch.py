"""A day fetched into the raw zone: pages stored while the next ones download, sealed only once all are stored."""

import datetime as dt

import pytest

from etr_assets.sources.fetch import PAGES_IN_FLIGHT, fetch_day
from etr_assets.sources.raw_zone import LocalStorage, RawZone
from etr_assets_tests.sources.clients import bnpl_client

DAY = dt.date(2025, 1, 1)


def test_pages_are_stored_in_page_order_with_every_record(api, tmp_path):
    raw = RawZone(LocalStorage(tmp_path))
    client = bnpl_client(api.url, api.config.token, page_size=2)  # more pages than are ever in flight

    batch, manifest = fetch_day(client, raw, "transactions", DAY)

    assert len(manifest.files) > PAGES_IN_FLIGHT
    assert list(manifest.files) == [f"part-{n:05d}.jsonl" for n in range(1, len(manifest.files) + 1)]
    whole = list(client.iter_record_texts(client.declaration.resource("transactions"), DAY))
    stored = [raw.storage.read_bytes(f"{batch.key}/{name}").decode().splitlines() for name in manifest.files]
    assert stored == whole and manifest.records == sum(map(len, whole))


class FailingStorage(LocalStorage):
    """Local files, except that one part cannot be stored (a full disk, a refused PUT)."""

    def write_bytes(self, key: str, data: bytes) -> None:
        if key.endswith("part-00003.jsonl"):
            raise OSError(f"cannot store {key}")
        super().write_bytes(key, data)


def test_a_page_that_cannot_be_stored_fails_the_fetch_and_leaves_the_batch_unsealed(api, tmp_path):
    raw = RawZone(FailingStorage(tmp_path))

    with pytest.raises(OSError, match="part-00003.jsonl"):
        fetch_day(bnpl_client(api.url, api.config.token, page_size=5), raw, "transactions", DAY)

    (batch,) = raw.batches("bnpl", "transactions", DAY)
    assert raw.manifest(batch) is None and not raw.is_complete(batch)  # fetched again next run, never loaded


def test_an_endpoint_the_source_does_not_declare_is_refused_before_any_batch(api, tmp_path):
    raw = RawZone(LocalStorage(tmp_path))
    with pytest.raises(ValueError, match="unknown endpoint 'refunds' of source bnpl; known: transactions, customers"):
        fetch_day(bnpl_client(api.url, api.config.token), raw, "refunds", DAY)
    assert raw.batches("bnpl", "refunds", DAY) == []
