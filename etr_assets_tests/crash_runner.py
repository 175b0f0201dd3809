"""One `etr_pipeline` run over some days, for transactions and customers, as a plain process a test can kill.

    python -m etr_assets_tests.crash_runner --home H --catalog C --api-url U --token T --days 2025-01-01,2025-01-02

Calls the library functions the Dagster assets call, in the job's order: raw (fetch_day per endpoint and day),
then bronze -> silver -> gold for transactions, then bronze -> landing for customers. Prints one JSON line as each
step starts (``{"stage": ...}``, so whoever kills it can tell where it was) and one ``{"done": true, ...}`` line at
the end. Exits non-zero (traceback on stderr) if any step fails.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m etr_assets_tests.crash_runner")
    parser.add_argument("--home", required=True, help="ETR_HOME: raw zone and warehouse")
    parser.add_argument("--catalog", required=True, help="Iceberg catalog name")
    parser.add_argument("--api-url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--days", required=True, help="comma-separated YYYY-MM-DD")
    parser.add_argument("--page-size", type=int, default=100)
    args = parser.parse_args(argv)
    days = sorted(dt.date.fromisoformat(d.strip()) for d in args.days.split(",") if d.strip())
    started = time.monotonic()

    def stage(name: str) -> None:
        print(json.dumps({"stage": name, "t": round(time.monotonic() - started, 3)}), flush=True)

    from etr_assets.lake.session import get_spark
    from etr_assets.pipeline import entities, transactions
    from etr_assets.settings import Settings
    from etr_assets.sources.api_client import ApiClient
    from etr_assets.sources.fetch import fetch_day
    from etr_assets.sources.raw_zone import local_raw_zone

    settings = Settings(home=args.home, catalog=args.catalog)
    catalog, raw = settings.catalog, local_raw_zone(settings.raw_root)
    client = ApiClient(args.api_url, args.token, page_size=args.page_size)
    for endpoint in ("transactions", "customers"):
        for day in days:
            stage(f"raw {endpoint} {day}")
            fetch_day(client, raw, endpoint, day)

    stage("spark session")
    spark = get_spark(settings)
    stage("bronze transactions")
    bronze = transactions.load_bronze(spark, catalog, raw, days, settings.max_reject_rate)
    stage("silver transactions")
    silver = transactions.build_silver(spark, catalog, days)
    stage("gold daily summary")
    gold = transactions.build_gold(spark, catalog, days)
    stage("bronze customers")
    customers = entities.load_bronze(spark, catalog, raw, entities.CUSTOMERS, days, settings.max_reject_rate)
    stage("landing customers")
    landing = entities.build_landing(spark, catalog, entities.CUSTOMERS, days)
    summary = {
        "done": True,
        "t": round(time.monotonic() - started, 3),
        "bronze_transactions": bronze.rows_by_day,
        "silver_transactions": silver.rows_by_day,
        "gold_daily_summary": gold.rows_by_day,
        "bronze_customers": customers.rows_by_day,
        "landing": {
            "inserted": landing.inserted,
            "updated": landing.updated,
            "deleted": landing.deleted,
            "changed": landing.changed,
        },
    }
    print(json.dumps(summary), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
