"""The same assets on a real Spark standalone cluster (master + one worker on loopback) give local mode's rows.

The cluster run is `dagster asset materialize` in a subprocess with `ETR_SPARK_MASTER=spark://...` (its own driver
JVM: this process already has the local-mode session); the reference is the same partitions materialized in
process, in local mode. Both lakes are then read by this process's session and compared row by row.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import DagsterInstance, materialize
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from etr_assets.definitions import build_definitions
from etr_assets.lake.session import attach_catalog
from etr_assets.settings import Settings
from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, GOLD_DAILY_SUMMARY, SILVER_TRANSACTIONS
from etr_assets_tests.spark_cluster import standalone_cluster
from etr_assets_tests.test_cli_subprocess import PIPELINE, isolated_env
from etr_assets_tests.test_cli_subprocess import materialize as materialize_subprocess

DAYS = ("2025-01-01", "2025-01-02")
PER_DAY = 30
# Columns that record when or in which download a row was written: they differ between any two runs.
RUN_COLUMNS = {"_batch_id", "_source_file", "_ingested_at", "_processed_at", "_computed_at"}


def rows(spark, qualified: str) -> list[tuple]:
    df = spark.table(qualified)
    columns = sorted(c for c in df.columns if c not in RUN_COLUMNS)
    return sorted(tuple(r) for r in df.select(*columns).collect())


@pytest.mark.slow
def test_assets_on_a_standalone_cluster_match_local_mode(tmp_path, settings, lake):
    settings = Settings(home=settings.home, catalog=settings.catalog, api_transactions_per_day=PER_DAY)
    lake = attach_catalog(lake, settings)
    with standalone_cluster(tmp_path / "cluster", worker_cores=1, worker_memory="1g") as master:
        env = isolated_env(tmp_path / "on-cluster", ETR_SPARK_MASTER=master, ETR_SPARK_EXECUTOR_MEMORY="512m",
                           ETR_API_TRANSACTIONS_PER_DAY=str(PER_DAY))
        materialize_subprocess(env, "--partition-range", f"{DAYS[0]}...{DAYS[-1]}")

    # The work really ran on the worker: one application, its executor fetched the Iceberg jar through spark.jars.
    [app] = list((tmp_path / "cluster" / "work").iterdir())
    assert list(app.glob("*/iceberg-spark-runtime-*.jar")), sorted(p.name for p in app.rglob("*"))

    defs = build_definitions(settings)
    result = materialize(
        list(defs.assets), selection=PIPELINE, instance=DagsterInstance.ephemeral(),
        resources=defs.get_repository_def().get_top_level_resources(),
        tags={ASSET_PARTITION_RANGE_START_TAG: DAYS[0], ASSET_PARTITION_RANGE_END_TAG: DAYS[-1]},
    )
    assert result.success

    cluster = Settings(home=Path(env["ETR_HOME"]), catalog=f"{settings.catalog}c")
    attach_catalog(lake, cluster)
    for spec in (BRONZE_TRANSACTIONS, SILVER_TRANSACTIONS, GOLD_DAILY_SUMMARY):
        local_rows = rows(lake, spec.qualified(settings.catalog))
        cluster_rows = rows(lake, spec.qualified(cluster.catalog))
        assert local_rows, spec.identifier
        assert cluster_rows == local_rows, spec.identifier
    assert len(rows(lake, SILVER_TRANSACTIONS.qualified(cluster.catalog))) == PER_DAY * len(DAYS)
