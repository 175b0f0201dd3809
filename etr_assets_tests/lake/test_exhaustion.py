"""A JVM out of memory or disk becomes one line naming what to raise (etr_assets.lake.exhaustion)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from py4j.protocol import Py4JJavaError

from etr_assets.errors import ResourceExhausted
from etr_assets.lake.exhaustion import exhaustion
from etr_assets_tests.small_disk import small_disk

DOING = "building bronze.bnpl_transactions_raw for 2025-01-01"
CONF = {"spark.driver.memory": "1g", "spark.local.dir": "/lake/.etr/spark/local"}


def never_asked() -> int | None:
    raise AssertionError("the JVM's exit code was asked for a failure that is no hang-up")


def test_a_real_jvm_out_of_memory_error_is_one_line_naming_the_setting_and_its_value(spark):
    jvm = spark.sparkContext._jvm
    with pytest.raises(Py4JJavaError) as raised:  # thrown before anything is allocated: the session lives on
        jvm.java.lang.reflect.Array.newInstance(jvm.java.lang.Byte.TYPE, 2**31 - 1)

    exhausted = exhaustion(raised.value, DOING, CONF, never_asked)

    assert isinstance(exhausted, ResourceExhausted)
    assert str(exhausted) == (
        "the Spark driver ran out of memory (java.lang.OutOfMemoryError: Requested array size exceeds VM limit) "
        "while building bronze.bnpl_transactions_raw for 2025-01-01: raise ETR_SPARK_DRIVER_MEMORY (now 1g)"
    )


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (a device that is always full)")
def test_a_real_jvm_full_disk_names_the_scratch_folder_and_etr_home(spark):
    jvm = spark.sparkContext._jvm
    stream = jvm.java.io.FileOutputStream("/dev/full")
    try:
        with pytest.raises(Py4JJavaError) as raised:
            stream.write(0)
    finally:
        stream.close()

    message = str(exhaustion(raised.value, DOING, CONF, never_asked))

    assert message.startswith(
        "a disk ran out of space (java.io.IOException: No space left on device) while building "
        "bronze.bnpl_transactions_raw for 2025-01-01: the disk of /lake/.etr/spark/local (Spark's scratch folder, "
        "spark.local.dir) has "
    )  # not there yet: measured on the folder above it that exists
    assert message.endswith(": free space there, or point ETR_HOME at a larger disk, then run it again")
    assert "\n" not in message


def test_a_jvm_write_on_a_full_disk_names_that_disk_among_the_folders_the_run_writes_to(spark, tmp_path):
    conf = CONF | {"spark.local.dir": str(tmp_path / "scratch"), "spark.sql.catalog.c.warehouse": "s3://b/w"}
    with small_disk(tmp_path / "raw", size="1m") as disk:
        disk.fill()
        stream = spark.sparkContext._jvm.java.io.FileOutputStream(str(tmp_path / "raw" / "part-00001.jsonl"))
        try:
            with pytest.raises(Py4JJavaError) as raised:
                stream.write(bytearray(64 * 1024))
        finally:
            stream.close()
        message = str(
            exhaustion(raised.value, DOING, conf, never_asked, folders={str(tmp_path / "raw"): "the raw zone"})
        )

    assert message == (
        "a disk ran out of space (java.io.IOException: No space left on device) while building "
        f"bronze.bnpl_transactions_raw for 2025-01-01: the disk of {tmp_path / 'raw'} (the raw zone) has 0 B free "
        "of 1.0 MiB: free space there, or point ETR_HOME at a larger disk, then run it again"
    )  # the scratch folder's disk has room, and an object store (s3://) never fills


def test_a_python_write_on_a_full_disk_names_its_file(tmp_path):
    with small_disk(tmp_path / "raw", size="1m") as disk:
        disk.fill()
        with pytest.raises(OSError) as raised:
            with open(tmp_path / "raw" / "page.jsonl", "wb") as page:
                page.write(bytes(64 * 1024))
                page.flush()
        failure = OSError(raised.value.errno, raised.value.strerror, str(tmp_path / "raw" / "page.jsonl"))
        named = str(exhaustion(failure, "fetching", {}, never_asked, folders={str(tmp_path / "raw"): "the raw zone"}))

    assert named.startswith(
        "a disk ran out of space (OSError: [Errno 28] No space left on device) while fetching: the disk of "
        f"{tmp_path / 'raw' / 'page.jsonl'} (the raw zone) has 0 B free of 1.0 MiB"
    )


def test_an_out_of_memory_error_behind_a_cleanup_failure_is_still_found(spark):
    jvm = spark.sparkContext._jvm
    try:
        try:
            jvm.java.lang.reflect.Array.newInstance(jvm.java.lang.Byte.TYPE, 2**31 - 1)
        finally:
            raise RuntimeError("unpersisting the validated day failed")  # what a `finally` raises over it
    except RuntimeError as cleanup:
        failure = cleanup

    assert "raise ETR_SPARK_DRIVER_MEMORY (now 1g)" in str(exhaustion(failure, DOING, CONF, never_asked))


def test_a_jvm_that_died_of_out_of_memory_is_told_by_its_exit_code():
    hang_up = ConnectionRefusedError(111, "Connection refused")  # what py4j raises once a task's OOM ended the JVM

    assert str(exhaustion(hang_up, DOING, {"spark.driver.memory": "5888m"}, lambda: 52)) == (
        "the Spark driver ran out of memory (java.lang.OutOfMemoryError: the JVM exited with code 52) while "
        "building bronze.bnpl_transactions_raw for 2025-01-01: raise ETR_SPARK_DRIVER_MEMORY (now 5888m)"
    )
    assert exhaustion(hang_up, DOING, CONF, lambda: 1) is None  # died of something else
    assert exhaustion(hang_up, DOING, CONF, lambda: None) is None  # still running


def test_a_job_cancelled_by_the_jvms_shutdown_is_told_by_its_exit_code():
    # When the shutdown that the OutOfMemoryError began stops the SparkContext before py4j loses the JVM.
    cancelled = RuntimeError("Job 0 cancelled because SparkContext was shut down")

    assert "raise ETR_SPARK_DRIVER_MEMORY (now 1g)" in str(exhaustion(cancelled, DOING, CONF, lambda: 52))
    assert exhaustion(cancelled, DOING, CONF, lambda: 0) is None  # stopped on purpose


def test_other_failures_are_left_as_they_are(spark):
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException) as raised:
        spark.sql("SELECT * FROM no_such_catalog.no_db.no_table")

    assert exhaustion(raised.value, DOING, CONF, never_asked) is None
    assert exhaustion(ValueError("bad input"), DOING, CONF, never_asked) is None


@pytest.mark.slow  # a JVM of its own, ended by the error
def test_etr_sql_out_of_heap_prints_one_line_naming_the_setting(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ETR_")}
    env |= {"ETR_HOME": str(tmp_path / "etr"), "ETR_SPARK_DRIVER_MEMORY": "512m", "PYTHONWARNINGS": "ignore"}
    query = "SELECT length(repeat('x', 1500000000 + CAST(id AS INT))) FROM range(1)"  # a task needs 1.5 GB

    done = subprocess.run(
        [Path(sys.executable).parent / "etr", "sql", query], env=env, capture_output=True, text=True, timeout=180
    )

    assert done.returncode == 1, done.stderr[-2000:]
    said = [line for line in done.stderr.splitlines() if line.startswith("etr sql:")]
    assert said[0].startswith("etr sql: starting Spark")  # at once, before the JVM's long start
    line = said[-1]
    assert line.startswith("etr sql: the Spark driver ran out of memory (java.lang.OutOfMemoryError")
    assert line.endswith("while running the query: raise ETR_SPARK_DRIVER_MEMORY (now 512m)")
