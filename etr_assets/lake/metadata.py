"""Light reads of table metadata through pyiceberg: no JVM, milliseconds, same catalog as Spark.

Used where nothing needs computing: `etr tables`, run summaries, and (later) health checks and sensors.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from urllib.parse import urlparse

from etr_assets.lake.specs import TableSpec
from etr_assets.settings import Settings


@dataclasses.dataclass(frozen=True)
class TableStats:
    table: str
    exists: bool
    rows: int = 0
    snapshots: int = 0
    data_files: int = 0
    delete_files: int = 0
    bytes: int = 0
    current_snapshot_id: int | None = None
    last_updated: dt.datetime | None = None
    location: str = ""


def _local_metadata_file(settings: Settings, spec: TableSpec) -> Path | None:
    """The Hadoop catalog's current metadata.json: its number is in metadata/version-hint.text."""
    table_dir = Path(urlparse(settings.warehouse).path) / spec.namespace / spec.name
    hint = table_dir / "metadata" / "version-hint.text"
    if not hint.exists():
        return None
    version = hint.read_text().strip()
    path = table_dir / "metadata" / f"v{version}.metadata.json"
    return path if path.exists() else None


def load_table(settings: Settings, spec: TableSpec):
    """The pyiceberg table for a spec, or None if the table was never created."""
    if settings.profile == "local":
        from pyiceberg.table import StaticTable

        metadata = _local_metadata_file(settings, spec)
        return StaticTable.from_metadata(str(metadata)) if metadata else None

    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog(settings).load_table((spec.namespace, spec.name))
    except NoSuchTableError:
        return None


def catalog(settings: Settings):
    """pyiceberg's view of the profile's catalog (s3: the JDBC catalog's database; aws: Glue)."""
    if settings.profile == "s3":
        from pyiceberg.catalog.sql import SqlCatalog

        return SqlCatalog(settings.catalog, **pyiceberg_s3_properties(settings))
    if settings.profile == "aws":
        from pyiceberg.catalog.glue import GlueCatalog

        return GlueCatalog(settings.catalog, **pyiceberg_glue_properties(settings))
    raise ValueError("the local profile's Hadoop catalog has no pyiceberg catalog; use load_table")


def pyiceberg_s3_properties(settings: Settings) -> dict[str, str]:
    # jdbc:postgresql://host:port/db -> postgresql+psycopg2://user:password@host:port/db
    url = settings.jdbc_url.removeprefix("jdbc:")
    parsed = urlparse(url)
    auth = settings.jdbc_user + (f":{settings.jdbc_password}" if settings.jdbc_password else "")
    netloc = f"{auth}@{parsed.netloc}" if auth else parsed.netloc
    props = {"uri": f"{parsed.scheme}+psycopg2://{netloc}{parsed.path}", "warehouse": settings.warehouse}
    if settings.s3_endpoint:
        props |= {"s3.endpoint": settings.s3_endpoint, "s3.path-style-access": "true", "s3.region": settings.region}
    return props


def pyiceberg_glue_properties(settings: Settings) -> dict[str, str]:
    """Glue + S3 for pyiceberg. Credentials are never properties: boto3 and pyarrow read the environment or role."""
    props = {"client.region": settings.region, "warehouse": settings.warehouse}
    if settings.glue_endpoint:
        props["glue.endpoint"] = settings.glue_endpoint
    if settings.s3_endpoint:
        props |= {"s3.endpoint": settings.s3_endpoint, "s3.path-style-access": "true"}
    return props


def table_stats(settings: Settings, spec: TableSpec) -> TableStats:
    table = load_table(settings, spec)
    if table is None:
        return TableStats(spec.identifier, exists=False)
    metadata = table.metadata
    snapshot = table.current_snapshot()
    summary = snapshot.summary.additional_properties if snapshot and snapshot.summary else {}

    def num(key: str) -> int:
        return int(summary.get(key, 0) or 0)

    return TableStats(
        table=spec.identifier,
        exists=True,
        rows=num("total-records"),
        snapshots=len(metadata.snapshots),
        data_files=num("total-data-files"),
        delete_files=num("total-delete-files"),
        bytes=num("total-files-size"),
        current_snapshot_id=snapshot.snapshot_id if snapshot else None,
        last_updated=dt.datetime.fromtimestamp(metadata.last_updated_ms / 1000, dt.timezone.utc),
        location=metadata.location,
    )
