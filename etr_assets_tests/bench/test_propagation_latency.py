"""bench/propagation_latency.py on two small days, through a real daemon."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # whole-pipeline runs: CI and ./dev test, not the fast tier


def test_propagation_latency_times_a_correction_through_the_daemon():
    """bench.propagation_latency on 2 days of 20 transactions: a real daemon, its sensor's runs, the figure's split
    (about 3 minutes: four runs of a JVM each; the sensor ticks every 5 s instead of each minute, which only shortens
    the wait for the tick that acts, 36 s of 177 at load 4; no wait for a tick after the last)."""
    from bench import propagation_latency

    found = propagation_latency.main(days=2, per_day=20, timeout=900, confirm=False, tick_every=5)
    assert found["build"]["status"] == found["correction"]["status"] == "SUCCESS", found
    assert not found["timed_out"] and not found["out_of_date_at_the_end"], found
    jobs = [r["job"] for r in found["runs"]]
    assert "flag_out_of_date" in jobs and jobs.count("rederive_gold") >= 2, found["runs"]
    assert all(r["status"] == "SUCCESS" for r in found["runs"] if r["job"] == "rederive_gold"), found["runs"]
    assert {r["propagates"] for r in found["runs"] if r["job"] == "rederive_gold"} >= {
        "gold/bnpl_daily_summary 2025-01-01...2025-01-01",
        "gold/customer_activity, gold/customer_profiles 2025-01-01...2025-01-02",
    }
    split = found["split"]
    assert found["latency_seconds"] > 0 and all(v is not None for v in split.values()), split
    assert sum(split.values()) == pytest.approx(found["latency_seconds"], abs=0.5)
    assert len(found["load_average"]["end"]) == 3
