"""The raw zone on S3 (the `s3` and `aws` profiles): one object per raw file, markers included. A PUT is atomic,
so no write-then-rename; Spark reads ``uri()``: ``s3a://`` in the `s3` profile, ``s3://`` on Glue and EMR."""

from __future__ import annotations

from collections import Counter

from botocore.exceptions import BotoCoreError, ClientError

from etr_assets.errors import RawZoneError
from etr_assets.sources.raw_zone import RawStorage, RawZone, local_raw_zone
from etr_assets.sources.s3_requests import RequestKind, count_boto3_requests

_MISSING = {"404", "NoSuchKey", "NotFound"}
_DELETE_HINT = (
    " (the role needs s3:DeleteObject on the raw zone's _pending/ index prefixes: regenerate it from `etr iam-policy`)"
)


class S3Storage(RawStorage):
    def __init__(self, client, bucket: str, prefix: str = "raw", uri_scheme: str = "s3a", page_size: int = 1000):
        if not bucket:
            raise ValueError("S3Storage needs a bucket")
        self.client, self.bucket, self.prefix, self.uri_scheme = client, bucket, prefix.strip("/"), uri_scheme
        self.page_size = page_size  # MaxKeys per list call (S3 returns at most 1000)
        self.requests: Counter[RequestKind] = Counter()  # every request sent, by kind: a fetch's metadata reports them
        count_boto3_requests(client, self.requests)

    def _key(self, key: str) -> str:
        key = key.strip("/")
        return f"{self.prefix}/{key}" if self.prefix else key

    def _where(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._key(key)}"

    def write_bytes(self, key: str, data: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)
        except (ClientError, BotoCoreError) as exc:
            raise RawZoneError(f"could not write raw file {self._where(key)}: {exc}") from exc

    def read_bytes(self, key: str) -> bytes:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        except (ClientError, BotoCoreError) as exc:
            if _error_code(exc) in _MISSING:
                raise RawZoneError(f"raw file {self._where(key)} does not exist") from None
            raise RawZoneError(f"could not read raw file {self._where(key)}: {exc}") from exc
        with response["Body"] as body:
            return body.read()

    def exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except (ClientError, BotoCoreError) as exc:
            if _error_code(exc) in _MISSING:
                return False
            raise RawZoneError(f"could not check raw file {self._where(key)}: {exc}") from exc
        return True

    def delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))  # a missing key is no error in S3
        except (ClientError, BotoCoreError) as exc:
            hint = _DELETE_HINT if _error_code(exc) in {"AccessDenied", "403"} else ""
            raise RawZoneError(f"could not delete raw-zone index entry {self._where(key)}{hint}: {exc}") from exc

    def list_children(self, prefix: str, starting: str = "") -> list[str]:
        """Names directly under ``prefix`` that start with ``starting``: "folders" (common prefixes) and files,
        sorted. Only keys under ``prefix/starting`` are listed: a day's batches cost a day's listing."""
        folder = self._key(prefix)
        folder = f"{folder}/" if folder else ""
        names: set[str] = set()
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=folder + starting, Delimiter="/", PaginationConfig={"PageSize": self.page_size}
        )
        try:
            for page in pages:
                for common in page.get("CommonPrefixes", []):
                    names.add(common["Prefix"][len(folder) :].rstrip("/"))
                for obj in page.get("Contents", []):
                    names.add(obj["Key"][len(folder) :])
        except (ClientError, BotoCoreError) as exc:
            raise RawZoneError(f"could not list {self._where(prefix)}/: {exc}") from exc
        names.discard("")  # a zero-byte "folder" object some tools create for the prefix itself
        return sorted(names)

    def uri(self, key: str) -> str:
        return f"{self.uri_scheme}://{self.bucket}/{self._key(key)}"


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}  # ClientError only; BotoCoreError has none
    return str(response.get("Error", {}).get("Code", ""))


def s3_raw_zone(client, bucket: str, prefix: str = "raw", uri_scheme: str = "s3a") -> RawZone:
    return RawZone(S3Storage(client, bucket, prefix, uri_scheme))


def open_raw_zone(root: str, *, s3_endpoint: str = "", region: str = "", uri_scheme: str = "s3a") -> RawZone:
    """The raw zone at `root`: a folder, or `s3://bucket/prefix` through boto3 (credentials from the environment
    or the role; `s3_endpoint` for MinIO or moto), in process and in a remote job alike."""
    if not root.startswith("s3://"):
        return local_raw_zone(root)
    import boto3

    bucket, _, prefix = root.removeprefix("s3://").partition("/")
    client = boto3.client("s3", region_name=region or None, endpoint_url=s3_endpoint or None)
    return s3_raw_zone(client, bucket, prefix or "raw", uri_scheme=uri_scheme)
