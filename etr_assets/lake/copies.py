"""Where a data subject's copies hide besides a table's live rows: orphan files of a table's data folder, manifest
bounds, and tables nobody declared a spec for. Erasure removes what it can; its proof scans all of it."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from etr_assets.lake.session import java_class
from etr_assets.lake.writes import table_location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# A file written by a running write is an orphan until its commit: younger ones are left alone (and named).
ORPHAN_GRACE = dt.timedelta(hours=1)


@dataclasses.dataclass(frozen=True)
class FolderFile:
    path: str  # as the file system names it (file:/..., s3a://...)
    size: int
    modified: dt.datetime


def _file_system(spark: SparkSession, path: str):
    """(the Hadoop file system `path` is on, `path` as a Hadoop Path)."""
    hadoop_path = java_class(spark, "org.apache.hadoop.fs.Path")(path)
    return hadoop_path.getFileSystem(spark._jsc.hadoopConfiguration()), hadoop_path


def normalized(path: str) -> str:
    """One spelling per file: `file:/a`, `file:///a` and `/a` are the same local file; other schemes as they are."""
    parsed = urlparse(path)
    if parsed.scheme in ("", "file"):
        return parsed.path
    return f"s3://{parsed.netloc}{parsed.path}" if parsed.scheme in ("s3", "s3a", "s3n") else path


def delete_file(spark: SparkSession, path: str) -> None:
    fs, hadoop_path = _file_system(spark, path)
    fs.delete(hadoop_path, False)


def orphan_files(spark: SparkSession, qualified: str) -> list[FolderFile]:
    """Parquet files under the table's data folder that no kept snapshot of any ref references."""
    folder = table_location(spark, qualified).rstrip("/") + "/data"
    referenced = {normalized(r[0]) for r in spark.sql(f"SELECT file_path FROM {qualified}.all_files").collect()}
    fs, root = _file_system(spark, folder)
    found, files = [], fs.listFiles(root, True) if fs.exists(root) else None
    while files is not None and files.hasNext():
        status = files.next()
        path = status.getPath().toString()
        if path.endswith(".parquet") and normalized(path) not in referenced:
            modified = dt.datetime.fromtimestamp(status.getModificationTime() / 1000, dt.UTC)
            found.append(FolderFile(path, status.getLen(), modified))
    return sorted(found, key=lambda f: f.path)


def bounds_naming(spark: SparkSession, qualified: str, column: str, ids) -> dict[str, set[int]]:
    """Manifest entries (of any kept snapshot, DELETED entries included) whose lower or upper bound for `column`
    is one of `ids`: the value itself, kept in metadata after its rows are gone."""
    wanted = {int(i) for i in ids}
    rows = spark.sql(
        f"SELECT data_file.file_path AS path, status, readable_metrics.`{column}`.lower_bound AS lower, "
        f"readable_metrics.`{column}`.upper_bound AS upper FROM {qualified}.all_entries"
    ).collect()
    found: dict[str, set[int]] = {}
    for row in rows:
        if named := {int(v) for v in (row["lower"], row["upper"]) if v is not None} & wanted:
            state = {0: "EXISTING", 1: "ADDED", 2: "DELETED"}.get(row["status"], str(row["status"]))
            where = f"manifest entry ({state}) of {row['path']}: a bound of {column} names {len(named)} subject(s)"
            found.setdefault(where, set()).update(named)
    return found


@dataclasses.dataclass(frozen=True)
class CatalogTable:
    qualified: str  # catalog.namespace.name
    identifier: str  # namespace.name
    columns: tuple[str, ...]


def catalog_tables(spark: SparkSession, catalog: str) -> list[CatalogTable]:
    """Every table of the catalog Spark reaches, with its column names, whatever made it."""
    found = []
    for (namespace,) in spark.sql(f"SHOW NAMESPACES IN {catalog}").select("namespace").collect():
        for row in spark.sql(f"SHOW TABLES IN {catalog}.{namespace}").collect():
            if not row["isTemporary"]:
                identifier = f"{namespace}.{row['tableName']}"
                qualified = f"{catalog}.{identifier}"
                found.append(CatalogTable(qualified, identifier, tuple(spark.table(qualified).columns)))
    return found


def subject_like_columns(columns, subject_columns) -> list[str]:
    """Columns named like a subject column (`customer_id`, `CustomerId`, `buyer_customer_id`...)."""
    squash = lambda name: name.lower().replace("_", "")
    wanted = {squash(s) for s in subject_columns}
    return [c for c in columns if any(squash(c) == w or squash(c).endswith(w) for w in wanted)]
