"""bench/health.py at a tiny size."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # whole-pipeline runs: CI and ./dev test, not the fast tier


def test_health_agrees_with_spark_as_the_table_grows(run):
    points = run("health")["tables"][0]["rows"]
    assert [p["growing"] for p in points] == ["rows"] * 3 + ["snapshots"] * 2
    assert points[-1]["snapshots"] > points[0]["snapshots"] and points[2]["rows"] > points[0]["rows"]
