"""bench/s3_costs.py on two tiny days: the s3 profile on a counting moto server, every layer's requests counted by the
server and by the project itself (S3A's counters, the raw zone's client), which must agree."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from etr_assets_tests.infra import clean_env, require_s3_profile_jars

pytestmark = pytest.mark.slow  # a JVM of the s3 profile's jars in a subprocess: CI and ./dev test, not the fast tier

REPO = Path(__file__).resolve().parents[2]
MAINTAINED = "silver.bnpl_transactions_clean,landing.customers"


def test_s3_costs_counts_every_layers_requests_alike_at_the_server_and_in_the_metadata(tmp_path):
    from etr_assets_tests.conftest import AWS_TEST_REGION

    require_s3_profile_jars()
    env = clean_env(AWS_TEST_REGION) | {"ETR_BENCH_RESULTS": str(tmp_path), "ETR_SOURCE_DIRS": ""}
    # Weekly maintenance on day 2, of two tables (a day-partitioned one and an SCD2 history): what it does to each
    # table is alike, and all 17 took 50 s of the test's 270.
    command = [sys.executable, "-m", "bench.s3_costs", "2", "120", "60", "2", MAINTAINED]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "s3_costs.json").read_text())
    summary, days = result["summary"], result["days"]
    assert summary["reported_against_server"] == []  # S3A's and boto3's counts are the server's, layer by layer
    growth = {row["layer"]: row for row in summary["requests_day_1_against_day_n"]}
    assert set(growth) == {"raw fetch", "bronze", "landing", "silver", "gold", "checks", "maintenance"}
    assert all(row["day 1"] > 0 and row["verdict"] in ("met", "MISSED") for row in growth.values()), growth
    assert set(days[1]["maintained"]) >= set(MAINTAINED.split(",")) and not days[0]["maintained"]  # a maintenance day
    before, after = days[1]["storage_before_maintenance"], days[1]["storage_after_maintenance"]
    # Compaction adds files that expiry may delete the old ones of only once they are past the retention (7 days).
    assert after["stored_bytes"] > after["live_bytes"] > 0 and before["stored_bytes"] > before["live_bytes"]
    assert summary["amplification_after_maintenance"] == [after["amplification"]]
    # run_layer's metadata (what a materialization shows): the requests the server answered for that step
    reported = result["run_layer_figures"]
    assert reported["figures"]["s3_requests"] == sum(reported["server"].values()) > 0, reported
    assert reported["figures"]["s3_requests_put"] == reported["server"].get("PUT", 0)
    million = summary["at_a_million_a_day"]
    assert million["requests_usd_per_day"] > 0 and million["stored_gb_after_a_month"] > 0
