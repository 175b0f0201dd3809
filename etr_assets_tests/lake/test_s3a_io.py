"""The s3 profile's single-request deletes (lake/s3a_io.py and java/s3a/): in the session's settings once built, S3A
and Hadoop's FileIO as they are without; s3/test_maintenance_s3.py counts the requests at a server."""

from __future__ import annotations

import pytest

from etr_assets.lake import s3a_io, session
from etr_assets.lake.session import S3A_FS_CLASS, S3A_IO_CLASS, spark_conf
from etr_assets.settings import Settings

S3 = {"profile": "s3", "bucket": "lake", "jdbc_url": "jdbc:postgresql://127.0.0.1/c"}


def test_the_s3_profile_deletes_through_them_once_built_and_through_s3a_without(tmp_path, monkeypatch):
    jar = tmp_path / "etr-s3a-io-0.jar"
    monkeypatch.setattr(session, "s3_profile_jars", lambda: ["hadoop-aws.jar", "aws-sdk.jar", "postgresql.jar"])
    monkeypatch.setattr(session, "s3a_io_jar", lambda: jar)
    conf = spark_conf(Settings(home=tmp_path, **S3))
    assert conf["spark.hadoop.fs.s3a.impl"] == S3A_FS_CLASS
    assert conf["spark.sql.catalog.etr.io-impl"] == S3A_IO_CLASS
    assert conf["spark.jars"].split(",")[-1] == str(jar)
    monkeypatch.setattr(session, "s3a_io_jar", lambda: None)  # not built: S3A's delete, Iceberg's HadoopFileIO
    conf = spark_conf(Settings(home=tmp_path, **S3))
    assert conf["spark.hadoop.fs.s3a.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert "spark.sql.catalog.etr.io-impl" not in conf and str(jar) not in conf["spark.jars"]
    # The other profiles: the local file system's own; S3FileIO on AWS.
    assert not any(S3A_IO_CLASS in value or S3A_FS_CLASS in value for value in spark_conf(Settings()).values())


def test_without_the_s3a_jars_setup_says_which_are_missing_and_builds_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("ETR_JARS_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"hadoop-aws-3\.3\.1\.jar.*not found"):
        s3a_io.build()
    assert session.s3a_io_jar() is None and not list(tmp_path.iterdir())
