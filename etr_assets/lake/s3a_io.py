"""Compiles the s3 profile's single-request deletes (java/s3a/: S3A's file system and Iceberg's Hadoop FileIO, each
file Iceberg deletes removed with one DELETE instead of S3A's HEAD, DELETE and LIST) against pyspark's, the S3A and
the Iceberg runtime's jars, into a jar named by the sources' hash; `./dev setup --tests` (or `--s3`) runs it once the
S3A jars are there. Without it, the s3 profile keeps S3A's delete (docs/maintenance.md#what-a-day-costs-on-s3).

    python -m etr_assets.lake.s3a_io   # compile them now (nothing to do when the jar is there)
"""

from __future__ import annotations

import sys
from pathlib import Path

from etr_assets.lake.local_fs import build_once, compile_jar
from etr_assets.lake.session import S3A_IO_SOURCES, S3A_JARS, iceberg_runtime_jar, jars_dir, s3a_io_jar, s3a_io_jar_path


def build() -> Path:
    """Compile java/s3a/ into `s3a_io_jar_path()`."""
    classpath = [str(jars_dir() / name) for name in S3A_JARS] + [iceberg_runtime_jar()]
    if missing := [jar for jar in classpath if not Path(jar).exists()]:
        raise FileNotFoundError(f"the s3 profile's classes compile against {', '.join(missing)}: not found")
    return compile_jar(list(S3A_IO_SOURCES), classpath, s3a_io_jar_path())


if __name__ == "__main__":
    sys.exit(build_once(s3a_io_jar(), build, "the s3 profile's single-request deletes were"))
