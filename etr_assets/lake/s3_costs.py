"""What S3 charges for the lake: requests by kind (counted by S3A in the JVM, by botocore for the raw zone, or by a
server), the bytes a table keeps against the bytes its current snapshot reads, and the prices as constants a user
can change (docs/maintenance.md#what-a-day-costs-on-s3)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import TYPE_CHECKING

from etr_assets.sources.s3_requests import RequestKind

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# S3A's counters (Hadoop's org.apache.hadoop.fs.s3a.Statistic) of each kind: one per request, retries included. A
# part upload is counted as a PUT by S3A, and billed as one.
S3A_COUNTERS: dict[RequestKind, tuple[str, ...]] = {
    RequestKind.GET: ("action_http_get_request",),
    RequestKind.PUT: ("object_put_request",),
    RequestKind.LIST: ("object_list_request", "object_continue_list_request"),
    RequestKind.HEAD: ("action_http_head_request",),
    RequestKind.DELETE: ("object_delete_request", "object_bulk_delete_request"),
    RequestKind.COPY: ("object_copy_requests",),
    RequestKind.MULTIPART: ("object_multipart_initiated", "multipart_upload_completed", "object_multipart_aborted"),
}


def s3a_request_counts(spark: SparkSession, catalog: str) -> Counter[RequestKind]:
    """Every S3 request S3A has made in this JVM (in local mode, its executors' too) to `catalog`'s warehouse bucket,
    by kind; empty when the warehouse is not on S3A (S3FileIO on Glue and EMR counts none)."""
    warehouse = spark.conf.get(f"spark.sql.catalog.{catalog}.warehouse", "")
    counts: Counter[RequestKind] = Counter()
    if not warehouse.startswith("s3a://"):
        return counts
    jvm = spark.sparkContext._jvm
    file_system = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI(warehouse), spark._jsc.hadoopConfiguration())
    counters = file_system.getIOStatistics().counters()  # this bucket's (getStorageStatistics: the first bucket's)
    for kind, names in S3A_COUNTERS.items():
        counts[kind] = sum(int(counters.get(name) or 0) for name in names)
    return +counts


@dataclasses.dataclass(frozen=True)
class S3Prices:
    """S3 Standard list prices in USD, US East (N. Virginia), as AWS published them through 2025 (checked 2025-06;
    other regions cost up to about 30% more): pass your own to `request_cost` / `storage_cost`, or to the bench."""

    per_1000: tuple[tuple[RequestKind, float], ...] = (
        (RequestKind.PUT, 0.005),
        (RequestKind.COPY, 0.005),
        (RequestKind.LIST, 0.005),
        (RequestKind.MULTIPART, 0.005),
        (RequestKind.GET, 0.0004),
        (RequestKind.HEAD, 0.0004),
        (RequestKind.DELETE, 0.0),  # DELETE requests are free
    )
    storage_gb_month: float = 0.023  # the first 50 TB a month

    def of(self, kind: RequestKind) -> float:
        return dict(self.per_1000)[kind]


PRICES = S3Prices()


def request_cost(counts: Counter[RequestKind] | dict, prices: S3Prices = PRICES) -> float:
    """USD for these requests."""
    return sum(n * prices.of(RequestKind(kind)) / 1000 for kind, n in counts.items())


def storage_cost(stored_bytes: int, prices: S3Prices = PRICES) -> float:
    """USD a month for keeping this many bytes."""
    return stored_bytes / 1e9 * prices.storage_gb_month


def request_figures(counts: Counter[RequestKind], prices: S3Prices = PRICES) -> dict[str, object]:
    """What a materialization reports of the S3 requests its step made (none: no figure)."""
    if not counts:
        return {}
    figures: dict[str, object] = {f"s3_requests_{kind.lower()}": counts.get(kind, 0) for kind in RequestKind}
    return figures | {
        "s3_requests": sum(counts.values()),
        "s3_request_cost_usd": round(request_cost(counts, prices), 6),
    }


def stored_bytes(table) -> int:
    """Bytes of every file under a pyiceberg table's location (live, expired-but-kept and orphaned alike), listed
    through the table's own FileIO: one LIST request per 1,000 files on S3."""
    from pyarrow.fs import FileSelector, FileType
    from pyiceberg.io.pyarrow import PyArrowFileIO

    io = table.io if isinstance(table.io, PyArrowFileIO) else PyArrowFileIO(table.io.properties)
    scheme, netloc, path = io.parse_location(table.metadata.location)
    infos = io.fs_by_scheme(scheme, netloc).get_file_info(FileSelector(path, recursive=True, allow_not_found=True))
    return sum(info.size or 0 for info in infos if info.type == FileType.File)


def amplification(stored: int, live: int) -> float | None:
    """Stored bytes per byte the current snapshot references (data and delete files); None for an empty table."""
    return round(stored / live, 3) if live else None
