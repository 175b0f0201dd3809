"""A fetch that failed is retried at the pending-batch sensor's next tick, as a named job, at most MAX_TRIES times.

The night's run fetches a day of transactions from the synthetic API, which refuses them (400: not retried by the
client), so the run fails leaving the day's batch pending, started by that run. Then, under the daemon's code path
with a real code server (`etr_assets_tests/daemon.py`), each tick of `raw_pending_batches` must queue a re-run of the
day at once (the batch is minutes old, far from ETR_PENDING_ALERT_HOURS) as `etr_pipeline` from raw, and be a
SUCCESS; each re-run is launched for real and fails the same way (the API still refuses); after MAX_TRIES re-runs the
tick is SKIPPED, saying it gave up, and no further run is queued. No JVM starts: every run fails in its raw step.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance, DagsterRunStatus
from dagster._core.scheduler.instigation import TickStatus

from etr_assets.defs.assets import MAX_TRIES, STALE_TAG, TRY_TAG
from etr_assets.settings import Settings
from etr_assets.sources.raw_zone import local_raw_zone
from etr_assets.sources.synthetic_api import ApiConfig, serve
from etr_assets.sources.synthetic_faults import ApiFaults
from etr_assets_tests.daemon import launch_queued, tick, workspace
from etr_assets_tests.test_cli_subprocess import isolated_env, prepare_instance

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DAY = "2025-01-01"
REFUSED = ApiFaults(fail_requests=10**6, fail_status=400, fail_path_prefix="/v1/transactions")
RERUN = {
    AssetKey(["raw", "bnpl_transactions"]),
    AssetKey(["bronze", "bnpl_transactions_raw"]),
    AssetKey(["silver", "bnpl_transactions_clean"]),
    AssetKey(["gold", "bnpl_daily_summary"]),
}


def finished(instance: DagsterInstance, run_id: str, timeout: float = 180):
    deadline = time.monotonic() + timeout
    while not (run := instance.get_run_by_id(run_id)).is_finished:
        assert time.monotonic() < deadline, f"run {run_id} still {run.status} after {timeout:.0f} s"
        time.sleep(0.5)
    return run


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_failed_fetch_is_retried_at_the_next_tick_as_etr_pipeline_then_given_up(tmp_path, monkeypatch):
    with serve(ApiConfig(transactions_per_day=30), faults=REFUSED) as api:
        env = isolated_env(tmp_path, PYTHONWARNINGS="ignore", ETR_API_URL=api.url, ETR_API_TOKEN=api.config.token)
        for name, value in env.items():  # the code server this test starts, and the runs it launches, inherit it
            monkeypatch.setenv(name, value)
        prepare_instance(env)
        night = subprocess.run(
            [str(BIN / "dagster"), "asset", "materialize", "-m", "etr_assets.definitions"]
            + ["--select", "raw/bnpl_transactions", "--partition", DAY],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert night.returncode != 0, night.stdout[-2000:]
        raw = local_raw_zone(Settings.from_env(env).raw_root)

        with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance, workspace(instance, grpc=True) as context:
            (first,) = instance.get_runs()
            assert first.status == DagsterRunStatus.FAILURE
            (pending,) = raw.open_batches("bnpl", "transactions", dt.datetime.now(dt.UTC))
            assert (pending.run_id, pending.sealed) == (first.run_id, False)  # the batch knows its run
            assert pending.age < dt.timedelta(hours=1)

            retries = []
            for attempt in range(1, MAX_TRIES + 1):
                acted = tick(context, "raw_pending_batches")
                assert acted.status == TickStatus.SUCCESS, (acted.status, acted.skip_reason, acted.error)
                (run_id,) = acted.run_ids
                retry = instance.get_run_by_id(run_id)
                assert retry.job_name == "etr_pipeline", "a named job, not an anonymous asset job"
                assert retry.asset_selection == RERUN  # the download never finished: from raw
                assert retry.tags["dagster/partition"] == DAY and retry.tags[TRY_TAG] == str(attempt)
                assert retry.tags[STALE_TAG].startswith(f"bnpl/transactions/{DAY}_")
                assert launch_queued(context) == [run_id]
                retries.append(finished(instance, run_id))
                assert retries[-1].status == DagsterRunStatus.FAILURE  # the API still refuses

            idle = tick(context, "raw_pending_batches")
            assert idle.status == TickStatus.SKIPPED and not idle.run_ids
            assert f"given up after {MAX_TRIES} re-runs: " in idle.skip_reason
            # Each re-run fetched the day again, into a batch that names it; the newest names the last re-run.
            batches = raw.open_batches("bnpl", "transactions", dt.datetime.now(dt.UTC))
            assert [b.run_id for b in batches] == [first.run_id, *(r.run_id for r in retries)]
            assert len(instance.get_runs()) == 1 + MAX_TRIES
