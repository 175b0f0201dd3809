"""A run whose process died stays STARTED with its pool slots (the default launcher cannot tell): every run records
its process in tags and first fails this host's dead runs, freeing their slots, as the `dead_runs` sensor does.
The same executor refuses a run of the daily partitions whose days are wrong (none, a reversed range) before any
step runs, in one line, and ends every other run's log with its summary.

Dagster 1.13 cannot refuse such a run before it exists: `dg launch` (`dagster._cli.job`) turns `--partition` into
tags only, and `create_run_for_job` checks nothing of a run but its run config (`ResolvedRunConfig.build`), which
cannot tell a run with days from one without (a partitioned job's config is applied only where Dagster makes a run
from a partition key: schedules, sensors, backfills, the UI). So the run exists, and fails at once."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import dagster as dg

from etr_assets.defs.dagster_private import refused_step
from etr_assets.run_request import RunRequestError, days_of_run
from etr_assets.run_summary import summarize_run

HOST_TAG, PID_TAG, STARTED_TAG = "etr/worker_host", "etr/worker_pid", "etr/worker_started"
REFUSED = "refused"  # a step's Failure metadata: the run's request is wrong (no day, a reversed range), stop it
_WATCHED = [dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def process_started(pid: int) -> str | None:
    """The process's start time in ticks since boot (a reused pid differs); "" without /proc; None: no process."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except FileNotFoundError:
        if os.path.isdir("/proc"):
            return None
    except (OSError, IndexError):
        return ""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return ""


def worker_tags() -> dict[str, str]:
    pid = os.getpid()
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(pid), STARTED_TAG: process_started(pid) or ""}


def is_dead(tags: dict[str, str]) -> bool:
    """Whether the run worker these tags describe ran on this host and its process is gone."""
    if tags.get(HOST_TAG) != socket.gethostname() or not tags.get(PID_TAG, "").isdigit():
        return False
    started = process_started(int(tags[PID_TAG]))
    return started is None or bool(started and tags.get(STARTED_TAG) and started != tags[STARTED_TAG])


def reap_dead_runs(instance, current_run_id: str | None = None) -> list[str]:
    """Fail the runs of this host whose worker process is gone, and free their pool slots. Returns their ids."""
    reaped = []
    for record in instance.get_run_records(filters=dg.RunsFilter(statuses=_WATCHED)):
        run = record.dagster_run
        if run.run_id == current_run_id or not is_dead(run.tags):
            continue
        instance.report_run_failed(
            run,
            f"run worker process {run.tags[PID_TAG]} on {run.tags[HOST_TAG]} is gone (killed or crashed): marked "
            "failed and its pool slots freed by "
            f"{'run ' + current_run_id if current_run_id else 'the dead_runs sensor'}",
        )
        if instance.event_log_storage.supports_global_concurrency_limits:
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        reaped.append(run.run_id)
    return reaped


def refusal(plan_context) -> str | None:
    """Why the run cannot run, in one line, or None: a run materializing assets of daily partitions must name days
    of them (the check `etr run` makes of its request). Other runs run as they are: a job without partitions, and a
    run of checks alone (*Execute* on a table's `commits_outside_dagster` check, say: its job has the partitions)."""
    layer = plan_context.job.get_definition().asset_layer
    daily = [layer.get(key).partitions_def for key in layer.selected_asset_keys]
    partitions = next((p for p in daily if isinstance(p, dg.TimeWindowPartitionsDefinition)), None)
    if partitions is None:
        return None
    try:
        days_of_run(plan_context.dagster_run.tags, partitions.start.date(), job=plan_context.job_name)
    except RunRequestError as mistake:
        return str(mistake)
    return None


class GuardedExecutor(dg.Executor):
    """The in-process executor, after recording this run's worker, reaping dead runs and checking the run's days."""

    def __init__(self, inner: dg.Executor):
        self.inner = inner

    @property
    def retries(self):
        return self.inner.retries

    @property
    def step_dependency_config(self):
        return self.inner.step_dependency_config

    def execute(self, plan_context, execution_plan) -> Iterator:
        instance, run_id = plan_context.instance, plan_context.run_id
        instance.add_run_tags(run_id, worker_tags())
        for dead in reap_dead_runs(instance, run_id):
            plan_context.log.warning(f"run {dead}: its worker process is gone; marked failed and its pool slots freed")
        if (reason := refusal(plan_context)) is not None:  # the reason is the run's one line: no summary repeats it
            yield refused_step(plan_context, execution_plan, reason, {REFUSED: True})
            return
        failed_steps, events = 0, self.inner.execute(plan_context, execution_plan)
        try:
            for event in events:
                failed_steps += event.is_step_failure
                yield event
                failure = event.step_failure_data.user_failure_data if event.is_step_failure else None
                if failure is not None and REFUSED in failure.metadata:
                    break  # a step refused the run's days (see `refusal`): one failure says so, no other step runs
        finally:
            events.close()  # the inner executor's resources and step contexts end as on an interrupted run
            outcome = f"{failed_steps} step(s) failed" if failed_steps else "every step succeeded"
            try:
                if summary := summarize_run(instance, run_id):
                    plan_context.log.info("\n".join(summary.lines(outcome)))
            except Exception as exc:  # noqa: BLE001 - a summary must never fail a run or hide why it failed
                plan_context.log.warning(f"no run summary: {type(exc).__name__}: {exc}")


@dg.executor(
    name="in_process",
    config_schema=dg.in_process_executor.config_schema,
    requirements=dg.in_process_executor.get_requirements,
)
def in_process_executor(init_context) -> dg.Executor:
    """Dagster's in-process executor, guarded: see the module docstring."""
    return GuardedExecutor(dg.in_process_executor.executor_creation_fn(init_context))


@dg.sensor(
    name="dead_runs",
    minimum_interval_seconds=60,
    description=(
        "Every minute: runs of this host whose worker process is gone (killed, crashed) are marked failed and their "
        "pool slots freed, so the runs waiting for those slots go on."
    ),
)
def dead_runs_sensor(context: dg.SensorEvaluationContext):
    reaped = reap_dead_runs(context.instance)
    return dg.SkipReason(
        f"failed and freed {len(reaped)} dead run(s): {', '.join(reaped)}" if reaped else "no dead run"
    )
