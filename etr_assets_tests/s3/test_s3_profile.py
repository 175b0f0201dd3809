"""The `s3` profile end to end: Spark through S3A on moto, the Iceberg JDBC catalog on a real PostgreSQL 15.

The Spark work runs in subprocesses (spark_job.py): this process's JVM was made with the local profile's jars
and `spark.jars` cannot change in a live JVM. What the subprocess wrote is then checked from here without Spark:
boto3 on the bucket, psycopg2 on the catalog database, pyiceberg through `etr_assets.lake.metadata`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from etr_assets.settings import Settings
from etr_assets_tests.infra import (
    clean_env,
    create_bucket,
    list_keys,
    moto_server,
    postgres_server,
    psycopg2_connect,
    require_s3_profile_jars,
    s3_client,
)
from etr_assets_tests.s3.conftest import REGION, s3_profile_settings

PER_DAY = 40
DAYS = [dt.date(2025, 3, 1), dt.date(2025, 3, 2)]
JOB = Path(__file__).with_name("spark_job.py")
ROOT = Path(__file__).resolve().parents[2]
JOB_TIMEOUT = 300


@pytest.fixture
def s3_lake(tmp_path, aws_env):
    """A moto S3 with a fresh bucket, and a private PostgreSQL holding the catalog database `etr`."""
    require_s3_profile_jars()
    with moto_server() as endpoint, postgres_server() as jdbc_url:
        bucket = f"etr-lake-{uuid.uuid4().hex[:10]}"  # moto's state is per process: a bucket per test
        client = s3_client(endpoint, REGION)
        create_bucket(client, bucket)
        settings = s3_profile_settings(bucket, endpoint, jdbc_url, tmp_path / "etr", api_transactions_per_day=PER_DAY)
        yield settings, client


def job_args(settings: Settings, **extra) -> dict:
    return {
        "bucket": settings.bucket,
        "endpoint": settings.s3_endpoint,
        "jdbc_url": settings.jdbc_url,
        "home": str(settings.home),
        "per_day": settings.api_transactions_per_day,
        **extra,
    }


def start_job(mode: str, args: dict, log_dir: Path) -> tuple[str, subprocess.Popen]:
    name = f"{mode}-{args.get('writer', 0)}"
    with open(log_dir / f"{name}.out", "w") as out, open(log_dir / f"{name}.err", "w") as err:
        process = subprocess.Popen(
            [sys.executable, str(JOB), mode, json.dumps(args)],
            cwd=ROOT,
            env=clean_env(REGION),  # no AWS_* of the host: only the dummy keys
            stdout=out,
            stderr=err,
            start_new_session=True,  # its own process group: the job and its JVM, killable together
        )
    return name, process


def finish_jobs(jobs: list[tuple[str, subprocess.Popen]], log_dir: Path) -> list[dict]:
    """Wait for our subprocesses (on timeout, kill only them, by pid) and parse their RESULT lines."""
    deadline = time.monotonic() + JOB_TIMEOUT
    try:
        for _, process in jobs:
            process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        for _, process in jobs:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)  # the group we created for it, by id
                process.wait()
    results = []
    for name, process in jobs:
        out = (log_dir / f"{name}.out").read_text()
        err = (log_dir / f"{name}.err").read_text()
        lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
        assert process.returncode == 0 and lines, f"{name} exited {process.returncode}:\n{err[-4000:]}\n{out[-2000:]}"
        results.append(json.loads(lines[-1].removeprefix("RESULT ")))
    return results


def catalog_rows(settings: Settings) -> dict[str, str]:
    """The JDBC catalog's own table: namespace.table -> current metadata location."""
    with psycopg2_connect(settings.jdbc_url) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables WHERE catalog_name = %s",
            (settings.catalog,),
        )
        rows = {f"{ns}.{name}": location for ns, name, location in cur.fetchall()}
    conn.close()
    return rows


@pytest.mark.slow
def test_pipeline_on_the_s3_profile_lands_in_the_bucket_and_the_postgres_catalog(s3_lake, tmp_path):
    from etr_assets.lake.metadata import table_stats
    from etr_assets.lake.session import S3A_JARS
    from etr_assets.sources.s3_storage import s3_raw_zone
    from etr_assets.sources.synthetic_api import ApiConfig, transactions_for
    from etr_assets.tables.feeds import TRANSACTIONS
    from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, GOLD_DAILY_SUMMARY, SILVER_TRANSACTIONS

    settings, client = s3_lake
    source = TRANSACTIONS.source  # the BNPL source, as declared
    job = start_job("pipeline", job_args(settings, days=[d.isoformat() for d in DAYS]), tmp_path)
    (result,) = finish_jobs([job], tmp_path)
    layers, tables = result["layers"], result["tables"]
    # SCD2 ingestion on the s3 profile: one current row per customer of the last day, and a replay changes nothing.
    from etr_assets.sources.synthetic_api import customers_as_of

    landing = layers["landing_customers"]
    expected_customers = len(customers_as_of(ApiConfig(), DAYS[-1]))
    assert landing["current_rows"] == landing["current_keys"] == expected_customers, landing
    assert landing["inserted"] >= expected_customers and landing["replay_changed"] is False, landing
    assert landing["pending_customer_batches"] == 0, landing

    # The session was the real s3 profile: its jars and the environment credentials provider.
    assert result["jars"] == result["expected_jars"]
    assert [Path(j).name for j in result["jars"][1:3]] == list(S3A_JARS)
    assert Path(result["jars"][3]).name.startswith("postgresql")
    assert result["credentials_provider"] == "com.amazonaws.auth.EnvironmentVariableCredentialsProvider"

    # Silver: exactly the API's distinct transactions per day, by the pipeline's count and by a query.
    want = {d.isoformat(): PER_DAY for d in DAYS}
    assert layers["silver"]["rows_by_day"] == want
    assert tables[SILVER_TRANSACTIONS.identifier]["rows_by_day"] == want
    received = {d.isoformat(): len(transactions_for(ApiConfig(transactions_per_day=PER_DAY), d)) for d in DAYS}
    assert tables[BRONZE_TRANSACTIONS.identifier]["rows_by_day"] == received == layers["bronze"]["rows_by_day"]
    assert layers["silver"]["extra"]["duplicates_removed"] == sum(received.values()) - PER_DAY * len(DAYS)
    assert tables[GOLD_DAILY_SUMMARY.identifier]["rows_by_day"] == layers["gold"]["rows_by_day"]
    assert all(n > 0 for n in layers["gold"]["rows_by_day"].values())
    # Bronze read the raw zone from S3 through S3A.
    assert result["bronze_source_files"]
    assert all(
        f.startswith(f"s3a://{settings.bucket}/raw/{source}/transactions/") for f in result["bronze_source_files"]
    )

    # Every data and metadata file of every table is an object in the moto bucket, under warehouse/.
    keys = set(list_keys(client, settings.bucket, "warehouse/"))
    for spec in (BRONZE_TRANSACTIONS, SILVER_TRANSACTIONS, GOLD_DAILY_SUMMARY):
        prefix = f"s3a://{settings.bucket}/"
        files = tables[spec.identifier]["data_files"] + tables[spec.identifier]["metadata_files"]
        assert tables[spec.identifier]["data_files"], spec.identifier
        assert all(f.startswith(f"{prefix}warehouse/{spec.namespace}/{spec.name}/") for f in files)
        assert {f.removeprefix(prefix) for f in files} <= keys
        assert any(
            k.startswith(f"warehouse/{spec.namespace}/{spec.name}/data/") and k.endswith(".parquet") for k in keys
        )

    # The JDBC catalog in PostgreSQL holds the three tables, each pointing at its newest metadata file
    # (the pipeline may keep more tables there, e.g. a quarantine table beside bronze).
    current = catalog_rows(settings)
    for spec in (BRONZE_TRANSACTIONS, SILVER_TRANSACTIONS, GOLD_DAILY_SUMMARY):
        assert current[spec.identifier] == tables[spec.identifier]["metadata_files"][-1]
    assert all(location.startswith(f"s3a://{settings.bucket}/warehouse/") for location in current.values())

    # pyiceberg's SqlCatalog on the same database reads the same figures, without a JVM.
    for spec, layer in ((BRONZE_TRANSACTIONS, "bronze"), (SILVER_TRANSACTIONS, "silver"), (GOLD_DAILY_SUMMARY, "gold")):
        started = time.monotonic()
        stats = table_stats(settings, spec)
        assert time.monotonic() - started < 10
        assert stats.exists
        assert stats.rows == sum(tables[spec.identifier]["rows_by_day"].values()) == layers[layer]["total_records"]
        assert stats.data_files == len(tables[spec.identifier]["data_files"])
        assert str(stats.current_snapshot_id) == layers[layer]["snapshot_id"]
        assert stats.location == f"s3a://{settings.bucket}/warehouse/{spec.namespace}/{spec.name}"

    # The raw batches are marked complete in S3, naming the bronze commit that holds them.
    raw = s3_raw_zone(client, settings.bucket)
    for day, batch_id in zip(DAYS, result["batches"]):
        (batch,) = raw.batches(source, "transactions", day)
        assert batch.batch_id == batch_id
        assert raw.is_complete(batch) and raw.uncommitted(source, "transactions", day) == []
        marker = json.loads(raw.storage.read_bytes(f"{batch.key}/.complete"))
        assert marker["snapshot_id"] == layers["bronze"]["snapshot_id"]
        assert marker["table"] == BRONZE_TRANSACTIONS.qualified(settings.catalog)


@pytest.mark.slow
def test_concurrent_appends_from_three_processes_all_commit(s3_lake, tmp_path):
    """PostgreSQL's JDBC catalog is a compare-and-swap: losers retry, no commit and no row is lost."""
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import IntegerType, NestedField

    from etr_assets.lake.metadata import catalog
    from etr_assets.lake.specs import DEFAULT_PROPERTIES

    settings, client = s3_lake
    writers, batches, rows = 3, 5, 10
    # Created without a JVM by pyiceberg, in the catalog Spark uses: no race between writers on CREATE.
    iceberg = catalog(settings)
    iceberg.create_namespace("smoke")
    schema = Schema(
        NestedField(1, "writer", IntegerType(), required=False),
        NestedField(2, "batch", IntegerType(), required=False),
        NestedField(3, "k", IntegerType(), required=False),
    )
    properties = {k: v for k, v in DEFAULT_PROPERTIES.items() if k.startswith("commit.retry.")}
    iceberg.create_table(("smoke", "appends"), schema, properties={"format-version": "2", **properties})

    barrier = tmp_path / "barrier"
    barrier.mkdir()
    args = job_args(
        settings,
        table=f"{settings.catalog}.smoke.appends",
        batches=batches,
        rows=rows,
        barrier=str(barrier),
        writers=writers,
        driver_memory="512m",
    )
    jobs = [start_job("append", args | {"writer": w}, tmp_path) for w in range(writers)]
    results = finish_jobs(jobs, tmp_path)

    commits = [c for r in results for c in r["commits"]]
    assert len(commits) == writers * batches
    assert all(c["operation"] == "append" and c["added_records"] == rows for c in commits)
    assert len({c["snapshot_id"] for c in commits}) == writers * batches

    table = iceberg.load_table(("smoke", "appends"))
    assert len(table.metadata.snapshots) == writers * batches
    assert int(table.current_snapshot().summary["total-records"]) == writers * batches * rows
    data = table.scan().to_arrow().sort_by([("writer", "ascending"), ("batch", "ascending"), ("k", "ascending")])
    expected = [(w, b, k) for w in range(writers) for b in range(batches) for k in range(rows)]
    assert list(zip(*(data.column(c).to_pylist() for c in ("writer", "batch", "k")))) == expected
    assert isinstance(data, pa.Table)
    # The catalog row is the pointer every commit swapped: it names the table's current metadata file.
    assert catalog_rows(settings)["smoke.appends"] == table.metadata_location
