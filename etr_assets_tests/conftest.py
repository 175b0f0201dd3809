"""Shared fixtures: one Spark session per test process, a fresh lake (catalog + folders) per test."""

from __future__ import annotations

import uuid

import pytest

from etr_assets.settings import Settings

TRANSACTIONS_PER_DAY = 40


def pytest_collection_modifyitems(items):
    """Slow suites first (a stable sort: files and their tests keep their order otherwise). With two test
    processes the long subprocess suites then overlap each other and the short tests fill in at the end,
    instead of one long suite running alone at the end of the run."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """The process's only JVM: tests point it at their own catalog with `attach_catalog`."""
    from etr_assets.lake.session import get_spark

    session = get_spark(Settings(home=tmp_path_factory.mktemp("spark-session")))
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
