"""The pending-batch sensor, evaluated against a real raw zone on disk and a real Dagster instance (SQLite): which
days it re-runs, as which named job, when (at once after a failed run, else past the threshold) and how often. The
same with real runs under the daemon's code path: test_pending_retries.py."""

import datetime as dt
import shutil
import subprocess
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance, SensorResult, SkipReason, build_sensor_context, job, op

from etr_assets.defs.assets import MAX_TRIES, STALE_TAG, TRY_TAG
from etr_assets.defs.resources import RawZoneResource
from etr_assets.defs.run_guard import PID_TAG, worker_tags
from etr_assets.settings import Settings
from etr_assets.sources.raw_zone import local_raw_zone

CONF = Path(__file__).resolve().parents[2] / "etr_assets" / "conf" / "dagster.yaml"


def build_pending_batches_sensor(settings: Settings):
    """The sensor as the code location builds it with `settings` (with its jobs)."""
    from etr_assets.definitions import build_definitions

    return build_definitions(settings).get_repository_def().get_sensor_def("raw_pending_batches")


@pytest.fixture
def instance(tmp_path):
    home = tmp_path / "dagster"
    home.mkdir()
    shutil.copy(CONF, home / "dagster.yaml")
    with DagsterInstance.from_config(str(home)) as instance:
        yield instance


def evaluate(settings: Settings, instance: DagsterInstance):
    with build_sensor_context(
        instance=instance, resources={"raw_zone": RawZoneResource(root=settings.raw_root)}
    ) as context:
        return build_pending_batches_sensor(settings)(context)


@op
def noop():
    pass


@job
def a_job():
    noop()


def a_run(instance: DagsterInstance, status: str, tags: dict[str, str] | None = None) -> str:
    """A run record of `status` (STARTED, SUCCESS, FAILURE or CANCELED), as Dagster records each."""
    from dagster._core.events import DagsterEvent, DagsterEventType

    run = instance.create_run_for_job(a_job, tags=tags or {})
    for kind in ["RUN_START"] + ([f"RUN_{status}"] if status != "STARTED" else []):
        event = DagsterEvent(DagsterEventType[kind].value, job_name=run.job_name)
        instance.handle_run_event(run.run_id, event)
    return run.run_id


def test_reports_and_reruns_only_batches_pending_past_the_threshold(tmp_path, instance):
    settings = Settings(home=tmp_path, pending_alert_hours=6)
    raw = local_raw_zone(settings.raw_root)
    now = dt.datetime.now(dt.UTC)
    old_sealed = raw.start_batch("bnpl", "transactions", dt.date(2025, 1, 2), now=now - dt.timedelta(hours=8))
    raw.seal(old_sealed, [], 0)
    old_cut_off = raw.start_batch("bnpl", "customers", dt.date(2025, 1, 3), now=now - dt.timedelta(hours=7))
    recent = raw.start_batch("bnpl", "transactions", dt.date(2025, 1, 4), now=now - dt.timedelta(hours=1))
    raw.seal(recent, [], 0)
    done = raw.start_batch("bnpl", "merchants", dt.date(2025, 1, 1), now=now - dt.timedelta(days=2))
    raw.seal(done, [], 0)
    raw.mark_complete(done)

    result = evaluate(settings, instance)
    assert isinstance(result, SensorResult)
    requests = {r.run_key: r for r in result.run_requests}
    assert set(requests) == {old_sealed.key, old_cut_off.key}  # no run known: the threshold decides
    downloaded = requests[old_sealed.key]
    assert downloaded.partition_key == "2025-01-02"
    assert AssetKey(["raw", "bnpl_transactions"]) not in downloaded.asset_selection  # reload, no refetch
    assert AssetKey(["bronze", "bnpl_transactions_raw"]) in downloaded.asset_selection
    assert downloaded.job_name == "etr_pipeline"  # silver and gold follow a transactions day: the whole pipeline's job
    assert downloaded.tags == {STALE_TAG: old_sealed.key}
    cut_off = requests[old_cut_off.key]
    assert cut_off.asset_selection[0] == AssetKey(["raw", "bnpl_customers"])  # download again
    assert AssetKey(["landing", "customers"]) in cut_off.asset_selection
    assert cut_off.job_name == "bnpl_ingest"  # raw, bronze and history: the source's own job


def test_skips_with_a_reason_when_nothing_is_stale(tmp_path, instance):
    result = evaluate(Settings(home=tmp_path), instance)
    assert isinstance(result, SkipReason)
    assert result.skip_message == "no raw batch whose run failed or pending longer than 6 h"


def test_a_batch_whose_run_ended_in_failure_is_retried_at_once_a_bounded_number_of_times(tmp_path, instance):
    """Batches a few minutes old: each day's newest batch is re-run at once if the run that had it failed, was
    canceled, or died (its process gone); not while its run goes on, nor when it succeeded (the threshold then)."""
    settings = Settings(home=tmp_path, pending_alert_hours=6)
    raw = local_raw_zone(settings.raw_root)
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    gone = subprocess.Popen(["true"])
    gone.wait()

    def batch(endpoint: str, day: int, run_id: str | None, sealed: bool = True, later: int = 0):
        at = now + dt.timedelta(seconds=later)
        started = raw.start_batch("bnpl", endpoint, dt.date(2025, 1, day), now=at, run_id=run_id)
        if sealed:
            raw.seal(started, [], 0)
        return started

    failed = batch("transactions", 1, a_run(instance, "FAILURE"))
    canceled = batch("customers", 1, a_run(instance, "CANCELED"), sealed=False)
    dead = batch("merchants", 1, a_run(instance, "STARTED", worker_tags() | {PID_TAG: str(gone.pid)}))
    running = batch("transactions", 2, a_run(instance, "STARTED", worker_tags()))  # this process: alive
    succeeded = batch("customers", 2, a_run(instance, "SUCCESS"))  # a raw-only run: the load may come later
    older = batch("merchants", 3, a_run(instance, "FAILURE"))
    newer = batch("merchants", 3, a_run(instance, "STARTED", worker_tags()), later=1)  # the day's newest decides

    requests = {r.tags[STALE_TAG]: r for r in evaluate(settings, instance).run_requests}
    assert set(requests) == {failed.key, canceled.key, dead.key}
    assert {r.tags[TRY_TAG] for r in requests.values()} == {"1"}
    assert requests[failed.key].run_key == f"{failed.key}#1" and requests[failed.key].job_name == "etr_pipeline"
    assert requests[canceled.key].asset_selection[0] == AssetKey(["raw", "bnpl_customers"])
    assert requests[dead.key].job_name == "bnpl_ingest"
    assert not {running.key, succeeded.key, older.key, newer.key} & set(requests)

    # Each re-run that fails is followed by the next, counted along the batch's runs, up to MAX_TRIES.
    for attempt in range(1, MAX_TRIES):
        a_run(instance, "FAILURE", {STALE_TAG: failed.key, TRY_TAG: str(attempt)})
        (request,) = [r for r in evaluate(settings, instance).run_requests if r.tags[STALE_TAG] == failed.key]
        assert request.tags[TRY_TAG] == str(attempt + 1) and request.run_key == f"{failed.key}#{attempt + 1}"
    # A re-run from raw makes a new batch, started by that run: the count follows it there.
    retry = a_run(instance, "FAILURE", {STALE_TAG: canceled.key, TRY_TAG: "1"})
    refetched = batch("customers", 1, retry, sealed=False, later=1)
    (request,) = [r for r in evaluate(settings, instance).run_requests if r.tags[STALE_TAG] == refetched.key]
    assert request.tags[TRY_TAG] == "2"

    a_run(instance, "FAILURE", {STALE_TAG: failed.key, TRY_TAG: str(MAX_TRIES)})
    later = evaluate(settings, instance)
    assert failed.key not in {r.tags[STALE_TAG] for r in later.run_requests}
    a_run(instance, "STARTED", {STALE_TAG: refetched.key, TRY_TAG: "2", **worker_tags()})
    a_run(instance, "SUCCESS", {STALE_TAG: dead.key, TRY_TAG: "1"})
    last = evaluate(settings, instance)
    assert isinstance(last, SkipReason), last
    assert f"given up after {MAX_TRIES} re-runs: {failed.key}" in last.skip_message
    assert "waiting for their run: " in last.skip_message
    assert all(key in last.skip_message for key in (running.key, refetched.key, newer.key))


def test_every_declared_source_is_watched_without_a_list_kept_by_hand(tmp_path, instance):
    """The suite's second API (declared in YAML only): its cut-off batches are fetched again, its histories rebuilt."""
    settings = Settings(home=tmp_path, pending_alert_hours=6)
    raw = local_raw_zone(settings.raw_root)
    old = dt.datetime.now(dt.UTC) - dt.timedelta(hours=9)
    stores = raw.start_batch("stores", "stores", dt.date(2025, 1, 2), now=old)
    checkins = raw.start_batch("stores", "checkins", dt.date(2025, 1, 2), now=old)
    raw.seal(checkins, [], 0)

    requests = {r.run_key: r for r in evaluate(settings, instance).run_requests}
    assert requests[stores.key].job_name == requests[checkins.key].job_name == "stores_ingest"
    assert requests[stores.key].asset_selection == [
        AssetKey(["raw", "stores_stores"]),
        AssetKey(["bronze", "stores_stores"]),
        AssetKey(["landing", "stores_stores"]),
    ]
    assert requests[checkins.key].asset_selection == [AssetKey(["bronze", "stores_checkins"])]
