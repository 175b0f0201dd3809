"""The transaction pipeline library on real Spark + Iceberg, against the real synthetic API."""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from decimal import Decimal

import pytest

from etr_assets.pipeline import transactions as pipeline
from etr_assets.sources.fetch import fetch_day
from etr_assets.sources.synthetic_api import transactions_for
from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, GOLD_DAILY_SUMMARY, SILVER_TRANSACTIONS
from etr_assets_tests.conftest import FETCHED_DAYS as DAYS  # the days fetched_raw holds
from etr_assets_tests.sources.clients import bnpl_client


def expected_latest(api, day):
    """Plain-Python truth: per transaction id, the record with the newest updated_at."""
    latest = {}
    for record in transactions_for(api.config, day):
        seen = latest.get(record["transaction_id"])
        if seen is None or record["updated_at"] > seen["updated_at"]:
            latest[record["transaction_id"]] = record
    return latest


def rows(lake, spec, settings, columns="*", where="true"):
    return lake.sql(f"SELECT {columns} FROM {spec.qualified(settings.catalog)} WHERE {where}").collect()


def test_bronze_keeps_every_received_record_with_lineage_and_completes_the_batch(lake, settings, fetched_raw, api):
    result = pipeline.load_bronze(lake, settings.catalog, fetched_raw, DAYS)

    received = sum(len(transactions_for(api.config, d)) for d in DAYS)
    bronze = rows(lake, BRONZE_TRANSACTIONS, settings)
    assert len(bronze) == received == result.rows
    assert result.commit.snapshot_id is not None and result.commit.added_records == received
    assert all(r["_batch_id"] and r["_source_file"].endswith(".jsonl") and r["_ingested_at"] for r in bronze)
    assert {r["amount"] for r in bronze} <= {t["amount"] for d in DAYS for t in transactions_for(api.config, d)}
    for day in DAYS:
        (batch,) = fetched_raw.batches("bnpl", "transactions", day)
        assert fetched_raw.is_complete(batch)
        assert fetched_raw.uncommitted("bnpl", "transactions", day) == []


def test_a_day_of_more_rows_than_a_writer_takes_is_written_by_two_tasks_each_file_in_the_tables_order(
    lake, settings, fetched_raw, monkeypatch
):
    from etr_assets.lake import bronze

    pipeline.load_bronze(lake, settings.catalog, fetched_raw, [DAYS[0]])
    monkeypatch.setattr(bronze, "ROWS_PER_WRITER", 20)  # a day of about 40 rows takes two writers (two cores)
    result = pipeline.load_bronze(lake, settings.catalog, fetched_raw, [DAYS[1]])

    files = lake.sql(
        f"SELECT file_path, record_count, partition FROM {BRONZE_TRANSACTIONS.qualified(settings.catalog)}.files"
    ).collect()
    per_day = defaultdict(list)
    for file in files:
        per_day[file["partition"]["transaction_date_day"]].append(file["record_count"])
    assert {day: len(counts) for day, counts in per_day.items()} == {DAYS[0]: 1, DAYS[1]: 2}
    assert sum(per_day[DAYS[1]]) == result.rows
    for file in files:  # each writer sorts its share as the table's write order says
        ids = [r[0] for r in lake.read.parquet(file["file_path"]).select("transaction_id").collect()]
        assert ids == sorted(ids)


def test_silver_is_typed_deduplicated_and_latest_update_wins(lake, settings, fetched_raw, api):
    pipeline.load_bronze(lake, settings.catalog, fetched_raw, DAYS)
    result = pipeline.build_silver(lake, settings.catalog, DAYS)

    silver = rows(lake, SILVER_TRANSACTIONS, settings)
    truth = {k: v for d in DAYS for k, v in expected_latest(api, d).items()}
    assert len(silver) == len(truth) == result.rows == settings.api_transactions_per_day * len(DAYS)
    assert result.extra["duplicates_removed"] == sum(len(transactions_for(api.config, d)) for d in DAYS) - len(truth)
    for row in silver:
        want = truth[row["transaction_id"]]
        assert row["status"] == want["status"]
        assert row["amount"] == Decimal(want["amount"])  # decimal(10,2), exact
        assert row["updated_at"] == dt.datetime.fromisoformat(want["updated_at"].replace("Z", "")).replace(tzinfo=None)
    schema = {
        f.name: f.dataType.simpleString() for f in lake.table(SILVER_TRANSACTIONS.qualified(settings.catalog)).schema
    }
    assert schema["amount"] == "decimal(10,2)" and schema["transaction_date"] == "date"


@pytest.mark.slow
def test_gold_matches_a_plain_python_summary(lake, settings, fetched_raw, api):
    pipeline.load_bronze(lake, settings.catalog, fetched_raw, DAYS)
    pipeline.build_silver(lake, settings.catalog, DAYS)
    pipeline.build_gold(lake, settings.catalog, DAYS)

    want = defaultdict(lambda: {"transactions": 0, "gross": Decimal("0"), "declined": 0})
    for day in DAYS:
        for record in expected_latest(api, day).values():
            cell = want[(day, record["currency"])]
            cell["transactions"] += 1
            cell["declined"] += record["status"] == "DECLINED"
            if record["status"] in ("APPROVED", "PROCESSED"):
                cell["gross"] += Decimal(record["amount"])
    gold = {(r["transaction_date"], r["currency"]): r for r in rows(lake, GOLD_DAILY_SUMMARY, settings)}
    assert set(gold) == set(want)
    for key, cell in want.items():
        assert gold[key]["transactions"] == cell["transactions"]
        assert gold[key]["gross_amount"] == cell["gross"]
        assert gold[key]["declined"] == cell["declined"]


@pytest.mark.slow
def test_rebuilding_a_day_replaces_it_without_duplicates(lake, settings, fetched_raw, api):
    for _ in range(2):
        pipeline.load_bronze(lake, settings.catalog, fetched_raw, DAYS)
        pipeline.build_silver(lake, settings.catalog, DAYS)
        pipeline.build_gold(lake, settings.catalog, DAYS)
    first = {
        r[0]: r[1] for r in rows(lake, SILVER_TRANSACTIONS, settings, "transaction_date, count(*)", "true GROUP BY 1")
    }

    # A new download of one day supersedes the old batch; the other day is untouched.
    fetch_day(bnpl_client(api.url, api.config.token, page_size=1000), fetched_raw, "transactions", DAYS[0])
    pipeline.load_bronze(lake, settings.catalog, fetched_raw, [DAYS[0]])
    pipeline.build_silver(lake, settings.catalog, [DAYS[0]])
    after = {
        r[0]: r[1] for r in rows(lake, SILVER_TRANSACTIONS, settings, "transaction_date, count(*)", "true GROUP BY 1")
    }
    assert first == after == {d: settings.api_transactions_per_day for d in DAYS}
    bronze_batches = rows(
        lake, BRONZE_TRANSACTIONS, settings, "DISTINCT _batch_id", f"transaction_date = DATE'{DAYS[0]}'"
    )
    newest = fetched_raw.batches("bnpl", "transactions", DAYS[0])[-1]
    assert [r[0] for r in bronze_batches] == [newest.batch_id]
    assert all(fetched_raw.is_complete(b) for b in fetched_raw.batches("bnpl", "transactions", DAYS[0]))


def test_a_day_without_transactions_empties_that_day(lake, settings, fetched_raw):
    day = dt.date(2025, 3, 3)
    batch = fetched_raw.start_batch("bnpl", "transactions", day)
    fetched_raw.seal(batch, [], 0)
    result = pipeline.load_bronze(lake, settings.catalog, fetched_raw, [day])
    assert result.rows == 0 and fetched_raw.is_complete(batch)
    assert pipeline.build_silver(lake, settings.catalog, [day]).rows == 0


GOOD = {
    "transaction_id": 1,
    "customer_id": 2,
    "merchant_id": 3,
    "amount": "1.00",
    "currency": "MYR",
    "instalments": 3,
    "payment_method": "CARD",
    "status": "APPROVED",
    "transaction_date": "2025-03-04",
    "created_at": "2025-03-04T10:00:00Z",
    "updated_at": "2025-03-04T10:00:00Z",
}


def plant_batch(fetched_raw, day, lines):
    batch = fetched_raw.start_batch("bnpl", "transactions", day)
    fetched_raw.storage.write_bytes(f"{batch.key}/part-00001.jsonl", "".join(line + "\n" for line in lines).encode())
    fetched_raw.seal(batch, ["part-00001.jsonl"], len(lines))
    return batch


def test_too_many_bad_records_fail_before_writing_and_the_batch_stays_pending(lake, settings, fetched_raw):
    day = dt.date(2025, 3, 4)
    batch = plant_batch(fetched_raw, day, [json.dumps(GOOD), "{not json", json.dumps({**GOOD, "customer_id": "abc"})])

    with pytest.raises(pipeline.BadInputError) as failure:
        pipeline.load_bronze(lake, settings.catalog, fetched_raw, [day])
    message = str(failure.value)
    assert f"raw batch {batch.key}: 2 of 3 records refused" in message
    assert "part-00001.jsonl:2: not a JSON object" in message
    assert "part-00001.jsonl:3: a value of the wrong type: customer_id expects bigint, got abc" in message
    assert not fetched_raw.is_complete(batch)  # stays pending: a fixed source or a higher threshold can retry it
    assert fetched_raw.storage.exists(f"{batch.key}/part-00001.jsonl")
    assert not lake.catalog.tableExists(f"{settings.catalog}.bronze.bnpl_transactions_raw")  # nothing written

    result = pipeline.load_bronze(lake, settings.catalog, fetched_raw, [day], max_reject_rate=0.9)  # the retry
    assert result.rows == 1 and result.extra["records_quarantined"] == 2 and fetched_raw.is_complete(batch)


@pytest.mark.slow
def test_bad_records_are_quarantined_with_reason_file_and_line_and_counts_reconcile(lake, settings, fetched_raw):
    day = dt.date(2025, 3, 4)
    good_lines = [json.dumps({**GOOD, "transaction_id": i, "loyalty_points": 5}) for i in range(1, 21)]
    bad = [
        '"#corrupted#"',
        json.dumps({k: v for k, v in GOOD.items() if k != "transaction_id"}),
        json.dumps({**GOOD, "transaction_id": 98, "amount": "-5.00"}),
        json.dumps({**GOOD, "transaction_id": 99, "transaction_date": "2025-03-03"}),
    ]
    batch = plant_batch(fetched_raw, day, good_lines[:10] + bad + good_lines[10:])
    result = pipeline.load_bronze(lake, settings.catalog, fetched_raw, [day], max_reject_rate=0.25)

    assert (
        result.extra["records_received"] == 24 == result.extra["records_accepted"] + result.extra["records_quarantined"]
    )
    assert result.rows == 20 and result.extra["records_quarantined"] == 4
    assert result.extra["unknown_fields"] == "loyalty_points (20)"
    assert any("loyalty_points" in w for w in result.warnings)
    quarantine = {
        r["line_number"]: r
        for r in lake.sql(f"SELECT * FROM {settings.catalog}.bronze.quarantine_transactions").collect()
    }
    assert sorted(quarantine) == [11, 12, 13, 14]
    assert quarantine[11]["reason"] == "not a JSON object" and quarantine[11]["raw_text"] == '"#corrupted#"'
    assert quarantine[12]["reason"] == "missing required field transaction_id"
    assert quarantine[13]["reason"] == "out of range: amount is a decimal with at most 8 integer and 2 fraction digits"
    assert quarantine[14]["reason"] == "transaction_date 2025-03-03 is not the batch day 2025-03-04"
    assert quarantine[13]["customer_id"] == 2 and quarantine[13]["_batch_id"] == batch.batch_id
    assert all(r["source_file"].endswith(f"{batch.batch_id}/part-00001.jsonl") for r in quarantine.values())

    pipeline.load_bronze(
        lake, settings.catalog, fetched_raw, [day], max_reject_rate=0.25
    )  # rerun: same rows, no duplicates
    again = lake.sql(f"SELECT count(*) FROM {settings.catalog}.bronze.quarantine_transactions").first()[0]
    assert again == 4

    # The source fixes the day: its quarantined records go with the reload. A clean day adds no quarantine commit.
    quarantine_table = f"{settings.catalog}.bronze.quarantine_transactions"
    plant_batch(fetched_raw, day, good_lines)
    pipeline.load_bronze(lake, settings.catalog, fetched_raw, [day])
    assert lake.sql(f"SELECT count(*) FROM {quarantine_table}").first()[0] == 0
    snapshots = lake.sql(f"SELECT count(*) FROM {quarantine_table}.snapshots").first()[0]
    next_day = day + dt.timedelta(days=1)
    plant_batch(fetched_raw, next_day, [json.dumps({**GOOD, "transaction_date": next_day.isoformat()})])
    assert pipeline.load_bronze(lake, settings.catalog, fetched_raw, [next_day]).rows == 1
    assert lake.sql(f"SELECT count(*) FROM {quarantine_table}.snapshots").first()[0] == snapshots


def test_a_value_not_exactly_of_its_type_is_quarantined_never_cast_and_unencodable_text_only_sinks_its_record(
    lake, settings, fetched_raw
):
    day = dt.date(2025, 3, 4)
    good = [json.dumps({**GOOD, "transaction_id": i}) for i in range(1, 11)]
    good.append(json.dumps({**GOOD, "transaction_id": 11, "payment_method": "CARD \U0001f600"}))  # a valid pair
    record = json.dumps(GOOD)[1:-1]  # the fields without braces, to append raw ones
    wrong = {
        12: '{"transaction_id": 1.9, ' + record.split(", ", 1)[1] + "}",  # would truncate onto id 1
        13: json.dumps({**GOOD, "transaction_id": 13, "instalments": "3.9"}),
        14: json.dumps({**GOOD, "transaction_id": 14, "customer_id": 100001.5}),
        15: json.dumps({**GOOD, "transaction_id": 99999999999999999999}),  # overflows bigint
        16: json.dumps({**GOOD, "transaction_id": 16, "transaction_date": "2025-03-04 and then some"}),
        17: json.dumps({**GOOD, "transaction_id": 17, "updated_at": "NaN"}),
        18: json.dumps({**GOOD, "transaction_id": 18, "payment_method": "CA\ud800RD"}),  # a lone surrogate
    }
    plant_batch(fetched_raw, day, good + list(wrong.values()))

    result = pipeline.load_bronze(lake, settings.catalog, fetched_raw, [day], max_reject_rate=0.5)

    assert result.rows == 11 and result.extra["records_quarantined"] == 7
    ids = {
        r[0] for r in lake.sql(f"SELECT transaction_id FROM {settings.catalog}.bronze.bnpl_transactions_raw").collect()
    }
    assert ids == set(range(1, 12))  # nothing truncated onto a real id
    reasons = {
        r["line_number"]: r["reason"]
        for r in lake.sql(
            f"SELECT line_number, reason FROM {settings.catalog}.bronze.quarantine_transactions"
        ).collect()
    }
    assert reasons == {
        12: "a value of the wrong type: transaction_id expects bigint, got 1.9",
        13: "a value of the wrong type: instalments expects int, got 3.9",
        14: "a value of the wrong type: customer_id expects bigint, got 100001.5",
        15: "a value of the wrong type: transaction_id expects bigint, got 99999999999999999999",
        16: "a value of the wrong type: transaction_date expects date, got 2025-03-04 and then some",
        17: "a value of the wrong type: updated_at expects timestamp, got NaN",
        18: "text that cannot be encoded: a lone UTF-16 surrogate (\\uD800-\\uDFFF)",
    }


@pytest.mark.slow
def test_a_transaction_breaking_a_per_record_expectation_waits_in_quarantine_and_its_day_publishes(
    lake, settings, fetched_raw
):

    day = dt.date(2025, 3, 4)
    lines = [json.dumps({**GOOD, "transaction_id": i, "amount": f"{i}.00"}) for i in range(1, 41)]
    lines.append(json.dumps({**GOOD, "transaction_id": 41, "amount": "150000.00"}))  # fine for bronze, not silver
    plant_batch(fetched_raw, day, lines)
    pipeline.load_bronze(lake, settings.catalog, fetched_raw, [day])

    silver = pipeline.build_silver(lake, settings.catalog, [day], audit_branch="audit_test")
    gold = pipeline.build_gold(lake, settings.catalog, [day], audit_branch="audit_test")

    assert silver.rows_by_day == {day.isoformat(): 40} and silver.extra["records_quarantined"] == 1
    (held,) = [o for o in silver.checks if o.name == "records_quarantined"]
    assert not held.passed and held.severity == "WARN" and held.by_day == {day.isoformat(): 1.0}
    assert all(o.passed for o in silver.checks if o.name != "records_quarantined")
    (row,) = lake.sql(f"SELECT * FROM {settings.catalog}.silver.quarantine_transactions").collect()
    assert (row["transaction_id"], row["amount"], row["reason"]) == (
        41,
        Decimal("150000.00"),
        "amount is between 0.01 and 100000",
    )
    assert lake.sql(f"SELECT sum(transactions) FROM {GOLD_DAILY_SUMMARY.qualified(settings.catalog)}").first()[0] == 40
    assert gold.rows == 1

    # An incremental rebuild of the day (a new transaction appended to bronze) keeps the held-back one held back.
    from etr_assets.lake.writes import append

    late = (
        lake.table(BRONZE_TRANSACTIONS.qualified(settings.catalog))
        .where("transaction_id = 1")
        .selectExpr(
            "42 AS transaction_id", *[c.name for c in BRONZE_TRANSACTIONS.columns if c.name != "transaction_id"]
        )
    )
    append(lake, BRONZE_TRANSACTIONS.qualified(settings.catalog), late)
    again = pipeline.build_silver(lake, settings.catalog, [day], "audit_test2")
    assert again.extra["days_read_incrementally"] == 1 and again.rows_by_day == {day.isoformat(): 41}
    assert lake.sql(f"SELECT count(*) FROM {settings.catalog}.silver.quarantine_transactions").first()[0] == 1


def test_missing_download_is_a_clear_error(lake, settings, fetched_raw):
    with pytest.raises(pipeline.BadInputError, match="no downloaded raw batch for 2025-04-01"):
        pipeline.load_bronze(lake, settings.catalog, fetched_raw, [dt.date(2025, 4, 1)])


@pytest.mark.slow
def test_an_empty_reply_for_a_loaded_day_fails_and_leaves_the_day_until_a_run_says_the_shrink_is_intended(
    lake, settings, fetched_raw
):
    from etr_assets.errors import BadInputError
    from etr_assets.tables.feeds import TRANSACTIONS

    day = DAYS[0]
    pipeline.load_bronze(lake, settings.catalog, fetched_raw, [day])
    table = BRONZE_TRANSACTIONS.qualified(settings.catalog)
    loaded = lake.table(table).where(f"transaction_date = DATE'{day}'").count()
    snapshots = lake.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0]
    empty = fetched_raw.start_batch(
        TRANSACTIONS.source, TRANSACTIONS.endpoint, day
    )  # the API answered 200 with no transaction
    fetched_raw.seal(empty, [], 0)

    with pytest.raises(BadInputError) as refused:
        pipeline.load_bronze(lake, settings.catalog, fetched_raw, [day])
    message = str(refused.value)
    assert empty.key in message and f"from {loaded} to 0 rows" in message and "max_day_shrink" in message
    assert lake.table(table).where(f"transaction_date = DATE'{day}'").count() == loaded
    assert lake.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0] == snapshots  # nothing committed
    assert empty in fetched_raw.pending(TRANSACTIONS.source, TRANSACTIONS.endpoint)

    pipeline.load_bronze(lake, settings.catalog, fetched_raw, [day], max_day_shrink=1.0)  # the source really emptied it
    assert lake.table(table).where(f"transaction_date = DATE'{day}'").count() == 0
    assert empty not in fetched_raw.pending(TRANSACTIONS.source, TRANSACTIONS.endpoint)
