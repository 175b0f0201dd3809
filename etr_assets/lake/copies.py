"""Where a data subject's copies hide besides a table's live rows: orphan files of a table's data folder, manifest
bounds, and tables nobody declared a spec for. Erasure removes what it can; its proof scans all of it."""

from __future__ import annotations

import dataclasses
import datetime as dt
from urllib.parse import urlparse

from etr_assets.lake.session import java_class
from etr_assets.lake.writes import table_location

# A file written by a running write is an orphan until its commit: younger ones are left alone (and named).
ORPHAN_GRACE = dt.timedelta(hours=1)
DATA_FILE_SUFFIX = ".parquet"


@dataclasses.dataclass(frozen=True)
class FolderFile:
    path: str  # as the file system names it (file:/..., s3a://...)
    size: int
    modified: dt.datetime


def _hadoop_path(spark, path: str):
    return java_class(spark, "org.apache.hadoop.fs.Path")(path)


def _file_system(spark, path: str):
    return _hadoop_path(spark, path).getFileSystem(spark._jsc.hadoopConfiguration())


def normalized(path: str) -> str:
    """One spelling per file: `file:/a`, `file:///a` and `/a` are the same local file; other schemes as they are."""
    parsed = urlparse(path)
    if parsed.scheme in ("", "file"):
        return parsed.path
    if parsed.scheme in ("s3", "s3a", "s3n"):
        return f"s3://{parsed.netloc}{parsed.path}"
    return path


def folder_files(spark, folder: str, suffix: str = DATA_FILE_SUFFIX) -> list[FolderFile]:
    """Every file under `folder` (recursively) ending with `suffix`; none if the folder does not exist."""
    fs = _file_system(spark, folder)
    root = _hadoop_path(spark, folder)
    if not fs.exists(root):
        return []
    found, files = [], fs.listFiles(root, True)
    while files.hasNext():
        status = files.next()
        path = status.getPath().toString()
        if path.endswith(suffix):
            modified = dt.datetime.fromtimestamp(status.getModificationTime() / 1000, dt.UTC)
            found.append(FolderFile(path, status.getLen(), modified))
    return sorted(found, key=lambda f: f.path)


def delete_file(spark, path: str) -> None:
    _file_system(spark, path).delete(_hadoop_path(spark, path), False)


def referenced_files(spark, qualified: str) -> set[str]:
    """Every file (data and delete files) any kept snapshot of any ref references, normalized."""
    return {normalized(r[0]) for r in spark.sql(f"SELECT file_path FROM {qualified}.all_files").collect()}


def orphan_files(spark, qualified: str) -> list[FolderFile]:
    """Parquet files in the table's data folder that no kept snapshot references."""
    location = table_location(spark, qualified).rstrip("/")
    referenced = referenced_files(spark, qualified)
    return [f for f in folder_files(spark, f"{location}/data") if normalized(f.path) not in referenced]


def bounds_naming(spark, qualified: str, column: str, ids) -> dict[str, set[int]]:
    """Manifest entries (of any kept snapshot, DELETED entries included) whose lower or upper bound for `column`
    is one of `ids`: the value itself, kept in metadata after its rows are gone."""
    wanted = {int(i) for i in ids}
    rows = spark.sql(
        f"SELECT data_file.file_path AS path, status, readable_metrics.`{column}`.lower_bound AS lower, "
        f"readable_metrics.`{column}`.upper_bound AS upper FROM {qualified}.all_entries"
    ).collect()
    found: dict[str, set[int]] = {}
    for row in rows:
        named = {int(v) for v in (row["lower"], row["upper"]) if v is not None} & wanted
        if named:
            state = {0: "EXISTING", 1: "ADDED", 2: "DELETED"}.get(row["status"], str(row["status"]))
            found.setdefault(
                f"manifest entry ({state}) of {row['path']}: a bound of {column} names {len(named)} subject(s)", set()
            ).update(named)
    return found


@dataclasses.dataclass(frozen=True)
class CatalogTable:
    qualified: str  # catalog.namespace.name
    identifier: str  # namespace.name
    columns: tuple[str, ...]


def catalog_tables(spark, catalog: str) -> list[CatalogTable]:
    """Every table of the catalog Spark reaches, with its column names, whatever made it."""
    found = []
    for (namespace,) in spark.sql(f"SHOW NAMESPACES IN {catalog}").select("namespace").collect():
        for row in spark.sql(f"SHOW TABLES IN {catalog}.{namespace}").collect():
            if row["isTemporary"]:
                continue
            qualified = f"{catalog}.{namespace}.{row['tableName']}"
            columns = tuple(spark.table(qualified).columns)
            found.append(CatalogTable(qualified, f"{namespace}.{row['tableName']}", columns))
    return found


def subject_like_columns(columns, subject_columns) -> list[str]:
    """Columns named like a subject column (`customer_id`, `CustomerId`, `buyer_customer_id`...)."""

    def squash(name: str) -> str:
        return name.lower().replace("_", "")

    wanted = {squash(s) for s in subject_columns}
    return [c for c in columns if any(squash(c) == w or squash(c).endswith(w) for w in wanted)]
