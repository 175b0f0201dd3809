"""Write-audit-publish for silver and gold: published only when the blocking checks pass."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from etr_assets.errors import AuditFailed
from etr_assets.pipeline import transactions as pipeline
from etr_assets.sources.raw_zone import local_raw_zone
from etr_assets.tables.transactions import GOLD_DAILY_SUMMARY, SILVER_TRANSACTIONS

DAY = dt.date(2025, 6, 1)
RECORD = {
    "transaction_id": 1,
    "customer_id": 2,
    "merchant_id": 3,
    "amount": "10.00",
    "currency": "MYR",
    "instalments": 3,
    "payment_method": "CARD",
    "status": "APPROVED",
    "transaction_date": DAY.isoformat(),
    "created_at": "2025-06-01T10:00:00Z",
    "updated_at": "2025-06-01T10:00:00Z",
}


def load_day(lake, settings, records, day=DAY):
    raw = local_raw_zone(settings.raw_root)
    batch = raw.start_batch("bnpl", "transactions", day)
    raw.storage.write_bytes(f"{batch.key}/part-00001.jsonl", "".join(json.dumps(r) + "\n" for r in records).encode())
    raw.seal(batch, ["part-00001.jsonl"], len(records))
    pipeline.load_bronze(lake, settings.catalog, raw, [day])


def refs(lake, spec, settings):
    return {r[0] for r in lake.sql(f"SELECT name FROM {spec.qualified(settings.catalog)}.refs").collect()}


@pytest.mark.slow
def test_passing_checks_publish_to_main_and_drop_the_branch(lake, settings):
    load_day(lake, settings, [RECORD, {**RECORD, "transaction_id": 2, "amount": "20.00"}])
    silver = pipeline.build_silver(lake, settings.catalog, [DAY], audit_branch="audit_ok")
    gold = pipeline.build_gold(lake, settings.catalog, [DAY], audit_branch="audit_ok")
    assert all(c.passed for c in silver.checks) and {c.name for c in silver.checks} >= {
        "keys_are_present",
        "transaction_id_is_unique",
    }
    assert all(c.passed for c in gold.checks)
    assert lake.table(SILVER_TRANSACTIONS.qualified(settings.catalog)).count() == 2
    assert refs(lake, SILVER_TRANSACTIONS, settings) == {"main"} == refs(lake, GOLD_DAILY_SUMMARY, settings)

    # Three metadata versions a day: the branch made, the write, and main fast-forwarded with the branch dropped
    # in one commit (each version is a metadata file written and, past the table's limit, an old one deleted).
    versions = f"SELECT count(*) FROM {SILVER_TRANSACTIONS.qualified(settings.catalog)}.metadata_log_entries"
    before = lake.sql(versions).first()[0]
    day2 = DAY + dt.timedelta(days=1)
    load_day(lake, settings, [{**RECORD, "transaction_id": 3, "transaction_date": day2.isoformat()}], day2)
    pipeline.build_silver(lake, settings.catalog, [day2], audit_branch="audit_ok2")
    assert lake.sql(versions).first()[0] - before == 3


@pytest.mark.slow
def test_failing_checks_leave_main_unchanged_and_keep_the_branch(lake, settings):
    load_day(lake, settings, [RECORD])
    pipeline.build_silver(lake, settings.catalog, [DAY], audit_branch="audit_first")
    table = SILVER_TRANSACTIONS.qualified(settings.catalog)
    before = lake.sql(f"SELECT snapshot_id FROM {table}.refs WHERE name = 'main'").first()[0]

    # A day repeating another day's transaction id: silver's per-day uniqueness check blocks it.
    day2 = DAY + dt.timedelta(days=1)
    load_day(
        lake,
        settings,
        [
            {**RECORD, "transaction_date": day2.isoformat()},
            {**RECORD, "transaction_id": 2, "transaction_date": day2.isoformat()},
        ],
        day2,
    )
    with pytest.raises(AuditFailed) as failure:
        pipeline.build_silver(lake, settings.catalog, [day2], audit_branch="audit_bad")
    message = str(failure.value)
    assert "main is unchanged" in message and "branch 'audit_bad'" in message
    assert "transaction_id is unique (1 rows)" in message
    assert lake.sql(f"SELECT snapshot_id FROM {table}.refs WHERE name = 'main'").first()[0] == before
    assert lake.table(table).count() == 1  # readers of main see the last good data
    assert lake.sql(f"SELECT count(*) FROM {table} VERSION AS OF 'audit_bad'").first()[0] == 3  # kept for inspection
    assert "audit_bad" in refs(lake, SILVER_TRANSACTIONS, settings)
