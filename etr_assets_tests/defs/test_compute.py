"""The layer runner in process: a JVM out of memory fails the run with one line naming the setting."""

from types import SimpleNamespace

import pytest
from dagster import Failure

from etr_assets.defs import compute
from etr_assets.pipeline.layers import LayerRequest


def test_a_layer_out_of_heap_fails_with_one_line_naming_the_setting(spark, monkeypatch):
    jvm = spark.sparkContext._jvm

    def out_of_heap(*args, **kwargs):  # a real JVM error, thrown before anything is allocated
        jvm.java.lang.reflect.Array.newInstance(jvm.java.lang.Byte.TYPE, 2**31 - 1)

    monkeypatch.setattr(compute, "run_layer", out_of_heap)
    lake = SimpleNamespace(
        session=lambda: spark, catalog="etr", spark=SimpleNamespace(spark_config={"spark.driver.memory": "1g"})
    )
    request = LayerRequest("bronze/bnpl_transactions_raw", ["2025-01-01", "2025-01-02"])
    context = SimpleNamespace(run=SimpleNamespace(run_id="r1"))

    with pytest.raises(Failure) as failed:
        list(compute.LayerRunner()._run_here(context, lake, SimpleNamespace(zone=None, root="/lake/raw"), request))

    assert failed.value.description == (
        "the Spark driver ran out of memory (java.lang.OutOfMemoryError: Requested array size exceeds VM limit) "
        "while building bronze.bnpl_transactions_raw for 2025-01-01..2025-01-02: raise ETR_SPARK_DRIVER_MEMORY "
        "(now 1g)"
    )
    assert failed.value.__cause__ is None and failed.value.__suppress_context__  # no Java stack chained to it


def test_other_layer_failures_pass_through_unchanged(spark, monkeypatch):
    def bad_input(*args, **kwargs):
        raise ValueError("raw batch x: 3 of 4 records refused")

    monkeypatch.setattr(compute, "run_layer", bad_input)
    lake = SimpleNamespace(session=lambda: spark, catalog="etr", spark=SimpleNamespace(spark_config={}))
    request = LayerRequest("bronze/bnpl_transactions_raw", ["2025-01-01"])

    context, raw_zone = SimpleNamespace(run=SimpleNamespace(run_id="r1")), SimpleNamespace(zone=None, root="/lake/raw")

    with pytest.raises(ValueError, match="3 of 4 records refused"):
        list(compute.LayerRunner()._run_here(context, lake, raw_zone, request))
