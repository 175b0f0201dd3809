"""How long a correction takes to reach the gold, the automation included: `python -m bench.propagation_latency
[DAYS] [TX_PER_DAY]` (default 30 days of 50,000 transactions).

In a temporary ETR_HOME and DAGSTER_HOME (the laptop dagster.yaml, `etr prepare-instance`):

1. `etr run FIRST..LAST`: DAYS days of `etr_pipeline` as one run (the single-run backfill), TX_PER_DAY transactions a
   day from the synthetic API (ETR_API_TRANSACTIONS_PER_DAY);
2. `dagster sensor start propagate_corrections -w workspace.yaml` (the only automation switched on), then
   `dagster-daemon run -w workspace.yaml`, in a process group of its own; waits for the sensor's first tick;
3. the correction: `dagster asset materialize` of raw, bronze and silver transactions of the first day against the
   synthetic API of another seed (ETR_API_SEED=99, as etr_assets_tests/defs/test_propagation.py does), a run whose
   end Dagster records;
4. waits until the sensor's runs (`flag_out_of_date`, `rederive_gold`) have all ended, no gold day is out of date
   (the sensor's own rules) and a tick started after the last of them asked for nothing more.

The figure: the last `rederive_gold` run's end minus the correction run's end, from Dagster's run records. Its split,
along the path of the last run the first acting tick asked for: waiting for that tick (0-60 s by phase: the sensor
runs each minute), the tick, the run queue (the tick's end to `RUN_STARTING`: the queue's 5 s loop, two runs at most
at once, a table's pool), the launch (to `RUN_START`: a process, imports, the definitions), the run (Spark's start
included); then what runs of later ticks added. Also: when each run materialized each table, and the gold days
re-derived more than once. Prints JSON, times in seconds after the correction run's end, with the load average at
start and end; stops every process it started. `--keep` keeps the temporary folder (lake, instance, logs).

`main(tick_every=S)` (a smoke test's) has the daemon evaluate the sensor every S seconds instead of each minute: the
same sensor and jobs (etr_assets.definitions with only the sensor's interval changed, `sooner_definitions`), a shorter
wait for its tick; the queue, the launches and the runs as they are."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg

from bench.common import machine, revision

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SENSOR, FLAG_JOB, REDERIVE_JOB = "propagate_corrections", "flag_out_of_date", "rederive_gold"
CORRECTED = ("raw/bnpl_transactions", "bronze/bnpl_transactions_raw", "silver/bnpl_transactions_clean")
CORRECTION_SEED = "99"  # the provider re-sends the day with other data: the synthetic API of another seed
FIRST_DAY = dt.date(2025, 1, 1)  # ETR_START_DATE and the first day built (the one corrected)
POLL_S = 1.0
STOP_GRACE_S = 30
TICK_EVERY_ENV = "BENCH_SENSOR_INTERVAL_S"  # the sensor's interval in `sooner_definitions`


def isolated_env(root: Path, per_day: int) -> dict[str, str]:
    """The caller's environment without its ETR_* / DAGSTER_* (but its ETR_SPARK_* tuning), on homes under `root`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ETR_", "DAGSTER_")) or k.startswith("ETR_SPARK_")}
    dagster_home = root / "dagster"
    dagster_home.mkdir(parents=True)
    shutil.copy(REPO / "etr_assets" / "conf" / "dagster.yaml", dagster_home / "dagster.yaml")
    return env | {
        "ETR_HOME": str(root / "etr"),
        "DAGSTER_HOME": str(dagster_home),
        "ETR_START_DATE": FIRST_DAY.isoformat(),
        "ETR_API_TRANSACTIONS_PER_DAY": str(per_day),
        "PYTHONWARNINGS": "ignore",
    }


def sooner_workspace(root: Path, env: dict[str, str], seconds: int) -> str:
    """A workspace of the code location of workspace.yaml (its name too) whose sensor ticks every `seconds`."""
    workspace = root / "workspace.yaml"
    workspace.write_text(
        "load_from:\n  - python_module:\n      module_name: bench.propagation_latency\n"
        "      attribute: sooner_definitions\n      location_name: etr_assets\n"
    )
    env[TICK_EVERY_ENV] = str(seconds)
    return str(workspace)


@dg.definitions
def sooner_definitions() -> dg.Definitions:
    """etr_assets.definitions with the sensor evaluated every $BENCH_SENSOR_INTERVAL_S seconds (Dagster has no public
    way to change a sensor's interval: the copy's is set where its constructor keeps it)."""
    import copy

    from dagster._record import copy as copy_record

    from etr_assets.definitions import defs

    sensors = []
    for sensor in defs.sensors:
        if sensor.name == SENSOR:
            sensor = copy.copy(sensor)
            sensor._min_interval = int(os.environ[TICK_EVERY_ENV])
        sensors.append(sensor)
    return copy_record(defs, sensors=sensors)


def run_command(command: list[str], env: dict[str, str], log: Path) -> float:
    """Runs `command` (a file in this venv's bin) in the repository, its output to `log`; its seconds."""
    began = time.monotonic()
    with log.open("ab") as out:
        out.write(f"$ {' '.join(command)}\n".encode())
        out.flush()
        done = subprocess.run([str(BIN / command[0]), *command[1:]], cwd=REPO, env=env, stdout=out, stderr=out)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}; its output:\n{tail(log)}")
    return time.monotonic() - began


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no output: {exc})"


@contextlib.contextmanager
def daemon(env: dict[str, str], log: Path, workspace: str = "workspace.yaml"):
    """`dagster-daemon run` on `workspace` (the repository's), in a new process group (its code server and the runs it
    launches are in it); SIGINT to that group at the end, SIGKILL if it is still there after STOP_GRACE_S."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [str(BIN / "dagster-daemon"), "run", "-w", workspace],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        stop_group(proc)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(proc: subprocess.Popen) -> None:
    pgid = proc.pid  # start_new_session: the leader's pid is the group's id
    for sig, grace in ((signal.SIGINT, STOP_GRACE_S), (signal.SIGKILL, 10)):
        if not group_alive(pgid):
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and group_alive(pgid):
            proc.poll()
            time.sleep(0.2)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def sensor_ids(instance) -> tuple[str, str] | None:
    """(origin id, selector id) of the sensor's state, once `dagster sensor start` has recorded it."""
    from dagster._core.scheduler.instigation import InstigatorType

    for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
        if state.name == SENSOR:
            return state.instigator_origin_id, state.selector_id
    return None


def wait_for(what: str, check, timeout: float, log: Path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(POLL_S)
    raise TimeoutError(f"{what}: not after {timeout:.0f} s; the daemon's log:\n{tail(log)}")


def run_timeline(instance, run_id: str) -> dict:
    """A run's times from its record and events (epoch seconds), when it last materialized each asset, how long
    Spark took to start in it, and for a run that failed, why (its error lines)."""
    import logging

    from dagster import DagsterEventType as Kind

    record = instance.get_run_record_by_id(run_id)
    run = record.dagster_run
    kinds = {Kind.RUN_ENQUEUED: "enqueued", Kind.RUN_STARTING: "launching", Kind.RUN_START: "started"}
    times, spark_s, errors = {"created": record.create_timestamp.timestamp()}, None, []
    materialized: dict[str, float] = {}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is not None and event.event_type in kinds:
            times.setdefault(kinds[event.event_type], entry.timestamp)
        elif event is not None and event.event_type == Kind.ASSET_MATERIALIZATION:
            materialized[event.asset_key.to_user_string()] = entry.timestamp
        elif event is None and entry.user_message.startswith("Spark started after"):
            spark_s = entry.user_message.split("after", 1)[1].strip()
        if entry.level >= logging.ERROR and entry.user_message:
            errors.append(entry.user_message.strip().splitlines()[0][:300])
    times |= {"started": record.start_time or times.get("started"), "ended": record.end_time}
    return {
        "run_id": run.run_id,
        "job": run.job_name,
        "status": run.status.value,
        "run_key": run.tags.get("dagster/run_key"),
        "propagates": run.tags.get("etr/propagates"),
        "spark_start": spark_s,
        "errors": errors,
        "materialized": materialized,
        **times,
    }


def main(
    days: int = 30,
    per_day: int = 50_000,
    timeout: float = 1800.0,
    keep: bool = False,
    confirm: bool = True,
    tick_every: int | None = None,
) -> dict:
    """The run of the module's docstring; `confirm=False` skips waiting for the tick after the last run (up to a
    minute), `tick_every` sets the sensor's interval in seconds (the smoke test's: both shorten the waits)."""
    from dagster import DagsterInstance, RunsFilter
    from dagster._core.storage.dagster_run import FINISHED_STATUSES

    from etr_assets.defs.propagation import built_orders
    from etr_assets.pipeline.propagation import out_of_date

    start, about = machine(), revision()
    last_day = FIRST_DAY + dt.timedelta(days=days - 1)
    root = Path(tempfile.mkdtemp(prefix="etr-bench-propagation-latency-"))
    log, daemon_log = root / "commands.log", root / "daemon.log"
    try:
        env = isolated_env(root, per_day)
        workspace = sooner_workspace(root, env, tick_every) if tick_every else "workspace.yaml"
        run_command(["etr", "prepare-instance"], env, log)
        built_s = run_command(["etr", "run", f"{FIRST_DAY}..{last_day}"], env, log)
        with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
            (build,) = instance.get_run_records(RunsFilter(job_name="etr_pipeline"))
            run_command(["dagster", "sensor", "start", SENSOR, "-w", workspace], env, log)
            origin_id, selector_id = wait_for("the sensor's state", lambda: sensor_ids(instance), 60, log)

            def ticks(after: float | None = None):
                found = instance.get_ticks(origin_id, selector_id, after=after)
                return sorted((t for t in found if t.end_timestamp), key=lambda t: t.timestamp)

            def sensor_runs() -> list:
                return instance.get_runs(filters=RunsFilter(tags={"dagster/sensor_name": SENSOR}))

            with daemon(env, daemon_log, workspace) as proc:
                daemon_began = time.time()
                first_tick = wait_for("the sensor's first tick", ticks, 300, daemon_log)[0]
                if proc.poll() is not None:
                    raise RuntimeError(f"dagster-daemon exited {proc.returncode}:\n{tail(daemon_log)}")

                corrected_env = env | {"ETR_API_SEED": CORRECTION_SEED}
                correction_began = time.time()
                command = ["dagster", "asset", "materialize", "-m", "etr_assets.definitions"]
                command += ["--select", ",".join(CORRECTED), "--partition", FIRST_DAY.isoformat()]
                run_command(command, corrected_env, log)
                since = RunsFilter(created_after=dt.datetime.fromtimestamp(correction_began, dt.UTC))
                (correction,) = [
                    r for r in instance.get_run_records(since) if r.dagster_run.job_name not in (FLAG_JOB, REDERIVE_JOB)
                ]

                def settled():
                    runs = sensor_runs()
                    if not runs or any(r.status not in FINISHED_STATUSES for r in runs):
                        return None
                    if out_of_date(built_orders(instance)):
                        return None
                    if not confirm:
                        return True
                    last_end = max(instance.get_run_record_by_id(r.run_id).end_time for r in runs)
                    later = ticks(after=last_end)
                    return later[0] if later and not later[0].run_ids else None

                try:
                    confirming = wait_for("the sensor's runs ended, nothing out of date", settled, timeout, daemon_log)
                except TimeoutError:  # reported as found: runs still running, or days left out of date
                    confirming = None
                daemon_s = time.time() - daemon_began
                timelines = [run_timeline(instance, r.run_id) for r in sensor_runs()]
                after = ticks(after=correction.start_time)
                correction_line = run_timeline(instance, correction.dagster_run.run_id)
            stale = out_of_date(built_orders(instance))
        return report(
            days=days,
            per_day=per_day,
            built_s=built_s,
            build=build,
            first_tick=first_tick,
            correction=correction_line,
            ticks=after,
            confirming=confirming,
            runs=timelines,
            stale=bool(stale),
            daemon_s=daemon_s,
            machine_start=start,
            revision=about,
        )
    finally:
        if keep:
            print(f"kept {root} (the lake, the instance, the commands' and the daemon's logs)", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


def report(**found) -> dict:
    """The figures, times in seconds after the correction run's end (negative: before it)."""
    correction, runs = found["correction"], sorted(found["runs"], key=lambda r: r["created"])
    zero = correction["ended"]

    def at(ts: float | None) -> float | None:
        return None if ts is None else round(ts - zero, 1)

    def span(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else round(b - a, 1)

    acting = [t for t in found["ticks"] if t.run_ids]
    rederived = [r for r in runs if r["job"] == REDERIVE_JOB]
    last = max(rederived, key=lambda r: r["ended"]) if rederived else None
    by_key: dict[str, int] = {}
    for r in runs:
        by_key[r["run_key"]] = by_key.get(r["run_key"], 0) + 1
    times_rederived: dict[tuple[str, str], int] = {}  # (table, day) -> rederive_gold runs that built it
    for r in rederived:
        tables, span_text = r["propagates"].rsplit(" ", 1)
        first, end = (dt.date.fromisoformat(d) for d in span_text.split("..."))
        for table in tables.split(", "):
            for n in range((end - first).days + 1):
                key = (table, (first + dt.timedelta(days=n)).isoformat())
                times_rederived[key] = times_rederived.get(key, 0) + 1
    again: dict[str, int] = {}
    for (table, _), n in times_rederived.items():
        if n > 1:
            again[table] = again.get(table, 0) + 1
    first_round = [r for r in rederived if acting and r["run_id"] in acting[0].run_ids]
    split = None
    if last and first_round:  # along the path of the first acting tick's last run, then what later ticks added
        tick, path = acting[0], max(first_round, key=lambda r: r["ended"])
        split = {
            "waiting for the sensor's tick": span(zero, tick.timestamp),
            "the tick (evaluation, runs created)": span(tick.timestamp, tick.end_timestamp),
            "queued": span(tick.end_timestamp, path.get("launching")),
            "launch (process, imports, definitions)": span(path.get("launching"), path["started"]),
            "run": span(path["started"], path["ended"]),
            "later ticks' runs": span(path["ended"], last["ended"]),
        }
    build = found["build"]
    return {
        "days": found["days"],
        "transactions_per_day": found["per_day"],
        "build": {
            "command_seconds": round(found["built_s"], 1),
            "run_seconds": span(build.start_time, build.end_time),
            "status": build.dagster_run.status.value,
        },
        "correction": {
            "day": FIRST_DAY.isoformat(),
            "assets": list(CORRECTED),
            "run_id": correction["run_id"],
            "status": correction["status"],
            "ended_utc": dt.datetime.fromtimestamp(zero, dt.UTC).strftime("%Y-%m-%d %H:%M:%S"),
            "run_seconds": span(correction["started"], correction["ended"]),
            "since_the_tick_before": round(zero - found["first_tick"].timestamp, 1),
        },
        "latency_seconds": span(zero, last["ended"]) if last else None,
        "split": split,
        "ticks": [
            {
                "at": at(t.timestamp),
                "seconds": span(t.timestamp, t.end_timestamp),
                "status": t.status.value,
                "runs": len(t.run_ids),
            }
            for t in found["ticks"]
        ],
        "first_tick_that_acted": at(acting[0].timestamp) if acting else None,
        "runs": [
            {
                "job": r["job"],
                "propagates": r["propagates"],
                "status": r["status"],
                "created": at(r["created"]),
                "launched": at(r.get("launching")),
                "started": at(r["started"]),
                "ended": at(r["ended"]),
                "queued_s": span(r.get("enqueued") or r["created"], r.get("launching")),
                "launch_s": span(r.get("launching"), r["started"]),
                "run_s": span(r["started"], r["ended"]),
                "spark_start": r["spark_start"],
                "materialized": {key: at(ts) for key, ts in r["materialized"].items()},
                **({"errors": r["errors"]} if r["errors"] else {}),
            }
            for r in runs
        ],
        "last_rederivation_ended": at(last["ended"]) if last else None,
        "first_acting_tick_runs_ended": at(max(r["ended"] for r in first_round)) if first_round else None,
        "gold_days_rederived_more_than_once": again,
        "runs_launched_twice": sorted(k for k, n in by_key.items() if n > 1),
        "out_of_date_at_the_end": found["stale"],
        "confirming_tick": (
            {"at": at(found["confirming"].timestamp), "status": found["confirming"].status.value}
            if found["confirming"] not in (None, True)
            else None
        ),
        "timed_out": found["confirming"] is None,
        "daemon_seconds": round(found["daemon_s"], 1),
        "revision": found["revision"],
        "load_average": {"start": found["machine_start"]["load_average"], "end": machine()["load_average"]},
        "machine": {k: v for k, v in found["machine_start"].items() if k != "load_average"},
    }


if __name__ == "__main__":  # [DAYS] [TX_PER_DAY] [--keep]
    sizes = [int(a) for a in sys.argv[1:] if a != "--keep"]
    print(json.dumps(main(*sizes[:2], keep="--keep" in sys.argv), indent=2))
