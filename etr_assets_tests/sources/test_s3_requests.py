"""S3 requests counted by kind: at a real (moto) server, and by the raw zone's own boto3 client, which must agree."""

from __future__ import annotations

from collections import Counter

from etr_assets.lake.s3_costs import PRICES, S3Prices, request_cost, request_figures
from etr_assets.sources.s3_requests import RequestKind, classify
from etr_assets.sources.s3_storage import s3_raw_zone
from etr_assets_tests.conftest import AWS_TEST_REGION
from etr_assets_tests.infra import counting_moto_server, create_bucket, s3_client

K = RequestKind


def test_every_kind_of_request_is_counted_alike_by_the_server_and_by_the_client(aws_env):
    with counting_moto_server() as (endpoint, server):
        client = s3_client(endpoint, AWS_TEST_REGION)
        create_bucket(client, "lake")
        server.label = "raw zone"
        storage = s3_raw_zone(client, "lake").storage
        storage.write_bytes("a/1.json", b"{}")  # PUT
        assert storage.read_bytes("a/1.json") == b"{}"  # GET
        assert storage.exists("a/1.json") and not storage.exists("a/2.json")  # HEAD, HEAD
        assert storage.list_children("a") == ["1.json"]  # LIST
        client.copy_object(Bucket="lake", Key="raw/b.json", CopySource={"Bucket": "lake", "Key": "raw/a/1.json"})
        upload = client.create_multipart_upload(Bucket="lake", Key="raw/big")["UploadId"]
        part = client.upload_part(Bucket="lake", Key="raw/big", UploadId=upload, PartNumber=1, Body=b"x")
        parts = {"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]}
        client.complete_multipart_upload(Bucket="lake", Key="raw/big", UploadId=upload, MultipartUpload=parts)
        client.delete_objects(Bucket="lake", Delete={"Objects": [{"Key": "raw/b.json"}]})
        storage.delete("a/1.json")
        expected = {K.PUT: 1, K.GET: 1, K.HEAD: 2, K.LIST: 1, K.COPY: 1, K.MULTIPART: 3, K.DELETE: 2}
        assert server.of("raw zone") == expected
        assert storage.requests == expected  # the client counts what the server answered
        assert server.of("") == {K.PUT: 1}  # the bucket's creation, before the label was set


def test_requests_are_priced_by_kind_with_prices_a_user_can_change():
    counts = Counter({K.PUT: 2000, K.GET: 10_000, K.DELETE: 500})
    assert request_cost(counts) == 2 * PRICES.of(K.PUT) + 10 * PRICES.of(K.GET)  # DELETE is free
    doubled = S3Prices(per_1000=tuple((kind, price * 2) for kind, price in PRICES.per_1000))
    assert request_cost(counts, doubled) == 2 * request_cost(counts)
    figures = request_figures(counts)
    assert figures["s3_requests"] == 12_500 and figures["s3_requests_put"] == 2000 and figures["s3_requests_head"] == 0
    assert figures["s3_request_cost_usd"] == round(request_cost(counts), 6)
    assert request_figures(Counter()) == {}  # the local profile: no S3, no figure


def test_a_listing_is_told_from_an_object_read_by_its_query():
    assert classify("GET", "list-type=2&prefix=raw/") == K.LIST
    assert classify("GET", "uploads") == K.LIST
    assert classify("GET", "") == K.GET
    assert classify("POST", "delete") == K.DELETE
    assert classify("POST", "uploadId=abc") == K.MULTIPART
    assert classify("PUT", "partNumber=1&uploadId=abc") == K.MULTIPART
    assert classify("DELETE", "uploadId=abc") == K.MULTIPART
