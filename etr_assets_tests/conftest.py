"""Shared fixtures: one Spark session per test process, a fresh lake (catalog + folders) per test."""

from __future__ import annotations

import datetime as dt
import os
import uuid
from pathlib import Path

import pytest

# The suite's lake has a second declared source beside the shipped BNPL one (the stores API declared in
# etr_assets_tests/sources/declared/): every list derived from the declarations (erasure, the pending-batch sensor,
# IAM, bootstrap, `etr tables`) must cover it. Set before etr_assets.tables reads them; subprocesses inherit it.
os.environ["ETR_SOURCE_DIRS"] = str(Path(__file__).resolve().parent / "sources" / "declared")

from etr_assets.settings import Settings  # noqa: E402

TRANSACTIONS_PER_DAY = 40
# Every JVM of the suite gets this heap: its tables hold hundreds of rows, and several suites share a machine.
SUITE_DRIVER_MEMORY = "1g"
AWS_TEST_REGION = "ap-southeast-5"  # the Settings default: S3A, boto3 and pyiceberg get it from the profile


def pytest_configure(config):
    """Every JVM of the suite starts with `quick_jvm`'s options; the controller (or the only process) picks them and
    the xdist workers inherit them."""
    if os.environ.get("PYTEST_XDIST_WORKER") or "-XX:TieredStopAtLevel=1" in os.environ.get("SPARK_SUBMIT_OPTS", ""):
        return
    import tempfile

    from etr_assets_tests.quick_jvm import suite_options

    with tempfile.TemporaryDirectory(prefix="etr-cds-") as scratch:
        options = suite_options(Path(scratch))
    os.environ["SPARK_SUBMIT_OPTS"] = f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} {options}".strip()
    # The runs the suite starts as subprocesses (Dagster CLI runs, the Glue stand-in, `etr sql`) read their settings
    # from the environment: one shuffle partition, as the shared session has (tables of a few hundred rows), and a
    # 1 GB heap each instead of a share of the machine (SUITE_DRIVER_MEMORY).
    os.environ.setdefault("ETR_SPARK_SHUFFLE_PARTITIONS", "1")
    os.environ.setdefault("ETR_SPARK_DRIVER_MEMORY", SUITE_DRIVER_MEMORY)


# The longest files (a minute or more each on two cores), longest first, as measured (ETR_TEST_TIMELINE): xdist hands
# out files in collection order (./dev passes --no-loadscope-reorder; by default xdist puts files with the most tests
# first). The benchmarks' smoke tests are a file each (bench/): as one file they ran one after another in one process,
# the suite's longest path.
LONGEST_FIRST = (
    "defs/test_propagation.py",
    "bench/test_s3_costs.py",
    "test_crash_recovery.py",
    "test_cli_subprocess.py",
    "bench/test_scd2.py",
    "bench/test_propagation_latency.py",
    "lake/test_scd2.py",
    "bench/test_history.py",
    "s3/test_concurrent_writers.py",
    "test_pending_retries.py",
    "bench/test_formats.py",
    "test_dead_runs.py",
    "bench/test_orchestration.py",
    "pipeline/test_entities.py",
    "pipeline/test_erasure.py",
    "defs/test_full_disk.py",
    "defs/test_pipeline.py",
    "bench/test_health.py",
    "s3/test_s3_profile.py",
    "pipeline/test_transactions.py",
    "aws/test_glue_pipes.py",
    "test_spark_cluster.py",
    "test_pools.py",
    "lake/test_scd2_recompute.py",
    "defs/test_erasure.py",
    "lake/test_incremental.py",
    "remote/test_pipes.py",
    "defs/test_compute.py",
)


def _rank(item) -> int:
    path = item.nodeid.split("::", 1)[0]
    return next((i for i, name in enumerate(LONGEST_FIRST) if path.endswith(name)), len(LONGEST_FIRST))


def pytest_collection_modifyitems(items):
    """Slow suites first, the longest of them first (a stable sort: files and their tests keep their order
    otherwise). With two test processes the long suites then overlap each other and the short tests fill in at
    the end, instead of one long suite running alone at the end of the run."""
    items.sort(key=lambda item: (item.get_closest_marker("slow") is None, _rank(item)))


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """The process's only JVM: tests point it at their own catalog with `attach_catalog`."""
    from etr_assets.lake.session import get_spark

    # One shuffle partition: the suite's tables hold hundreds of rows, and each partition is a task to schedule. With
    # one partition, adaptive execution has nothing to adapt and only re-plans after each shuffle
    # (pipeline/test_transactions.py alone: 79 s -> 74 s without it, load 1).
    session = get_spark(
        Settings(
            home=tmp_path_factory.mktemp("spark-session"), shuffle_partitions=1, driver_memory=SUITE_DRIVER_MEMORY
        ),
        extra={"spark.sql.adaptive.enabled": "false"},
    )
    yield session
    session.stop()


@pytest.fixture
def settings(tmp_path) -> Settings:
    """A lake of its own: warehouse and raw zone under tmp_path, and a catalog name no other test uses."""
    return Settings(
        home=tmp_path / "etr", catalog=f"t{uuid.uuid4().hex[:12]}", api_transactions_per_day=TRANSACTIONS_PER_DAY
    )


@pytest.fixture
def lake(spark, settings):
    from etr_assets.lake.session import attach_catalog

    return attach_catalog(spark, settings)


# The days `fetched_raw` holds.
FETCHED_DAYS = [dt.date(2025, 3, 1), dt.date(2025, 3, 2)]


@pytest.fixture
def fetched_raw(settings, api):
    """A raw zone of the test's own holding FETCHED_DAYS' transactions, fetched from the session's synthetic API."""
    from etr_assets.sources.fetch import fetch_day
    from etr_assets.sources.raw_zone import local_raw_zone
    from etr_assets_tests.sources.clients import bnpl_client

    zone = local_raw_zone(settings.raw_root)
    client = bnpl_client(api.url, api.config.token, page_size=25)
    for day in FETCHED_DAYS:
        fetch_day(client, zone, "transactions", day)
    return zone


@pytest.fixture
def aws_env(monkeypatch):
    """Dummy credentials only: no AWS_* variable of the host reaches boto3, pyiceberg or a subprocess."""
    from etr_assets_tests.infra import aws_test_env

    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    for name, value in aws_test_env(AWS_TEST_REGION).items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="module")
def moto_endpoint():
    """moto's server (S3, Glue and every service it emulates) on loopback, one per test module. Its backends are
    global to the process: a test makes buckets of its own, or empties moto first (the aws tests do)."""
    from etr_assets_tests.infra import moto_server

    with moto_server() as url:
        yield url


@pytest.fixture(scope="session")
def api():
    """The synthetic BNPL API on loopback, as the pipeline's embedded default starts it."""
    from etr_assets.sources.synthetic_api import ApiConfig, serve

    with serve(ApiConfig(transactions_per_day=TRANSACTIONS_PER_DAY)) as running:
        yield running


# ETR_TEST_TIMELINE=FILE: one JSON line per test (worker, test, start, end, cpu) appended to FILE, to see where a
# whole run's wall time goes (which worker idles while another finishes a long file) and where its work goes: `cpu`
# is the CPU seconds the test took in its process and every process started under it (the session's JVM, the
# subprocesses and their JVMs, those left to init too, sampled twice a second), which the machine's load barely
# changes.
class _CpuOfTree:
    """The CPU seconds of this process and every process ever seen under it, each counted once (its own user and
    system time, from /proc), the last sample of a process that has ended standing for it."""

    def __init__(self):
        import threading

        self.seen: dict[tuple[int, str], float] = {}  # (pid, start time) -> its CPU seconds, as last sampled
        self.lock = threading.Lock()
        threading.Thread(target=self._sample_forever, daemon=True).start()

    def _sample_forever(self):
        import time

        while True:
            self.sample()
            time.sleep(0.5)

    def sample(self) -> float:
        ticks, parents, cpu = os.sysconf("SC_CLK_TCK"), {}, {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as handle:
                        fields = handle.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                key = (int(entry), fields[19])
                parents[key] = int(fields[1])
                cpu[key] = (int(fields[11]) + int(fields[12])) / ticks
        with self.lock:
            known = {pid for pid, _ in self.seen} | {os.getpid()}
            for key, ppid in parents.items():
                if key[0] == os.getpid() or key in self.seen or ppid in known:
                    self.seen[key] = cpu[key]
            return sum(self.seen.values())


_cpu_of_tree: _CpuOfTree | None = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    import time

    global _cpu_of_tree
    path = os.environ.get("ETR_TEST_TIMELINE")
    if path and _cpu_of_tree is None:
        _cpu_of_tree = _CpuOfTree()
    started, cpu = time.time(), _cpu_of_tree.sample() if path else 0.0
    yield
    if path:
        import json

        line = {"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "test": item.nodeid, "start": started}
        line["end"] = time.time()
        line["cpu"] = round(_cpu_of_tree.sample() - cpu, 2)
        with open(path, "a") as out:
            out.write(json.dumps(line) + "\n")
