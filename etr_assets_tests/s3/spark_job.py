"""Spark work on the `s3` profile, run by the s3 tests in a subprocess of its own.

The test process already holds a JVM made with the local profile's jars, and `spark.jars` cannot change once a
JVM runs: so the s3 profile's session (S3A jars, PostgreSQL JDBC driver) lives here, built by the product's own
`get_spark(Settings(profile="s3", ...))`. The last stdout line is ``RESULT {json}``.

    python spark_job.py pipeline '{"bucket": ..., "endpoint": ..., "jdbc_url": ..., "home": ..., "per_day": 40,
                                   "days": ["2025-03-01", ...]}'
    python spark_job.py append   '{... "table": "etr.smoke.appends", "writer": 0, "batches": 5, "rows": 10,
                                   "barrier": "/tmp/dir", "writers": 3}'

AWS credentials come from the environment (dummy keys set by the test); nothing here reads real ones.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from pathlib import Path


def settings_from(args: dict):
    from etr_assets.settings import Settings

    return Settings(
        profile="s3",
        bucket=args["bucket"],
        s3_endpoint=args["endpoint"],
        jdbc_url=args["jdbc_url"],
        jdbc_user="postgres",
        home=Path(args["home"]),
        api_transactions_per_day=args.get("per_day", 40),
        driver_memory=args.get("driver_memory", "768m"),
    )


def s3_client(settings):
    import boto3

    # Credentials: the environment's (dummy) keys, as S3A's EnvironmentVariableCredentialsProvider reads them.
    return boto3.client("s3", endpoint_url=settings.s3_endpoint, region_name=settings.region)


def run_pipeline(args: dict) -> dict:
    from etr_assets.lake.session import get_spark, spark_conf
    from etr_assets.pipeline import transactions as pipeline
    from etr_assets.sources.fetch import fetch_day
    from etr_assets.sources.http_fetch import connect
    from etr_assets.sources.s3_storage import s3_raw_zone
    from etr_assets.sources.synthetic_api import ApiConfig, serve
    from etr_assets.tables.declared import source
    from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, GOLD_DAILY_SUMMARY, SILVER_TRANSACTIONS

    settings = settings_from(args)
    days = [dt.date.fromisoformat(d) for d in args["days"]]
    raw = s3_raw_zone(s3_client(settings), settings.bucket, uri_scheme="s3a")
    timings: dict[str, float] = {}

    start = time.monotonic()
    with serve(ApiConfig(transactions_per_day=settings.api_transactions_per_day)) as api:
        # the declared BNPL source's client (this script runs outside the tests' package: no etr_assets_tests)
        declaration, secrets = source("bnpl").declaration, {"token": api.config.token}

        def bnpl_client(page_size: int):
            return connect(declaration, {}, base_url=api.url, secrets=secrets, page_size=page_size)

        client = bnpl_client(25)
        batches = [fetch_day(client, raw, "transactions", day)[0].batch_id for day in days]
        for day in days:  # the SCD2 ingestion too: customers as of each day
            fetch_day(bnpl_client(500), raw, "customers", day)
    timings["fetch"] = time.monotonic() - start

    start = time.monotonic()
    spark = get_spark(settings)
    timings["session"] = time.monotonic() - start
    conf = spark.sparkContext.getConf()

    results = {}
    for name, step in (
        ("bronze", lambda: pipeline.load_bronze(spark, settings.catalog, raw, days)),
        ("silver", lambda: pipeline.build_silver(spark, settings.catalog, days)),
        ("gold", lambda: pipeline.build_gold(spark, settings.catalog, days)),
    ):
        start = time.monotonic()
        layer = step()
        timings[name] = time.monotonic() - start
        results[name] = {
            "rows": layer.rows,
            "rows_by_day": layer.rows_by_day,
            "snapshot_id": str(layer.commit.snapshot_id),
            "operation": layer.commit.operation,
            "total_records": layer.commit.table_rows.rows,
            "extra": layer.extra,
        }

    tables = {}
    for spec in (BRONZE_TRANSACTIONS, SILVER_TRANSACTIONS, GOLD_DAILY_SUMMARY):
        qualified = spec.qualified(settings.catalog)
        by_day = spark.sql(f"SELECT transaction_date, count(*) FROM {qualified} GROUP BY 1").collect()
        tables[spec.identifier] = {
            "rows_by_day": {r[0].isoformat(): r[1] for r in by_day},
            "data_files": [r[0] for r in spark.sql(f"SELECT file_path FROM {qualified}.files").collect()],
            "metadata_files": [r[0] for r in spark.sql(f"SELECT file FROM {qualified}.metadata_log_entries").collect()],
        }
    from etr_assets.pipeline import entities

    entities.load_bronze(spark, settings.catalog, raw, entities.CUSTOMERS, days)
    scd2 = entities.build_landing(spark, settings.catalog, entities.CUSTOMERS, days)
    landing = entities.LANDING_CUSTOMERS.qualified(settings.catalog)
    current = spark.sql(f"SELECT count(*), count(DISTINCT customer_id) FROM {landing} WHERE _is_current").first()
    replay = entities.build_landing(spark, settings.catalog, entities.CUSTOMERS, days)
    results["landing_customers"] = {
        "inserted": scd2.inserted,
        "current_rows": current[0],
        "current_keys": current[1],
        "replay_changed": replay.changed,
        "pending_customer_batches": len(raw.pending("bnpl", "customers")),
    }
    source_files = [
        r[0]
        for r in spark.sql(
            f"SELECT DISTINCT _source_file FROM {BRONZE_TRANSACTIONS.qualified(settings.catalog)}"
        ).collect()
    ]
    spark.stop()
    return {
        "batches": batches,
        "layers": results,
        "tables": tables,
        "bronze_source_files": source_files,
        "credentials_provider": conf.get("spark.hadoop.fs.s3a.aws.credentials.provider", ""),
        "jars": conf.get("spark.jars", "").split(","),
        "expected_jars": spark_conf(settings)["spark.jars"].split(","),
        "timings": {k: round(v, 2) for k, v in timings.items()},
    }


def run_append(args: dict) -> dict:
    """One of several concurrent writers: wait for all to be ready, then append `batches` small batches."""
    from etr_assets.lake.frames import local_frame
    from etr_assets.lake.session import get_spark, spark_conf
    from etr_assets.lake.writes import append

    settings = settings_from(args)
    started = time.monotonic()
    # Short-lived JVMs sharing two cores: C1-only JIT and one task thread start faster, the profile's
    # configuration (jars, S3A, JDBC catalog) stays as it is.
    conf = spark_conf(settings)
    spark = get_spark(
        settings,
        {
            "spark.master": "local[1]",
            "spark.driver.extraJavaOptions": conf["spark.driver.extraJavaOptions"] + " -XX:TieredStopAtLevel=1",
        },
    )
    table, writer = args["table"], int(args["writer"])
    _ = spark.table(table).schema  # warm up: catalog and JDBC pool, table metadata read through S3A
    timings = {"ready": time.monotonic() - started}

    barrier = Path(args["barrier"])
    (barrier / f"ready-{writer}").touch()
    deadline = time.monotonic() + 120
    while len(list(barrier.glob("ready-*"))) < int(args["writers"]):
        if time.monotonic() > deadline:
            raise TimeoutError(f"writer {writer}: the other writers never became ready")
        time.sleep(0.05)

    timings["barrier"] = time.monotonic() - started
    commits = []
    for batch in range(int(args["batches"])):
        rows = [(writer, batch, k) for k in range(int(args["rows"]))]
        df = local_frame(spark, rows, "writer int, batch int, k int")
        info = append(spark, table, df)
        commits.append(
            {"snapshot_id": str(info.snapshot_id), "operation": info.operation, "added_records": info.added_records}
        )
    timings["appended"] = time.monotonic() - started
    spark.stop()
    return {"writer": writer, "commits": commits, "timings": {k: round(v, 2) for k, v in timings.items()}}


def main(argv: list[str]) -> int:
    mode, args = argv[1], json.loads(argv[2])
    result = {"pipeline": run_pipeline, "append": run_append}[mode](args)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
