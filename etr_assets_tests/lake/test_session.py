"""Spark configuration per profile (the aws profile cannot run here, so its configuration is what we test)."""

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from etr_assets import settings as settings_module
from etr_assets.errors import JarNotFound, NotAnIcebergSession, SettingsError
from etr_assets.lake.scd2 import ADAPTIVE
from etr_assets.lake.session import (
    ICEBERG_EXTENSIONS,
    attach_catalog,
    iceberg_runtime_jar,
    java_elements,
    session_conf,
    spark_conf,
)
from etr_assets.settings import Compute, Profile, Settings, driver_memory_for


def test_iceberg_runtime_comes_from_the_wheel():
    jar = Path(iceberg_runtime_jar())
    assert jar.exists() and jar.name.startswith("iceberg-spark-runtime-3.5_2.12-1.10.")


def test_local_profile_is_a_quiet_small_hadoop_catalog(tmp_path):
    conf = spark_conf(Settings(home=tmp_path))
    assert conf["spark.sql.catalog.etr"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.etr.type"] == "hadoop"
    assert conf["spark.sql.catalog.etr.warehouse"] == (tmp_path / "warehouse").as_uri()
    assert conf["spark.sql.defaultCatalog"] == "etr"
    assert conf["spark.sql.extensions"] == ICEBERG_EXTENSIONS
    assert conf["spark.jars"] == iceberg_runtime_jar()
    assert conf["spark.ui.enabled"] == "false" and conf["spark.sql.shuffle.partitions"] == "4"
    assert conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert "log4j2.properties" in conf["spark.driver.extraJavaOptions"]
    assert conf["spark.local.dir"].startswith(str(tmp_path))


def test_aws_profile_uses_glue_and_s3fileio_with_the_platforms_iceberg():
    conf = spark_conf(Settings(profile="aws", bucket="etr-lake", region="ap-southeast-5", catalog="glue_catalog"))
    prefix = "spark.sql.catalog.glue_catalog"
    assert conf[prefix] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf[f"{prefix}.catalog-impl"] == "org.apache.iceberg.aws.glue.GlueCatalog"
    assert conf[f"{prefix}.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert conf[f"{prefix}.warehouse"] == "s3://etr-lake/warehouse"
    assert conf[f"{prefix}.client.region"] == "ap-southeast-5"
    assert conf["spark.sql.extensions"] == ICEBERG_EXTENSIONS
    assert "spark.jars" not in conf  # Glue 5.0 / EMR ship Iceberg (--datalake-formats iceberg)
    assert not any(key.startswith("spark.hadoop.fs.s3a") for key in conf)
    assert "spark.driver.bindAddress" in conf  # local[2] by default; a cluster master drops it
    cluster = spark_conf(Settings(profile="aws", bucket="b", spark_master="yarn"))
    assert "spark.driver.bindAddress" not in cluster


def test_users_can_bring_their_own_jars_or_maven_coordinates():
    own = spark_conf(Settings(spark_jars=("/opt/jars/iceberg.jar",)))
    assert own["spark.jars"] == "/opt/jars/iceberg.jar"
    maven = spark_conf(Settings(spark_packages=("org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.7.1",)))
    assert maven["spark.jars.packages"].endswith(":1.7.1") and "spark.jars" not in maven


def test_s3_profile_names_the_jars_it_lacks(tmp_path, monkeypatch):
    monkeypatch.setenv("ETR_JARS_DIR", str(tmp_path))
    with pytest.raises(JarNotFound, match="hadoop-aws-3.3.1.jar"):
        spark_conf(Settings(profile="s3", bucket="b", jdbc_url="jdbc:postgresql://127.0.0.1:5432/etr"))


def test_a_session_without_the_iceberg_extensions_is_refused_saying_how_to_make_one(tmp_path):
    plain = SimpleNamespace(sparkContext=SimpleNamespace(getConf=lambda: {"spark.sql.extensions": ""}))
    with pytest.raises(NotAnIcebergSession, match="get_spark"):
        attach_catalog(plain, Settings(home=tmp_path))


def test_a_setting_changed_for_a_block_is_the_sessions_own_again_after_it_fails(spark):
    before = spark.conf.get(ADAPTIVE)
    other = "true" if before == "false" else "false"  # the suite's sessions already run without it
    with pytest.raises(RuntimeError, match="the block failed"), session_conf(spark, ADAPTIVE, other):
        assert spark.conf.get(ADAPTIVE) == other
        raise RuntimeError("the block failed")
    assert spark.conf.get(ADAPTIVE) == before


def test_a_java_collection_is_read_to_its_end_without_a_java_exception(spark, monkeypatch):
    from pyspark.errors.exceptions import captured

    converted = []  # every Java exception pyspark turns into a Python one (what py4j's own iteration ends with)
    convert = captured.convert_exception
    monkeypatch.setattr(captured, "convert_exception", lambda error: converted.append(error) or convert(error))
    values = spark._jvm.java.util.ArrayList()
    for value in ("a", "b", "c"):
        values.add(value)
    assert (
        list(java_elements(values)) == ["a", "b", "c"] and list(java_elements(spark._jvm.java.util.ArrayList())) == []
    )
    assert converted == []
    list(values)  # py4j's iteration: the exception this avoids
    assert len(converted) == 1


def test_settings_come_from_documented_variables(tmp_path):
    settings = Settings.from_env(
        {
            "ETR_HOME": str(tmp_path),
            "ETR_PROFILE": "local",
            "ETR_START_DATE": "2024-06-01",
            "ETR_API_TRANSACTIONS_PER_DAY": "15",
            "ETR_SPARK_JARS": "/a.jar, /b.jar",
        }
    )
    assert settings.home == tmp_path and settings.start_date.isoformat() == "2024-06-01"
    assert settings.api_transactions_per_day == 15 and settings.spark_jars == ("/a.jar", "/b.jar")
    assert Settings.from_env({}).home == Path(".etr").absolute()
    assert settings.profile is Profile.LOCAL and settings.compute is Compute.LOCAL  # the enums, not their text


@pytest.mark.parametrize(
    "env, message",
    [
        ({"ETR_PROFILE": "gcp"}, "ETR_PROFILE='gcp' is not one of local, s3, aws"),
        ({"ETR_PROFILE": "aws"}, "ETR_PROFILE=aws needs ETR_S3_BUCKET"),
        ({"ETR_PROFILE": "s3", "ETR_S3_BUCKET": "b"}, "ETR_PROFILE=s3 needs ETR_JDBC_URL"),
        ({"ETR_START_DATE": "yesterday"}, "ETR_START_DATE='yesterday' is not a date"),
        ({"ETR_API_TRANSACTIONS_PER_DAY": "many"}, "ETR_API_TRANSACTIONS_PER_DAY='many' is not an integer"),
        ({"ETR_CATALOG": "my-catalog"}, "ETR_CATALOG='my-catalog' must be a plain identifier"),
        ({"ETR_COMPUTE": "subprocess"}, "ETR_COMPUTE='subprocess' is not one of local, glue, emr-serverless"),
    ],
)
def test_bad_settings_name_the_variable(env, message):
    with pytest.raises(SettingsError) as failure:
        Settings.from_env(env)
    assert message in str(failure.value)


def test_a_cluster_master_gets_no_driver_only_paths():
    on_loopback = spark_conf(Settings(spark_master="spark://127.0.0.1:7077", executor_memory="512m"))
    assert on_loopback["spark.driver.bindAddress"] == "127.0.0.1"  # the worker on this machine calls back here
    assert on_loopback["spark.executor.memory"] == "512m"
    # Executors may run elsewhere: no file of this machine in their JVM options (the log4j file is the driver's).
    assert on_loopback["spark.executor.extraJavaOptions"] == "-Duser.timezone=UTC"
    remote = spark_conf(Settings(spark_master="spark://spark-master.internal:7077"))
    assert "spark.driver.bindAddress" not in remote and "spark.executor.memory" not in remote


@pytest.mark.parametrize(
    ("machine_gib", "heap"),
    [(None, "1g"), (2, "1g"), (4, "1g"), (8, "2g"), (16, "4g"), (23.54, "5888m"), (24, "6g"), (32, "8g"), (256, "8g")],
)
def test_the_driver_heap_is_a_quarter_of_the_machine_between_1g_and_8g(machine_gib, heap):
    assert driver_memory_for(None if machine_gib is None else int(machine_gib * 2**30)) == heap


def test_an_unset_driver_memory_is_sized_from_the_machine_and_a_set_one_is_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(settings_module, "machine_memory_bytes", lambda: 16 * 2**30)
    assert spark_conf(Settings.from_env({"ETR_HOME": str(tmp_path)}))["spark.driver.memory"] == "4g"
    given = Settings.from_env({"ETR_HOME": str(tmp_path), "ETR_SPARK_DRIVER_MEMORY": "1536m"})
    assert spark_conf(given)["spark.driver.memory"] == "1536m"


def test_a_container_limit_below_the_machine_bounds_the_heap(tmp_path, monkeypatch):
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    v2.write_text("max\n")  # cgroup v2 without a limit
    v1.write_text(f"{3 * 2**30}\n")
    monkeypatch.setattr(settings_module, "CGROUP_LIMITS", (str(v2), str(v1)))
    assert settings_module.machine_memory_bytes() == 3 * 2**30
    v1.write_text(f"{2**62}\n")  # cgroup v1 without a limit: a huge number
    assert settings_module.machine_memory_bytes() == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
