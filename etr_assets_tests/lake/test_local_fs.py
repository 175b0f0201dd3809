"""The local profile's file system without a chmod process per file (lake/local_fs.py and its Java class)."""

from __future__ import annotations

import shutil
import stat
import zipfile

import pytest

from etr_assets.lake import local_fs, session
from etr_assets.lake.local_fs import build
from etr_assets.lake.session import LOCAL_FS_CLASS as CLASS
from etr_assets.lake.session import local_fs_jar, local_fs_jar_path, spark_conf
from etr_assets.settings import Settings


def test_the_local_profile_on_this_machine_uses_it_once_built(tmp_path, monkeypatch):
    jar = tmp_path / "etr-local-fs-0.jar"
    monkeypatch.setattr(session, "local_fs_jar", lambda: jar)
    conf = spark_conf(Settings(home=tmp_path))
    assert conf["spark.hadoop.fs.file.impl"] == CLASS
    assert conf["spark.driver.extraClassPath"] == conf["spark.executor.extraClassPath"] == str(jar)
    on_loopback = spark_conf(Settings(home=tmp_path, spark_master="spark://127.0.0.1:7077"))
    assert on_loopback["spark.executor.extraClassPath"] == str(jar)  # the executors of a cluster on this machine
    # Another machine's executors may lack the jar; the other profiles' warehouses are not on this disk.
    for other in (
        Settings(home=tmp_path, spark_master="spark://spark.internal:7077"),
        Settings(profile="s3", bucket="lake", jdbc_url="jdbc:postgresql://127.0.0.1/c"),
    ):
        assert not any(key == "spark.hadoop.fs.file.impl" or "extraClassPath" in key for key in spark_conf(other))
    monkeypatch.setattr(session, "local_fs_jar", lambda: None)  # not built (no javac): Hadoop's LocalFileSystem
    assert "spark.hadoop.fs.file.impl" not in spark_conf(Settings(home=tmp_path))


@pytest.mark.skipif(shutil.which("javac") is None, reason="no javac here: sessions keep Hadoop's LocalFileSystem")
def test_a_table_written_through_it_has_hadoops_permissions_and_no_checksum_files(spark, lake, settings):
    assert local_fs_jar() is not None, "./dev setup compiles it when javac is there"
    jvm = spark._jvm
    hadoop = spark._jsc.hadoopConfiguration()
    file_system = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), hadoop)
    assert file_system.getClass().getName() == CLASS
    table = f"{settings.catalog}.db.events"
    spark.sql(f"CREATE TABLE {table} (id BIGINT, day DATE) USING iceberg PARTITIONED BY (day)")
    spark.sql(f"INSERT INTO {table} VALUES (1, DATE'2025-01-01'), (2, DATE'2025-01-02')")
    assert spark.sql(f"SELECT count(*) FROM {table}").first()[0] == 2
    written = list((settings.home / "warehouse" / "db" / "events").rglob("*"))
    files = [p for p in written if p.is_file()]
    assert {p.parent.name for p in files} >= {"metadata", "day=2025-01-01", "day=2025-01-02"}
    assert not [p.name for p in files if p.name.endswith(".crc")]
    assert {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o644}  # Hadoop's defaults under its umask 022
    assert {stat.S_IMODE(p.stat().st_mode) for p in written if p.is_dir()} == {0o755}
    # Any permission Hadoop asks for, set as asked.
    target = settings.home / "warehouse" / "db" / "events" / "metadata"
    for mode in (0o700, 0o640, 0o751):
        permission = jvm.org.apache.hadoop.fs.permission.FsPermission(mode)
        file_system.setPermission(jvm.org.apache.hadoop.fs.Path(target.as_uri()), permission)
        assert stat.S_IMODE(target.stat().st_mode) == mode


@pytest.mark.slow  # javac: a JVM of its own
@pytest.mark.skipif(shutil.which("javac") is None, reason="no javac here")
def test_setup_compiles_the_class_into_a_jar_named_by_its_source_and_drops_older_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("ETR_JARS_DIR", str(tmp_path))
    older = tmp_path / "etr-local-fs-000000000000.jar"
    older.write_bytes(b"an older source's jar")
    assert local_fs_jar() is None
    jar = build()
    assert jar == local_fs_jar_path() == local_fs_jar() and jar.parent == tmp_path and not older.exists()
    with zipfile.ZipFile(jar) as archive:
        assert archive.namelist() == [CLASS.replace(".", "/") + ".class"]
    assert [p.name for p in tmp_path.iterdir()] == [jar.name]  # nothing half-written left beside it


def test_without_javac_setup_says_why_and_sessions_keep_hadoops(tmp_path, monkeypatch):
    monkeypatch.setenv("ETR_JARS_DIR", str(tmp_path))
    monkeypatch.setattr(local_fs.shutil, "which", lambda name: None)
    with pytest.raises(FileNotFoundError, match="javac"):
        build()
    assert local_fs_jar() is None and not list(tmp_path.iterdir())
