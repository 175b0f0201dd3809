"""S3Storage and the raw zone on S3, against moto's real HTTP server (no Spark)."""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid

import pytest

from etr_assets.errors import RawZoneError
from etr_assets.sources.raw_zone import RawZone
from etr_assets.sources.s3_storage import S3Storage, s3_raw_zone
from etr_assets_tests.infra import AWS_TEST_ENV, create_bucket, list_keys, s3_client
from etr_assets_tests.sources.raw_parts import write_part

REGION = "ap-southeast-5"
DAY = dt.date(2025, 1, 5)


@pytest.fixture(autouse=True)
def _dummy_aws_credentials(aws_env):
    """Every test here runs with dummy AWS credentials only."""


@pytest.fixture
def client(moto_endpoint):
    return s3_client(moto_endpoint, REGION)


@pytest.fixture
def bucket(client):
    name = f"etr-raw-{uuid.uuid4().hex[:12]}"  # moto's state is per process: a bucket per test
    create_bucket(client, name)
    return name


def test_write_read_exists_and_uri(client, bucket):
    storage = S3Storage(client, bucket)
    storage.write_bytes("bnpl/transactions/b1/part-00001.jsonl", "ünïcode\n".encode())

    assert storage.read_bytes("bnpl/transactions/b1/part-00001.jsonl") == "ünïcode\n".encode()
    assert storage.exists("bnpl/transactions/b1/part-00001.jsonl")
    assert not storage.exists("bnpl/transactions/b1/part-00002.jsonl")
    assert not storage.exists("bnpl/transactions/b1")  # a "folder" is no object
    # The object is where the key says, under the prefix.
    assert list_keys(client, bucket) == ["raw/bnpl/transactions/b1/part-00001.jsonl"]
    # Spark reads s3a:// in the s3 profile; Glue and EMR read s3://.
    assert storage.uri("bnpl/x.jsonl") == f"s3a://{bucket}/raw/bnpl/x.jsonl"
    assert S3Storage(client, bucket, "landing/raw", "s3").uri("a/b") == f"s3://{bucket}/landing/raw/a/b"


def test_overwriting_a_key_replaces_the_whole_object(client, bucket):
    storage = S3Storage(client, bucket)
    storage.write_bytes("k", b"a much longer first version")
    storage.write_bytes("k", b"short")
    assert storage.read_bytes("k") == b"short"


def test_missing_key_is_a_clear_raw_zone_error_naming_the_s3_uri(client, bucket):
    storage = S3Storage(client, bucket)
    with pytest.raises(RawZoneError, match=rf"raw file s3://{bucket}/raw/bnpl/nope\.jsonl does not exist"):
        storage.read_bytes("bnpl/nope.jsonl")


def test_errors_other_than_not_found_are_raised_not_swallowed(client):
    storage = S3Storage(client, f"no-such-bucket-{uuid.uuid4().hex[:8]}")
    with pytest.raises(RawZoneError, match="could not list s3://no-such-bucket-.*/raw/bnpl/.*NoSuchBucket"):
        storage.list_children("bnpl")
    with pytest.raises(RawZoneError, match="could not read raw file s3://no-such-bucket-.*NoSuchBucket"):
        storage.read_bytes("k")


def test_exists_raises_on_access_denied_instead_of_answering_absent(client, bucket):
    from botocore.stub import Stubber

    storage = S3Storage(client, bucket)
    with Stubber(client) as stub:  # a 403 cannot be provoked from moto without IAM: stub this one answer
        stub.add_client_error("head_object", service_error_code="403", http_status_code=403)
        with pytest.raises(RawZoneError, match=rf"could not check raw file s3://{bucket}/raw/k"):
            storage.exists("k")


def test_list_children_gives_folders_and_files_sorted_names_only(client, bucket):
    storage = S3Storage(client, bucket)
    for key in (
        "src/ep/b2/.pending",
        "src/ep/b1/part-00001.jsonl",
        "src/ep/b1/_manifest.json",
        "src/ep/notes.txt",
        "src/ep/b1/deeper/x",
        "src/epsilon/other",
        "src/ep2/y",
    ):
        storage.write_bytes(key, b"x")

    assert storage.list_children("src/ep") == ["b1", "b2", "notes.txt"]
    assert storage.list_children("src/ep/") == ["b1", "b2", "notes.txt"]  # trailing slash: same folder
    assert storage.list_children("src/ep/b1") == ["_manifest.json", "deeper", "part-00001.jsonl"]
    assert storage.list_children("src") == ["ep", "ep2", "epsilon"]
    assert storage.list_children("nothing/here") == []
    assert S3Storage(client, bucket, prefix="").list_children("") == ["raw"]


def test_list_children_follows_pagination(client, bucket):
    storage = S3Storage(client, bucket, page_size=7)  # S3 pages hold 1000 keys; 7 forces many pages
    folders = [f"2025-01-{d:02d}_batch" for d in range(1, 13)]
    files = [f"file-{i:03d}.jsonl" for i in range(25)]
    for name in folders:
        storage.write_bytes(f"bnpl/transactions/{name}/.pending", b"{}")
    for name in files:
        storage.write_bytes(f"bnpl/transactions/{name}", b"{}")

    calls = []

    def record(params, **_):
        calls.append(dict(params))

    event = "before-parameter-build.s3.ListObjectsV2"
    client.meta.events.register(event, record)
    try:
        assert storage.list_children("bnpl/transactions") == sorted(folders + files)
    finally:
        client.meta.events.unregister(event, record)
    assert len(calls) == -(-(len(folders) + len(files)) // 7)  # every page was asked for
    assert all(call["MaxKeys"] == 7 and call["Delimiter"] == "/" for call in calls)


def test_raw_zone_batch_lifecycle_on_s3(client, bucket):
    raw = s3_raw_zone(client, bucket)
    assert isinstance(raw, RawZone) and isinstance(raw.storage, S3Storage)
    batch = raw.start_batch("bnpl", "transactions", DAY)
    assert raw.batches("bnpl", "transactions", DAY) == [batch]
    assert raw.latest_sealed("bnpl", "transactions", DAY) is None  # pending, no manifest: never loaded

    name = write_part(raw, batch, 1, [{"id": 1, "note": "ünïcode"}, {"id": 2}])
    raw.seal(batch, [name], 2)
    assert raw.latest_sealed("bnpl", "transactions", DAY) == batch
    assert raw.uncommitted("bnpl", "transactions", DAY) == [batch]
    assert raw.file_uris(batch) == [f"s3a://{bucket}/raw/{batch.key}/{name}"]
    lines = raw.storage.read_bytes(f"{batch.key}/{name}").decode("utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [{"id": 1, "note": "ünïcode"}, {"id": 2}]

    raw.mark_complete(batch, {"snapshot_id": "42"})
    assert raw.is_complete(batch) and raw.uncommitted("bnpl", "transactions", DAY) == []
    assert sorted(k.rsplit("/", 1)[1] for k in list_keys(client, bucket, f"raw/{batch.key}/")) == [
        ".complete",
        ".pending",
        "_manifest.json",
        name,
    ]


def test_s3_raw_zone_uri_scheme_for_glue_and_emr(client, bucket):
    raw = s3_raw_zone(client, bucket, prefix="landing", uri_scheme="s3")
    batch = raw.start_batch("bnpl", "transactions", DAY)
    raw.seal(batch, [write_part(raw, batch, 1, [{"id": 1}])], 1)
    assert raw.file_uris(batch) == [f"s3://{bucket}/landing/{batch.key}/part-00001.jsonl"]


def test_only_dummy_credentials_are_in_play():
    assert {k: os.environ[k] for k in AWS_TEST_ENV} == AWS_TEST_ENV


def test_the_dagster_raw_zone_resource_writes_to_s3(moto_endpoint, client):
    from etr_assets.defs.resources import RawZoneResource

    bucket = f"lake-{uuid.uuid4().hex[:8]}"
    create_bucket(client, bucket)
    zone = RawZoneResource(root=f"s3://{bucket}/raw", s3_endpoint=moto_endpoint, region=REGION).zone()
    batch = zone.start_batch("bnpl", "transactions", DAY)
    zone.seal(batch, [write_part(zone, batch, 1, [{"id": 1}])], 1)
    assert zone.latest_sealed("bnpl", "transactions", DAY) == batch
    assert zone.file_uris(batch) == [f"s3a://{bucket}/raw/{batch.key}/part-00001.jsonl"]
    assert f"raw/{batch.key}/_manifest.json" in list_keys(client, bucket)
