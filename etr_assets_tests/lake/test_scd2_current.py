"""The SCD2 state hash (`TableSpec.state_hash_sql`, stored on every version and compared by the daily path): equal
exactly when the tracked values are (NULL-safe), whatever types the batch brings. (The path's history is checked
against the in-order model and the recompute in test_scd2_log.)"""

from __future__ import annotations

from pyspark.sql import functions as F

from etr_assets.lake.frames import local_frame
from etr_assets_tests.lake.test_scd2 import SPEC


def fingerprints(spark, rows, schema="a string, b bigint"):
    df = local_frame(spark, rows, schema)
    return [r[0] for r in df.select(F.expr(SPEC.state_hash_sql)).collect()]


def test_null_positions_and_values_are_told_apart_and_equal_states_match(spark):
    states = [("x", None), (None, None), ("x", 1), ("1", None), (None, 1), ("", None), ("x", 1)]
    found = fingerprints(spark, states)
    assert found[2] == found[6]  # the same state twice
    assert len(set(found[:6])) == 6  # a NULL is not a value, and (x, NULL) is not (NULL, x)


def test_a_batch_typed_differently_from_the_table_gives_the_tables_fingerprint(spark):
    # The column is cast to the spec's type first: an int 7 from a batch equals the table's bigint 7.
    as_int = fingerprints(spark, [("x", 7)], "a string, b int")
    assert as_int == fingerprints(spark, [("x", 7)])
