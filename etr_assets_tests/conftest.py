"""Shared fixtures: one Spark session per test process, a fresh lake (catalog + folders) per test."""

from __future__ import annotations

import os
import uuid

import pytest

from etr_assets.settings import Settings

TRANSACTIONS_PER_DAY = 40
# Every JVM the suite starts (this process's, and the subprocesses' through the inherited environment: spark-submit
# adds SPARK_SUBMIT_OPTS to the driver's command line, silently) compiles with C1 only and collects with the serial
# collector. The suite is thousands of short Spark jobs on two cores: C2 compiler threads and parallel GC threads
# compete with the work for the same cores, and C1-only took 0.54x the CPU time of the defaults on test_transactions
# (one core). Long-running jobs (benchmarks, production) keep the JVM's defaults.
QUICK_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def pytest_configure(config):
    current = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if QUICK_JVM_OPTIONS not in current:
        os.environ["SPARK_SUBMIT_OPTS"] = f"{current} {QUICK_JVM_OPTIONS}".strip()


# The longest files (minutes each on two cores), longest first: xdist hands out files in collection order.
LONGEST_FIRST = (
    "test_crash_recovery.py",
    "defs/test_pipeline.py",
    "test_cli_subprocess.py",
    "s3/test_concurrent_writers.py",
    "test_pools.py",
    "test_bench.py",
    "lake/test_scd2_log.py",
    "remote/test_pipes.py",
    "s3/test_s3_profile.py",
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

    # One shuffle partition: the suite's tables hold hundreds of rows, and each partition is a task to schedule.
    session = get_spark(Settings(home=tmp_path_factory.mktemp("spark-session"), shuffle_partitions=1))
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


@pytest.fixture(scope="session")
def api():
    """The synthetic BNPL API on loopback, as the pipeline's embedded default starts it."""
    from etr_assets.sources.synthetic_api import ApiConfig, serve

    with serve(ApiConfig(transactions_per_day=TRANSACTIONS_PER_DAY)) as running:
        yield running
