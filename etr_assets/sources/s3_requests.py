"""S3 requests by kind as S3 bills them, from the HTTP request itself: the raw zone's boto3 client counts its own
here, and lake/s3_costs.py prices them."""

from __future__ import annotations

from collections import Counter
from enum import StrEnum
from urllib.parse import parse_qs, urlsplit


class RequestKind(StrEnum):
    GET = "GET"
    PUT = "PUT"
    LIST = "LIST"
    HEAD = "HEAD"
    DELETE = "DELETE"  # DeleteObject and the multi-object delete (POST ?delete): one request each
    COPY = "COPY"
    MULTIPART = "MULTIPART"  # initiate, upload part, complete, abort


def classify(method: str, query: str, copy_source: bool = False) -> RequestKind:
    """The kind of one S3 REST request, from its HTTP method, query string and x-amz-copy-source header."""
    params = parse_qs(query, keep_blank_values=True)
    method = method.upper()
    if "uploadId" in params or "uploads" in params:
        return RequestKind.LIST if method == "GET" else RequestKind.MULTIPART
    if method == "HEAD":
        return RequestKind.HEAD
    if method == "GET":
        return RequestKind.LIST if "list-type" in params or "delimiter" in params else RequestKind.GET
    if method == "DELETE" or (method == "POST" and "delete" in params):
        return RequestKind.DELETE
    if method == "PUT":
        return RequestKind.COPY if copy_source else RequestKind.PUT
    return RequestKind.PUT  # any other POST (a form upload) is billed as a PUT


def count_boto3_requests(client, counts: Counter[RequestKind]) -> None:
    """Count every HTTP request `client` (a boto3 S3 client) sends into `counts`, each retry included."""

    def count(request, **_):
        counts[classify(request.method, urlsplit(request.url).query, "x-amz-copy-source" in request.headers)] += 1

    client.meta.events.register("before-send.s3", count)
