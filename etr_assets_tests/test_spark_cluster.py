"""The same assets on a real Spark standalone cluster (master + one worker on loopback) give the source's truth.

The cluster run is `dagster asset materialize` in a subprocess with `ETR_SPARK_MASTER=spark://...` (its own driver
JVM: this process already has the local-mode session). Its lake is then read by this process's session and compared
with what the synthetic API served, computed in plain Python: every transaction once, with its latest state, and
the gold counts per day and currency. (Local mode is held to the same truth by the rest of the suite.)
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

from etr_assets.lake.session import attach_catalog
from etr_assets.settings import Settings
from etr_assets.sources.synthetic_api import ApiConfig, transactions_for
from etr_assets.tables.transactions import (
    BRONZE_TRANSACTIONS,
    GOLD_DAILY_SUMMARY,
    SILVER_TRANSACTIONS,
)
from etr_assets_tests.spark_cluster import standalone_cluster
from etr_assets_tests.test_cli_subprocess import isolated_env
from etr_assets_tests.test_cli_subprocess import materialize as materialize_subprocess

DAYS = ("2025-01-01", "2025-01-02")
PER_DAY = 30


def served(day: str) -> tuple[list[dict], dict[int, dict]]:
    """The day's feed as served, and each transaction's latest record (what silver keeps)."""
    feed = transactions_for(ApiConfig(seed=Settings.api_seed, transactions_per_day=PER_DAY), dt.date.fromisoformat(day))
    latest: dict[int, dict] = {}
    for record in feed:
        kept = latest.get(record["transaction_id"])
        if kept is None or record["updated_at"] > kept["updated_at"]:
            latest[record["transaction_id"]] = record
    return feed, latest


@pytest.mark.slow
def test_assets_on_a_standalone_cluster_give_what_the_source_served(tmp_path, settings, lake):
    with standalone_cluster(tmp_path / "cluster", worker_cores=1, worker_memory="1g") as master:
        env = isolated_env(
            tmp_path / "on-cluster",
            ETR_SPARK_MASTER=master,
            ETR_SPARK_EXECUTOR_MEMORY="512m",
            ETR_API_TRANSACTIONS_PER_DAY=str(PER_DAY),
        )
        materialize_subprocess(env, "--partition-range", f"{DAYS[0]}...{DAYS[-1]}")

    # The work really ran on the worker: one application, its executor fetched the Iceberg jar through spark.jars.
    [app] = list((tmp_path / "cluster" / "work").iterdir())
    assert list(app.glob("*/iceberg-spark-runtime-*.jar")), sorted(p.name for p in app.rglob("*"))

    cluster = Settings(home=Path(env["ETR_HOME"]), catalog=f"{settings.catalog}c")
    attach_catalog(lake, cluster)
    for day in DAYS:
        feed, latest = served(day)
        where = f"WHERE transaction_date = DATE'{day}'"
        assert lake.sql(f"SELECT count(*) FROM {BRONZE_TRANSACTIONS.qualified(cluster.catalog)} {where}").first()[
            0
        ] == len(feed)
        silver = {
            r["transaction_id"]: (r["customer_id"], r["amount"], r["status"], r["currency"])
            for r in lake.sql(f"SELECT * FROM {SILVER_TRANSACTIONS.qualified(cluster.catalog)} {where}").collect()
        }
        assert silver == {
            t: (r["customer_id"], Decimal(r["amount"]), r["status"], r["currency"]) for t, r in latest.items()
        }, day
        gold = {
            r["currency"]: (r["transactions"], r["pending"])
            for r in lake.sql(f"SELECT * FROM {GOLD_DAILY_SUMMARY.qualified(cluster.catalog)} {where}").collect()
        }
        by_currency = Counter(r["currency"] for r in latest.values())
        pending = Counter(r["currency"] for r in latest.values() if r["status"] == "PENDING")
        assert gold == {c: (n, pending[c]) for c, n in by_currency.items()}, day
