"""A sensor's tick as the Dagster daemon makes it (`dagster._daemon.sensor.execute_sensor_iteration`): evaluated in
the code location, its run requests submitted to the instance, its tick recorded with the status the UI shows.

`workspace(instance)` loads the code location in this process (fast: no code server, nothing launched);
`workspace(instance, grpc=True)` starts a real code server subprocess, as the daemon does, which can also launch the
runs a tick queued (`launch_queued`, what the daemon's run queue does). Every sensor of the project starts stopped:
`tick` starts the one it evaluates, and evaluates it now, whatever its minimum interval."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

REPO = Path(__file__).resolve().parents[1]
LOCATION = "etr_assets"  # the code location's name (workspace.yaml, pyproject.toml: code_location_name)


@contextlib.contextmanager
def workspace(instance: DagsterInstance, module: str = "etr_assets.definitions", grpc: bool = False) -> Iterator:
    from dagster._core.remote_origin import InProcessCodeLocationOrigin
    from dagster._core.test_utils import create_test_daemon_workspace_context
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
    from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget, ModuleTarget

    if grpc:
        target = ModuleTarget(module, None, str(REPO), LOCATION)
    else:
        origin = LoadableTargetOrigin(executable_path=sys.executable, module_name=module, working_directory=str(REPO))
        target = InProcessWorkspaceLoadTarget(InProcessCodeLocationOrigin(origin, location_name=LOCATION))
    with create_test_daemon_workspace_context(target, instance) as context:
        yield context


def remote_sensor(context, name: str):
    entry = context.create_request_context().get_code_location_entries()[LOCATION]
    assert entry.code_location is not None, entry.load_error
    (repository,) = entry.code_location.get_repositories().values()
    return repository.get_sensor(name)


def tick(context, name: str):
    """Evaluate the sensor `name` once, now, through the daemon's code path; the tick it recorded."""
    from dagster._daemon.sensor import execute_sensor_iteration

    instance, sensor = context.instance, remote_sensor(context, name)
    state = instance.get_instigator_state(sensor.get_remote_origin_id(), sensor.selector_id)
    if state is None or not state.is_running:
        instance.start_sensor(sensor)
    with mock.patch("dagster._daemon.sensor.is_under_min_interval", return_value=False):
        list(execute_sensor_iteration(context, logging.getLogger("etr_assets_tests.daemon"), None, None))
    return instance.get_ticks(sensor.get_remote_origin_id(), sensor.selector_id, limit=1)[0]


def launch_queued(context) -> list[str]:
    """Launch every queued run through the instance's run launcher, as the daemon's run queue does."""
    instance, request_context = context.instance, context.create_request_context()
    queued = instance.get_runs(filters=RunsFilter(statuses=[DagsterRunStatus.QUEUED]))
    for run in queued:
        instance.launch_run(run.run_id, request_context)
    return [run.run_id for run in queued]
