"""Rows made in the process become a one-partition frame with their exact values."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest

from etr_assets.lake.bootstrap import iceberg_type
from etr_assets.lake.frames import _EXACT_TEXT, local_frame, spark_type
from etr_assets.lake.specs import SIMPLE_TYPES

SCHEMA = "id bigint, note string, day date, at timestamp, amount decimal(13,2), missing string, rate double, ok boolean"


def test_a_local_frame_keeps_every_value_exactly_in_one_partition(spark):
    row = (
        1,
        'it\'s "quoted" \\ and ünïcode',
        dt.date(2025, 1, 2),
        dt.datetime(2025, 1, 2, 3, 4, 5, 123456),
        decimal.Decimal("12345678901.23"),
        None,
        1.5,
        True,
    )
    frame = local_frame(spark, [row, dict(zip(frame_names(), row, strict=True))], SCHEMA)
    assert frame.rdd.getNumPartitions() == 1
    assert [tuple(r) for r in frame.collect()] == [row, row]
    assert local_frame(spark, [], SCHEMA).count() == 0


def frame_names():
    return [part.split()[0] for part in SCHEMA.split(", ")]


def test_a_value_json_cannot_carry_is_refused_naming_it(spark):
    with pytest.raises(TypeError, match="cannot put set"):
        local_frame(spark, [(1, {"a"})], "id bigint, tags string")
    with pytest.raises(ValueError, match="Out of range float"):
        local_frame(spark, [(float("nan"),)], "rate double")


@pytest.mark.parametrize("name", SIMPLE_TYPES)
def test_each_simple_type_is_one_entry_that_spark_and_iceberg_both_resolve(name):
    """A type added to specs.SIMPLE_TYPES needs nothing else than its exact-text pattern (strings need none)."""
    assert spark_type(name).simpleString() == name  # the Spark class is the one Spark SQL calls `name`
    assert iceberg_type(name, "t.c").is_primitive
    assert name == "string" or name in _EXACT_TEXT
