"""A run whose process died frees its pool slots and ends as failed, with no one freeing them by hand.

A real Dagster instance (SQLite storage with pools) holds a STARTED run whose worker process is gone and a pool
slot it claimed; the `dead_runs` sensor (and every run's executor, through `reap_dead_runs`) must fail the run and
free the slot, and leave alone a run whose process lives and a run of another host. The kill of a real run inside
a pooled step is in test_pools.py.
"""

from __future__ import annotations

import subprocess

from dagster import DagsterInstance, DagsterRunStatus, build_sensor_context, job, op

from etr_assets.defs.run_guard import HOST_TAG, PID_TAG, dead_runs_sensor, reap_dead_runs, worker_tags

POOL = "iceberg_bronze_example"


@op
def noop():
    pass


@job
def example():
    noop()


def started_run(instance, tags):
    run = instance.create_run_for_job(example, tags=tags)
    instance.handle_run_event(run.run_id, _start_event(run))
    instance.event_log_storage.claim_concurrency_slot(POOL, run.run_id, "noop")
    return run.run_id


def _start_event(run):
    from dagster._core.events import DagsterEvent, DagsterEventType

    return DagsterEvent(DagsterEventType.RUN_START.value, job_name=run.job_name)


def test_a_dead_run_is_failed_and_its_slot_freed_and_live_or_foreign_runs_are_left_alone(tmp_path):
    finished = subprocess.Popen(["true"])
    finished.wait()  # a process that existed and is gone
    dead_tags = {**worker_tags(), PID_TAG: str(finished.pid)}
    with DagsterInstance.from_config(str(_home(tmp_path))) as instance:
        instance.event_log_storage.set_concurrency_slots(POOL, 3)
        dead = started_run(instance, dead_tags)
        alive = started_run(instance, worker_tags())  # this test's own process
        foreign = started_run(instance, {**dead_tags, HOST_TAG: "another-host"})

        result = dead_runs_sensor(build_sensor_context(instance=instance))

        assert dead in result.skip_message
        assert instance.get_run_by_id(dead).status == DagsterRunStatus.FAILURE
        assert instance.get_run_by_id(alive).status == DagsterRunStatus.STARTED
        assert instance.get_run_by_id(foreign).status == DagsterRunStatus.STARTED
        holders = {slot.run_id for slot in instance.event_log_storage.get_concurrency_info(POOL).claimed_slots}
        assert holders == {alive, foreign}
        failure = [
            e
            for e in instance.all_logs(dead)
            if e.dagster_event and e.dagster_event.event_type_value == "PIPELINE_FAILURE"
        ]
        assert f"run worker process {finished.pid}" in failure[0].message
        assert reap_dead_runs(instance) == []  # nothing left to do


def _home(tmp_path):
    home = tmp_path / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text("concurrency:\n  pools:\n    default_limit: 1\n")
    return home


def test_only_a_run_materializing_days_must_name_them():
    """The executor's check of a run's days (`refusal`) applies to a run that materializes daily partitions, of a
    named job or of an asset selection; not to a job without partitions, nor to a run of checks alone (*Execute*
    on `commits_outside_dagster` in the UI: a run of the implicit asset job, whose partitions are the assets')."""
    from types import SimpleNamespace

    from dagster import AssetKey

    from etr_assets.definitions import defs
    from etr_assets.defs.run_guard import refusal

    repository = defs.get_repository_def()
    assets = repository.get_job("__ASSET_JOB")
    (outside,) = [
        key
        for key in repository.asset_graph.asset_check_keys
        if key.name == "commits_outside_dagster" and key.asset_key == AssetKey(["silver", "bnpl_transactions_clean"])
    ]

    def refused(job_def, tags=None) -> str | None:  # what the executor reads of its plan context
        job, run = SimpleNamespace(get_definition=lambda: job_def), SimpleNamespace(tags=tags or {})
        return refusal(SimpleNamespace(job=job, job_name=job_def.name, dagster_run=run))

    assert refused(defs.resolve_job_def("etr_pipeline")).startswith("no day given (etr_pipeline runs for ")
    assert refused(defs.resolve_job_def("etr_pipeline"), {"dagster/partition": "2025-01-02"}) is None
    assert refused(defs.resolve_job_def("bnpl_ingest")).startswith("no day given (bnpl_ingest runs for ")
    silver = assets.get_subset(asset_selection={AssetKey(["silver", "bnpl_transactions_clean"])})
    assert refused(silver).startswith("no day given (its assets run for ")
    assert refused(assets.get_subset(asset_selection=set(), asset_check_selection={outside})) is None
    assert refused(defs.resolve_job_def("rollback_table")) is None
