"""A run whose process died stays STARTED with its pool slots (the default launcher cannot tell): every run records
its process in tags and first fails this host's dead runs, freeing their slots, as the `dead_runs` sensor does.
A run launched through a code server (the daemon, the UI) is marked failed by that server when its process dies,
with a line guessing "out of memory" for any SIGKILL, and keeps its slots until Dagster's run monitoring frees them
(`free_slots_after_run_end_seconds`, then its next pass: about two minutes): the sensor frees them at its next tick
and says what happened, in the run's log, its summary and the sensor's own log.
The same executor refuses a run of the daily partitions whose days are wrong (none, a reversed range) before any
step runs, in one line, and ends every other run's log with its summary.

Dagster 1.13 cannot refuse such a run before it exists: `dg launch` (`dagster._cli.job`) turns `--partition` into
tags only, and `create_run_for_job` checks nothing of a run but its run config (`ResolvedRunConfig.build`), which
cannot tell a run with days from one without (a partitioned job's config is applied only where Dagster makes a run
from a partition key: schedules, sensors, backfills, the UI). So the run exists, and fails at once."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
import socket
import time
from collections.abc import Iterator

import dagster as dg

from etr_assets.defs.dagster_private import refused_step, report_engine_event, run_reaction
from etr_assets.defs.run_summary import FINISHED, GONE_DURING, WORKER_GONE, summarize_run
from etr_assets.errors import RunRequestError
from etr_assets.run_days import days_of_run

HOST_TAG, PID_TAG, STARTED_TAG = "etr/worker_host", "etr/worker_pid", "etr/worker_started"
OOM_TAG = "etr/worker_oom_kills"  # the host's count of processes the kernel killed for memory, when the run started
END_TAG = "etr/worker_end"  # "ended": its executor finished (its summary is logged); "gone": the guard explained it
REFUSED = "refused"  # a step's Failure metadata: the run's request is wrong (no day, a reversed range), stop it
_WATCHED = [dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
_FAILED = [dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]
# What a code server logs when a run's process dies under it (`dagster._utils.get_run_crash_explanation`).
_CRASH = re.compile(r"terminated by signal (\d+) \((\w+)\)|unexpectedly exited with code (-?\d+)")
_STEP_EVENTS = {dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE}
SENSOR = "the dead_runs sensor"
FIRST_LOOK_BACK_S = 24 * 3600  # the sensor's first tick explains runs of this host that ended this long ago at most
OVERLAP_S = 120  # each tick also looks at runs updated this long before the previous one began


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


def oom_kills() -> int | None:
    """How many processes the kernel has killed for lack of memory since boot (any cgroup's limit or the machine's:
    `oom_kill` of /proc/vmstat, Linux 4.13+); None where it cannot be read."""
    try:
        with open("/proc/vmstat") as vmstat:
            return next((int(line.split()[1]) for line in vmstat if line.startswith("oom_kill ")), None)
    except (OSError, ValueError, IndexError):
        return None


def worker_tags() -> dict[str, str]:
    pid, kills = os.getpid(), oom_kills()
    return {
        HOST_TAG: socket.gethostname(),
        PID_TAG: str(pid),
        STARTED_TAG: process_started(pid) or "",
        OOM_TAG: "" if kills is None else str(kills),
    }


def is_dead(tags: dict[str, str]) -> bool:
    """Whether the run worker these tags describe ran on this host and its process is gone."""
    if tags.get(HOST_TAG) != socket.gethostname() or not tags.get(PID_TAG, "").isdigit():
        return False
    started = process_started(int(tags[PID_TAG]))
    return started is None or bool(started and tags.get(STARTED_TAG) and started != tags[STARTED_TAG])


def why_gone(instance, run: dg.DagsterRun) -> tuple[str, str]:
    """(the step it was in or "", one line: how its process ended, and whether for lack of memory)."""
    host = run.tags[HOST_TAG]
    how, running = "is gone (killed or crashed: no exit status was recorded)", {}
    for record in instance.all_logs(run.run_id, of_type=_STEP_EVENTS | {dg.DagsterEventType.ENGINE_EVENT}):
        event = record.dagster_event
        if event.event_type == dg.DagsterEventType.ENGINE_EVENT:
            if crash := _CRASH.search(event.message or ""):
                number, name, code = crash.groups()
                how = f"was killed by signal {number} ({name})" if number else f"exited with code {code}"
        elif event.event_type == dg.DagsterEventType.STEP_START:
            running[event.step_key] = True
        else:
            running.pop(event.step_key, None)
    before, now = run.tags.get(OOM_TAG, ""), oom_kills()
    if now is None or not before.isdigit():
        memory = "" if OOM_TAG not in run.tags else "; whether for lack of memory is unknown (no /proc/vmstat here)"
    elif now > int(before):
        memory = (
            f"; the kernel killed {now - int(before)} process(es) on {host} for lack of memory since the run started "
            "(/proc/vmstat oom_kill): probably out of memory, `dmesg` names them"
        )
    else:
        memory = (
            f", not for lack of memory: the kernel killed no process on {host} for memory since the run started "
            "(/proc/vmstat oom_kill)"
        )
    return ", ".join(running), f"run worker process {run.tags[PID_TAG]} on {host} {how}{memory}"


@dataclasses.dataclass(frozen=True)
class DeadRun:
    run_id: str
    failed: bool  # marked failed here (it was still STARTED or CANCELING)
    freed: bool  # its pool slots (claimed or waited for) were freed here
    summary: tuple[str, ...]  # its summary, as its log now ends with it; () when only its slots were freed

    def describe(self) -> str:
        done = [what for what, did in (("marked failed", self.failed), ("its pool slots freed", self.freed)) if did]
        head = f"run {self.run_id}: its worker process is gone; " + (" and ".join(done) or "explained")
        return "\n".join((head, *self.summary))


def reap_dead_runs(instance, current_run_id: str | None = None, ended_since: float | None = None) -> list[DeadRun]:
    """Fail this host's runs whose worker process is gone, free their pool slots, and say once in each run's log why
    it ended; `ended_since` (epoch seconds): also the runs a code server marked failed since then."""
    storage = instance.event_log_storage
    pools = storage.supports_global_concurrency_limits
    holders = storage.get_concurrency_run_ids() if pools else set()
    records = list(instance.get_run_records(filters=dg.RunsFilter(statuses=_WATCHED)))
    if holders:
        records += instance.get_run_records(filters=dg.RunsFilter(run_ids=sorted(holders), statuses=FINISHED))
    if ended_since is not None:
        since = dt.datetime.fromtimestamp(ended_since, dt.UTC)
        host = {HOST_TAG: socket.gethostname()}
        records += instance.get_run_records(filters=dg.RunsFilter(statuses=_FAILED, tags=host, updated_after=since))
    reaped, seen = [], {current_run_id}
    for run in (record.dagster_run for record in records):
        if run.run_id in seen or not is_dead(run.tags):
            continue
        seen.add(run.run_id)
        running, held = not run.is_finished, run.run_id in holders
        # A run ended by itself tagged END_TAG; one of an earlier version has no OOM_TAG: neither is explained.
        unexplained = running or (END_TAG not in run.tags and OOM_TAG in run.tags)
        if not (unexplained or held):
            continue
        step, why = why_gone(instance, run) if unexplained else ("", "")
        by = f"run {current_run_id}" if current_run_id else SENSOR
        if running:
            instance.report_run_failed(run, f"{why}: marked failed and its pool slots freed by {by}")
        if pools and (running or held):
            storage.free_concurrency_slots_for_run(run.run_id)
        summary = ()
        if unexplained:
            summary = tuple(summarize_run(instance, run.run_id, worker_gone=(step or "run", why)).lines())
            metadata = {WORKER_GONE: why, GONE_DURING: step}
            report_engine_event(instance, run, "\n".join(summary), metadata)  # the run's log ends with its summary
            instance.add_run_tags(run.run_id, {END_TAG: "gone"})
        reaped.append(DeadRun(run.run_id, running, pools and (running or held), summary))
    return reaped


def refusal(plan_context) -> str | None:
    """Why the run cannot run, in one line, or None: a run materializing assets of daily partitions must name days
    of them, as `etr run` checks; a run of checks alone (*Execute* on a check) runs as it is."""
    layer = plan_context.job.get_definition().asset_layer
    daily = [layer.get(key).partitions_def for key in layer.selected_asset_keys]
    if (partitions := next((p for p in daily if isinstance(p, dg.TimeWindowPartitionsDefinition)), None)) is None:
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
        try:
            yield from self._execute(plan_context, execution_plan)
        finally:  # this process ends the run (Dagster records how): the dead_runs sensor has nothing to explain
            instance.add_run_tags(run_id, {END_TAG: "ended"})

    def _execute(self, plan_context, execution_plan) -> Iterator:
        instance, run_id = plan_context.instance, plan_context.run_id
        for dead in reap_dead_runs(instance, run_id):
            plan_context.log.warning(dead.describe())
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
        "pool slots freed, so the runs waiting for those slots go on; a run a code server already marked failed gets "
        "its slots freed too, and its log and summary say how its process ended (out of memory only if the kernel "
        "killed a process for memory meanwhile). A tick that acted is a success naming the runs, else skipped."
    ),
)
def dead_runs_sensor(context: dg.SensorEvaluationContext):
    began = time.time()
    since = float(context.cursor) - OVERLAP_S if context.cursor else began - FIRST_LOOK_BACK_S
    reaped = reap_dead_runs(context.instance, ended_since=since)
    context.update_cursor(str(began))
    if not reaped:
        return dg.SkipReason("no dead run")
    for dead in reaped:
        context.log.warning(dead.describe())  # the sensor's log reaches the console (the code server's output)
    return [run_reaction(context.instance.get_run_by_id(dead.run_id)) for dead in reaped]
