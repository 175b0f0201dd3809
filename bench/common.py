"""What every benchmark shares: the machine's description, a lake under a temp dir, and measuring with counters.

A measurement is the wall time of an action plus what Spark counted while it ran, read from two places:

- the task metrics of the jobs the action started (grouped by a Spark job group): bytes and records read from
  storage (`input_bytes`: what the readers really read, after column pruning and row-group skipping), bytes
  written, shuffle;
- the SQL metrics of the executed plan's scan nodes: Parquet's FileSourceScan (`number of files read`,
  `size of files read`) and Iceberg's BatchScan custom metrics (`resultDataFiles`, `skippedDataFiles`,
  `totalFileSize`, manifests scanned and skipped, planning time).

Timings are the best of a few repetitions (the machine is shared: load averages are recorded at start and end).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from etr_assets.settings import Settings

RESULTS_DIR = Path(__file__).with_name("results")
MIB = 1024 * 1024
DRIVER_MEMORY = "4g"  # benchmarks move more data than the pipeline's 1 GB default


def machine() -> dict:
    """Cores, memory, load and versions: the context every figure is read in."""
    meminfo = Path("/proc/meminfo").read_text().splitlines() if Path("/proc/meminfo").exists() else []
    total_kib = next((int(line.split()[1]) for line in meminfo if line.startswith("MemTotal:")), 0)
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(total_kib / 1024 / 1024, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def revision() -> dict:
    """When and on what code a benchmark ran: the UTC date, the commit, and whether the code it measures (the
    package and the benchmarks) had uncommitted changes."""
    import datetime as dt

    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", *args], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git("rev-parse", "--short=12", "HEAD") or "unknown",
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no", "--", "etr_assets", "bench")),
    }


@dataclasses.dataclass
class Lake:
    """A Spark session pointed at a catalog of its own, with its warehouse under a temp dir."""

    settings: Settings
    spark: object
    workdir: Path

    @property
    def catalog(self) -> str:
        return self.settings.catalog

    def path(self, *parts: str) -> Path:
        return self.workdir.joinpath(*parts)


@contextlib.contextmanager
def open_lake(name: str, workdir: Path | None = None) -> Iterator[Lake]:
    """A lake under a fresh temp dir (deleted afterwards). Reuses the process's Spark session if one exists."""
    from etr_assets.lake.session import get_spark

    own = workdir is None
    root = Path(tempfile.mkdtemp(prefix=f"etr-bench-{name}-")) if own else workdir
    settings = Settings(home=root / "etr", catalog=f"bench_{uuid.uuid4().hex[:8]}", driver_memory=DRIVER_MEMORY)
    spark = get_spark(settings)
    try:
        yield Lake(settings, spark, root)
    finally:
        if own:
            shutil.rmtree(root, ignore_errors=True)


# --- measuring ----------------------------------------------------------------------------------------------
def _scala_list(spark, seq) -> list:
    return list(spark._jvm.scala.collection.JavaConverters.seqAsJavaList(seq))


def _plan_nodes(spark, plan) -> Iterator:
    """Every node of an executed plan, looking inside adaptive plans, query stages and reused exchanges."""
    stack = [plan]
    while stack:
        node = stack.pop()
        kind = node.getClass().getSimpleName()
        if kind == "AdaptiveSparkPlanExec":
            stack.append(node.executedPlan())
            continue
        if kind.endswith("QueryStageExec"):
            stack.append(node.plan())
            continue
        if kind == "ReusedExchangeExec":
            stack.append(node.child())
            continue
        yield node
        stack.extend(_scala_list(spark, node.children()))


def scan_counters(spark, query_execution) -> dict:
    """Sum the scan nodes' SQL metrics of an executed plan (Parquet FileSourceScan, Iceberg BatchScan)."""
    names = {
        "numFiles": "files_read",
        "filesSize": "bytes_of_files_read",
        "numPartitions": "partitions_read",
        "resultDataFiles": "files_read",
        "skippedDataFiles": "files_skipped",
        "totalFileSize": "bytes_of_files_read",
        "scannedDataManifests": "manifests_scanned",
        "skippedDataManifests": "manifests_skipped",
        "resultDeleteFiles": "delete_files_read",
        "totalPlanningDuration": "planning_ms",
        "numOutputRows": "rows_out_of_scan",
    }
    totals: dict[str, int] = {}
    converters = spark._jvm.scala.collection.JavaConverters
    for node in _plan_nodes(spark, query_execution.executedPlan()):
        kind = node.getClass().getSimpleName()
        if kind not in ("FileSourceScanExec", "BatchScanExec"):
            continue
        totals["scan_nodes"] = totals.get("scan_nodes", 0) + 1
        for key, metric in dict(converters.mapAsJavaMap(node.metrics())).items():
            if key in names:
                totals[names[key]] = totals.get(names[key], 0) + int(metric.value())
    return totals


def task_counters(spark, group: str) -> dict:
    """Task metrics summed over every stage of every job in a job group."""
    from py4j.protocol import Py4JJavaError

    # The status store is fed by an asynchronous listener: let it catch up with the jobs that just ended.
    spark._jsc.sc().listenerBus().waitUntilEmpty()
    tracker = spark.sparkContext.statusTracker()
    store = spark._jsc.sc().statusStore()
    totals = {"input_bytes": 0, "input_records": 0, "output_bytes": 0, "shuffle_read_bytes": 0, "tasks": 0}
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job else ():
            # A stage a job skipped (its shuffle output was reused) never ran, and a long-lived session's store
            # forgets old stages (spark.ui.retainedStages): neither has task metrics to add.
            if tracker.getStageInfo(stage_id) is None:
                continue
            try:
                stage = store.lastStageAttempt(stage_id)
            except Py4JJavaError:
                continue
            if stage is not None:
                totals["input_bytes"] += stage.inputBytes()
                totals["input_records"] += stage.inputRecords()
                totals["output_bytes"] += stage.outputBytes()
                totals["shuffle_read_bytes"] += stage.shuffleReadBytes()
                totals["tasks"] += stage.numCompleteTasks()
    return totals


def measure(spark, action: Callable[[], object]) -> tuple[float, dict, object]:
    """Run `action` once in a job group of its own: (seconds, task counters, the action's return value)."""
    group = f"bench-{uuid.uuid4().hex[:12]}"
    spark.sparkContext.setJobGroup(group, group)
    try:
        start = time.perf_counter()
        value = action()
        seconds = time.perf_counter() - start
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        spark.sparkContext.setLocalProperty("spark.job.description", None)
    return seconds, task_counters(spark, group), value


def run_scan(spark, query: str) -> tuple[float, dict]:
    """Read every row and column the query selects, without sending rows to Python; time and counters."""
    df = spark.sql(query)
    qe = df._jdf.queryExecution()
    seconds, counters, rows = measure(spark, lambda: qe.toRdd().count())
    return seconds, {"rows": int(rows), **counters, **scan_counters(spark, qe)}


def best_of(repeats: int, run: Callable[[], tuple[float, dict]]) -> tuple[float, dict, list[float]]:
    """The fastest of `repeats` runs (noise on a shared machine only ever adds time) and its counters."""
    times, best = [], None
    for _ in range(max(1, repeats)):
        seconds, counters = run()
        times.append(round(seconds, 3))
        if best is None or seconds < best[0]:
            best = (seconds, counters)
    return best[0], best[1], times


def ratio(numerator: float, denominator: float) -> float | None:
    return round(numerator / denominator, 3) if denominator and numerator is not None else None


def verdict(value: float | None, target: float, at_least: bool = False) -> str:
    """`met` when `value` is at most `target` (at least, for a speedup), else `MISSED`; blank without a value."""
    if value is None:
        return ""
    return "met" if (value >= target if at_least else value <= target) else "MISSED"


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file() and not f.name.startswith((".", "_")))


# --- memory -----------------------------------------------------------------------------------------------------
class JvmPeak:
    """The JVM's resident peak over a stretch of work: its VmHWM after resetting it (writing 5 to clear_refs), or,
    where the kernel refuses the reset, the highest VmRSS a thread samples every 50 ms. A full GC comes first: the
    collector then gives back the heap an earlier layer grew, so each peak is what this layer made the JVM hold.
    `full_gc=False` skips it (0.2 CPU s each on the test suite's 1 GB JVM): then a peak, not each layer's own."""

    def __init__(self, spark, full_gc: bool = True):
        self.runtime = spark._jvm.java.lang.Runtime.getRuntime()
        self.pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())
        self.status = Path(f"/proc/{self.pid}/status")
        self.full_gc, after = full_gc, "after a full GC " if full_gc else "without a full GC "
        self.method = f"VmHWM of the java process, reset {after}before each layer (clear_refs 5)"
        self._sampled, self._stop, self._thread = 0, threading.Event(), None
        if not self._reset():
            self.method = f"highest VmRSS of the java process {after.rstrip()}, sampled every 50 ms"

    def _reset(self) -> bool:
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
            return True
        except OSError:
            return False

    def _read_kib(self, field: str) -> int:
        for line in self.status.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        return 0

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self._sampled = max(self._sampled, self._read_kib("VmRSS"))

    def start(self) -> None:
        if self.full_gc:
            self.runtime.gc()
        if self._reset():
            return
        self._sampled, self._stop = self._read_kib("VmRSS"), threading.Event()
        self._thread = threading.Thread(target=self._sample, name="jvm-rss-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> float:
        """The peak since `start`, in MiB."""
        if self._thread is None:
            return round(self._read_kib("VmHWM") / 1024, 1)
        self._stop.set()
        self._thread.join()
        self._thread = None
        return round(max(self._sampled, self._read_kib("VmRSS")) / 1024, 1)

    def heap_max_mib(self) -> float:
        return round(self.runtime.maxMemory() / MIB, 1)
