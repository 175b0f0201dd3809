"""bench/silver_layout.py at a tiny size: each layout timed on every operation."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # whole-pipeline runs: CI and ./dev test, not the fast tier


def test_silver_layout_times_each_layout_on_every_operation(spark):
    """Each layout is a table of its own, ordered and grouped as named, and timed on every operation beside the
    Parquet rewrites."""
    from bench import silver_layout

    found = silver_layout.main(2, 2_000, 1)
    layouts = found["layouts"]
    assert layouts["the spec's"] == {
        "sort-order": "transaction_date ASC NULLS FIRST, status ASC NULLS FIRST, customer_id ASC NULLS FIRST",
        "write.parquet.row-group-size-bytes": str(8 * 1024 * 1024),
    }
    before = layouts["by customer, 128 MiB row groups (silver before)"]
    assert before["sort-order"] == "transaction_date ASC NULLS FIRST, customer_id ASC NULLS FIRST", before
    operations = {
        "one day's PENDING update",
        "delete one customer",
        "scattered 1% update",
        "daily write (replace_days)",
        "full scan",
    }
    timed = {f"{name}: {operation}" for name in silver_layout.LAYOUTS for operation in operations}
    rewrites = {"Parquet rewrite: one day's PENDING update", "Parquet rewrite: delete one customer"}
    assert set(found["seconds"]) == timed | rewrites and min(found["seconds"].values()) > 0, found
    assert all(r > 0 for r in found["parquet_rewrite_over_iceberg"].values()), found
