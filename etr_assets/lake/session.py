"""Spark configuration per profile, and where the jars come from: `spark_conf` is a plain dict, testable without a
JVM; `catalog_conf` is the part Spark reads lazily, so it applies to a session that already exists."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from etr_assets.errors import JarNotFound, NotAnIcebergSession
from etr_assets.settings import Profile, Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SCALA = "2.12"  # pyspark 3.5 is built for Scala 2.12
ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
LOG4J_FILE = Path(__file__).with_name("log4j2.properties")
# Jars the `s3` profile needs beside Spark's hadoop-client 3.3.4 (docs/stack.md); setup fetches them here.
S3A_JARS = ("hadoop-aws-3.3.1.jar", "aws-java-sdk-bundle-1.11.901.jar")
POSTGRES_JDBC_GLOB = "/usr/share/java/postgresql*.jar"
# The local profile's warehouse file system without a chmod process per file written (lake/local_fs.py builds it).
LOCAL_FS_SOURCE = Path(__file__).with_name("java") / "PosixLocalFileSystem.java"
LOCAL_FS_CLASS = "etr.hadoop.PosixLocalFileSystem"
# The s3 profile's S3A and Iceberg FileIO deleting a file in one request, not three (lake/s3a_io.py builds them).
S3A_IO_SOURCES = tuple(sorted((Path(__file__).with_name("java") / "s3a").glob("*.java")))
S3A_FS_CLASS, S3A_IO_CLASS = "etr.hadoop.SingleRequestS3AFileSystem", "etr.hadoop.SingleRequestDeleteFileIO"
# Looked up by short name on nearly every DataFrame call: imported, py4j skips failed wildcard lookups in every jar.
HOT_CLASSES = (
    "org.apache.spark.sql.functions",
    "org.apache.spark.api.python.PythonUtils",
    "org.apache.spark.sql.SparkSession",
    "org.apache.spark.sql.SparkSession$",
)
_IMPORTED: set[int] = set()  # gateways (by id) that have them


def iceberg_runtime_jar() -> str:
    """The Iceberg Spark runtime inside the snowpark-connect-deps-iceberg wheel (the only source here)."""
    spec = importlib.util.find_spec("snowpark_connect_deps_iceberg")
    if spec is None or not spec.submodule_search_locations:
        raise JarNotFound(
            "the Iceberg Spark runtime jar was not found: install snowpark-connect-deps-iceberg==1.0.2 "
            "(./dev setup does), or set ETR_SPARK_JARS / ETR_SPARK_PACKAGES / ETR_ICEBERG_PROVIDED=true"
        )
    folder = Path(list(spec.submodule_search_locations)[0]) / "jars"
    if not (found := sorted(glob.glob(str(folder / f"iceberg-spark-runtime-3.5_{SCALA}-*.jar")))):
        raise JarNotFound(f"no iceberg-spark-runtime-3.5_{SCALA} jar in {folder}")
    return found[-1]


def jars_dir() -> Path:
    return Path(os.environ.get("ETR_JARS_DIR", Path(__file__).resolve().parents[2] / ".jars"))


def _compiled_jar_path(name: str, sources) -> Path:
    """Where setup puts the jar compiled from `sources`: named `name` and their contents' hash."""
    digest = hashlib.sha256(b"".join(source.read_bytes() for source in sources)).hexdigest()[:12]
    return jars_dir() / f"{name}-{digest}.jar"


def local_fs_jar_path() -> Path:
    """Where `python -m etr_assets.lake.local_fs` puts the local file system's jar."""
    return _compiled_jar_path("etr-local-fs", [LOCAL_FS_SOURCE])


def local_fs_jar() -> Path | None:
    """The local profile's file system without a chmod process per file, once compiled from this source."""
    return jar if (jar := local_fs_jar_path()).exists() else None


def s3a_io_jar_path() -> Path:
    """Where `python -m etr_assets.lake.s3a_io` puts the s3 profile's classes."""
    return _compiled_jar_path("etr-s3a-io", S3A_IO_SOURCES)


def s3a_io_jar() -> Path | None:
    """The s3 profile's single-request deletes, once compiled from these sources."""
    return jar if (jar := s3a_io_jar_path()).exists() else None


def s3_profile_jars() -> list[str]:
    jars = [str(jars_dir() / name) for name in S3A_JARS]
    jars += sorted(glob.glob(POSTGRES_JDBC_GLOB))[:1]
    if (missing := [j for j in jars if not Path(j).exists()]) or len(jars) < 3:
        raise JarNotFound(
            f"the s3 profile needs {', '.join(S3A_JARS)} in {jars_dir()} and Debian's libpostgresql-jdbc-java; "
            f"missing: {', '.join(missing) or 'postgresql JDBC driver'}. Run: ./dev setup --tests"
        )
    return jars


def jars_for(settings: Settings) -> list[str]:
    if settings.spark_jars:
        return list(settings.spark_jars)
    jars: list[str] = []
    if not (settings.provided_iceberg or settings.spark_packages or settings.profile == Profile.AWS):
        jars.append(iceberg_runtime_jar())
    if settings.profile == Profile.S3:
        jars += s3_profile_jars() + ([str(jar)] if (jar := s3a_io_jar()) else [])
    return jars


def catalog_conf(settings: Settings) -> dict[str, str]:
    """The Iceberg catalog of the profile. Read lazily by Spark, so settable on a live session."""
    prefix = f"spark.sql.catalog.{settings.catalog}"
    conf = {prefix: "org.apache.iceberg.spark.SparkCatalog", "spark.sql.defaultCatalog": settings.catalog}
    # New tables get the profile's format version unless their spec pins one (specs.FORMAT_VERSIONS).
    conf[f"{prefix}.table-default.format-version"] = str(settings.format_version)
    # A manifest file is written once and never changed: each check and build re-read the same ones, a HEAD and a
    # GET each on S3 (docs/maintenance.md#what-a-day-costs-on-s3).
    conf[f"{prefix}.io.manifest.cache-enabled"] = str(settings.manifest_cache).lower()
    if settings.profile == Profile.LOCAL:
        conf |= {f"{prefix}.type": "hadoop", f"{prefix}.warehouse": settings.warehouse}
    elif settings.profile == Profile.S3:
        conf |= {
            f"{prefix}.type": "jdbc",
            f"{prefix}.uri": settings.jdbc_url,
            f"{prefix}.jdbc.schema-version": "V1",
            f"{prefix}.warehouse": settings.warehouse,
        }
        if s3a_io_jar() is not None:  # each file Iceberg deletes in one request, as S3FileIO does (lake/s3a_io.py)
            conf[f"{prefix}.io-impl"] = S3A_IO_CLASS
        credentials = {"user": settings.jdbc_user, "password": settings.jdbc_password}
        conf |= {f"{prefix}.jdbc.{key}": value for key, value in credentials.items() if value}
    else:  # aws: Glue Data Catalog with S3FileIO, as Glue 5.0 / EMR expect
        conf |= {
            f"{prefix}.catalog-impl": "org.apache.iceberg.aws.glue.GlueCatalog",
            f"{prefix}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
            f"{prefix}.warehouse": settings.warehouse,
            f"{prefix}.client.region": settings.region,
        }
        if settings.glue_endpoint:
            conf[f"{prefix}.glue.endpoint"] = settings.glue_endpoint
        if settings.s3_endpoint:
            conf |= {f"{prefix}.s3.endpoint": settings.s3_endpoint, f"{prefix}.s3.path-style-access": "true"}
    return conf


def spark_conf(settings: Settings) -> dict[str, str]:
    """Everything a session for this profile needs: static settings, jars, catalog."""
    scratch = settings.home / "spark"  # Spark's scratch: its local dirs, spark-warehouse, S3A's upload buffers
    java_opts = f"-Dlog4j2.configurationFile=file:{LOG4J_FILE} -Duser.timezone=UTC"
    conf = {
        "spark.master": settings.spark_master,
        "spark.app.name": "etr_assets",
        "spark.sql.extensions": ICEBERG_EXTENSIONS,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": settings.spark_driver_memory,
        "spark.driver.extraJavaOptions": java_opts,
        # no path of this machine: on a cluster it may not exist there
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.local.dir": str(scratch / "local"),
        "spark.sql.warehouse.dir": str(scratch / "spark-warehouse"),
    }
    master = settings.spark_master
    if master.startswith("local") or ("://" in master and urlparse(master).hostname in ("127.0.0.1", "localhost")):
        # Nothing listens beyond loopback on a laptop, or for a cluster on this machine (executors call back here).
        conf |= {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
        if settings.profile == Profile.LOCAL and (jar := local_fs_jar()) is not None:
            # The warehouse's files written without a chmod process each (lake/local_fs.py); the executors of a
            # cluster on this machine read the same jar.
            conf |= {"spark.hadoop.fs.file.impl": LOCAL_FS_CLASS}
            conf |= {f"spark.{side}.extraClassPath": str(jar) for side in ("driver", "executor")}
    if settings.executor_memory:
        conf["spark.executor.memory"] = settings.executor_memory
    if jars := jars_for(settings):
        conf["spark.jars"] = ",".join(jars)
    if settings.spark_packages:
        conf["spark.jars.packages"] = ",".join(settings.spark_packages)
    if settings.profile == Profile.S3:
        conf |= {
            "spark.hadoop.fs.s3a.impl": S3A_FS_CLASS if s3a_io_jar() else "org.apache.hadoop.fs.s3a.S3AFileSystem",
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.buffer.dir": str(scratch / "s3a"),
            "spark.hadoop.fs.s3a.endpoint.region": settings.region,
            # Iceberg needs no directory markers: S3A then sends no delete of parent markers after each file it
            # writes, a request per file (docs/maintenance.md#what-a-day-costs-on-s3).
            "spark.hadoop.fs.s3a.directory.marker.retention": "keep",
        }
        if settings.s3_endpoint:
            conf["spark.hadoop.fs.s3a.endpoint"] = settings.s3_endpoint
            conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(settings.s3_endpoint.startswith("https")).lower()
        if os.environ.get("AWS_ACCESS_KEY_ID"):  # S3A reads the keys there: they never enter Spark's config
            provider = "com.amazonaws.auth.EnvironmentVariableCredentialsProvider"
            conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = provider
    return conf | catalog_conf(settings)


def get_spark(settings: Settings, extra: dict[str, str] | None = None) -> SparkSession:
    """The process's Spark session for this profile (created once), with the profile's catalog applied."""
    from pyspark.sql import SparkSession  # imported here: importing this module must not need a JVM

    builder = SparkSession.builder
    for key, value in (spark_conf(settings) | (extra or {})).items():
        builder = builder.config(key, value)
    return attach_catalog(builder.getOrCreate(), settings)


def attach_catalog(spark: SparkSession, settings: Settings) -> SparkSession:
    """Point a live session at this profile's catalog (safe to repeat)."""
    if ICEBERG_EXTENSIONS not in spark.sparkContext.getConf().get("spark.sql.extensions", ""):
        raise NotAnIcebergSession(
            "the running Spark session was created without the Iceberg SQL extensions; "
            "create it through etr_assets.lake.session.get_spark (or add spark.sql.extensions)"
        )
    for key, value in catalog_conf(settings).items():
        spark.conf.set(key, value)
    gateway = spark.sparkContext._gateway
    if id(gateway) not in _IMPORTED:
        from py4j.java_gateway import java_import

        for name in HOT_CLASSES:
            java_import(gateway.jvm, name)
        _IMPORTED.add(id(gateway))
    return spark


@contextlib.contextmanager
def session_conf(spark: SparkSession, key: str, value: str):
    """The session's `key` set to `value` while the block runs, then as it was."""
    previous = spark.conf.get(key)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        spark.conf.set(key, previous)


def java_class(spark: SparkSession, name: str):
    """A JVM class by its full name, without a lookup: py4j resolves `jvm.org.apache...` a package at a time."""
    from py4j.java_gateway import JavaClass

    return JavaClass(name, spark.sparkContext._gateway._gateway_client)


def java_elements(iterable) -> Iterator:
    """The elements of a Java Iterable. py4j's own iteration ends when Java throws NoSuchElementException, which
    pyspark converts by reading its stack trace over py4j, dearer than the elements; hasNext() ends without one."""
    iterator = iterable.iterator()
    while iterator.hasNext():
        yield iterator.next()
