"""Erasing customers from the raw zone, on local files and on S3 (moto's server): files, manifests, markers, proof."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest

from etr_assets.lake.erasure import ErasureRequest
from etr_assets.pipeline.erasure import erase_raw_zone, scan_raw_zone
from etr_assets.sources.raw_zone import RawZone, local_raw_zone
from etr_assets.sources.s3_storage import s3_raw_zone
from etr_assets_tests.infra import create_bucket, s3_client
from etr_assets_tests.sources.raw_parts import write_part

REGION = "ap-southeast-5"
DAY = dt.date(2025, 1, 5)
ERASED, KEPT = 100_042, 100_420  # KEPT's digits contain ERASED's: matching must not confuse them


def transaction(tid: int, customer) -> dict:
    return {"transaction_id": tid, "customer_id": customer, "amount": "10.00", "transaction_date": DAY.isoformat()}


@pytest.fixture(params=["local", "s3"])
def raw_zone(request, tmp_path) -> RawZone:
    if request.param == "local":
        return local_raw_zone(tmp_path / "raw")
    env = request.getfixturevalue("aws_env")  # noqa: F841 - dummy credentials for boto3
    client = s3_client(request.getfixturevalue("moto_endpoint"), REGION)
    bucket = f"etr-raw-{uuid.uuid4().hex[:12]}"
    create_bucket(client, bucket)
    return s3_raw_zone(client, bucket)


def test_raw_files_are_rewritten_without_the_customer_and_batches_stay_consistent(raw_zone):
    # A loaded batch of two files, and a newer pending one (downloaded, not loaded yet).
    loaded = raw_zone.start_batch("bnpl", "transactions", DAY)
    part1 = write_part(raw_zone, loaded, 1, [transaction(1, ERASED), transaction(2, KEPT), transaction(3, str(ERASED))])
    part2 = write_part(
        raw_zone, loaded, 2, [transaction(4, ERASED)]
    )  # only the erased customer: the file becomes empty
    raw_zone.seal(loaded, [part1, part2], 4)
    raw_zone.mark_complete(loaded, {"outcome": "loaded"})
    pending = raw_zone.start_batch("bnpl", "transactions", DAY)
    raw_zone.seal(pending, [write_part(raw_zone, pending, 1, [transaction(5, KEPT), transaction(6, ERASED)])], 2)
    customers = raw_zone.start_batch("bnpl", "customers", DAY)
    raw_zone.seal(
        customers,
        [write_part(raw_zone, customers, 1, [{"customer_id": ERASED, "email": "a@b.c"}, {"customer_id": KEPT}])],
        2,
    )
    # A malformed line still naming the customer is erased too; the merchants feed holds no customer and is left alone.
    raw_zone.storage.write_bytes(f"{customers.key}/part-00002.jsonl", f'{{"customer_id": "{ERASED}", broken\n'.encode())
    merchants = raw_zone.start_batch("bnpl", "merchants", DAY)
    raw_zone.seal(merchants, [write_part(raw_zone, merchants, 1, [{"merchant_id": ERASED}])], 1)

    result = erase_raw_zone(raw_zone, ErasureRequest.create("REQ-RAW", [ERASED, 7], b"k"))

    assert result.removed == {ERASED: 6}
    assert len(result.files_rewritten) == 5 and result.manifests_updated == 3
    assert scan_raw_zone(raw_zone, (ERASED,))[1] == {}
    assert scan_raw_zone(raw_zone, (KEPT,))[1] != {}  # the other customer is still there, untouched

    def records(batch) -> list[dict]:
        manifest = raw_zone.manifest(batch)
        lines = [
            line for name in manifest.files for line in raw_zone.storage.read_bytes(f"{batch.key}/{name}").splitlines()
        ]
        assert manifest.records == len(lines)  # the manifest counts what the files hold
        return [json.loads(line) for line in lines]

    assert [r["transaction_id"] for r in records(loaded)] == [2]
    assert raw_zone.storage.read_bytes(f"{loaded.key}/{part2}") == b""  # kept in the manifest's file list, empty
    assert [r["transaction_id"] for r in records(pending)] == [5]
    assert [r["customer_id"] for r in records(customers)] == [KEPT]
    assert raw_zone.storage.read_bytes(f"{customers.key}/part-00002.jsonl") == b""
    # Markers unchanged: the loaded batch stays complete, the pending one stays pending (and loadable).
    assert (
        raw_zone.is_complete(loaded)
        and not raw_zone.is_complete(pending)
        and raw_zone.pending("bnpl", "transactions") == [pending]
    )
    assert raw_zone.storage.read_bytes(f"{merchants.key}/part-00001.jsonl") == f'{{"merchant_id":{ERASED}}}\n'.encode()

    # The proof's scan names a copy planted afterwards.
    raw_zone.storage.write_bytes(f"{pending.key}/copy.jsonl", json.dumps(transaction(9, ERASED)).encode())
    scanned, found = scan_raw_zone(raw_zone, (ERASED,))
    assert (
        found == {raw_zone.storage.uri(f"{pending.key}/copy.jsonl"): {ERASED: 1}} and scanned == 6
    )  # 2 + 2 transaction files, 2 customer files


def test_a_key_written_with_json_escapes_or_nested_still_names_the_customer(raw_zone):
    batch = raw_zone.start_batch("bnpl", "transactions", DAY)
    lines = [
        '{"transaction_id": 1, "customer\\u005fid": ' + f"{ERASED}}}",  # every JSON reader reads customer_id
        '{"transaction_id": 2, "customer_id": "\\u0031' + f'{str(ERASED)[1:]}"}}',  # escaped digit text
        '{"transaction_id": 3, "payload": {"customer_id": ' + f"{ERASED}.0}}}}",  # nested, an integral number
        '{"transaction_id": 4, "customer\\u005fid": ' + f"{KEPT}}}",
    ]
    raw_zone.storage.write_bytes(f"{batch.key}/part-00001.jsonl", ("\n".join(lines) + "\n").encode())
    raw_zone.seal(batch, ["part-00001.jsonl"], 4)
    assert scan_raw_zone(raw_zone, (ERASED,))[1] == {raw_zone.storage.uri(f"{batch.key}/part-00001.jsonl"): {ERASED: 3}}

    result = erase_raw_zone(raw_zone, ErasureRequest.create("REQ-ESC", [ERASED], b"k"))

    assert result.removed == {ERASED: 3}
    assert scan_raw_zone(raw_zone, (ERASED,))[1] == {}
    kept = raw_zone.storage.read_bytes(f"{batch.key}/part-00001.jsonl").splitlines()
    assert [json.loads(line)["transaction_id"] for line in kept] == [4] and raw_zone.manifest(batch).records == 1
