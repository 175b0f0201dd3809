"""Data-quality checks on real Spark frames and tables: each check passing and failing, figures per day recorded."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from etr_assets.lake.bookkeeping import DATA_QUALITY_METRICS
from etr_assets.lake.frames import local_frame
from etr_assets.lake.quality import (
    Severity,
    expectation_outcomes,
    metrics_of,
    post_write_outcomes,
    record_metrics,
    reference_outcome,
    row_count_outcome,
    rows_per_day,
    uniqueness_outcome,
)
from etr_assets.lake.specs import QualityRules
from etr_assets.tables.transactions import SILVER_TRANSACTIONS

D1, D2 = dt.date(2025, 5, 1), dt.date(2025, 5, 2)
SCHEMA = (
    "transaction_id bigint, customer_id bigint, merchant_id bigint, amount double, status string, transaction_date date"
)


def frame(spark, rows):
    return local_frame(spark, rows, SCHEMA)


def by_name(outcomes):
    return {o.name: o for o in outcomes}


def test_expectations_pass_on_good_rows_and_count_bad_rows_per_day(spark):
    good = frame(spark, [(1, 10, 5, 12.5, "APPROVED", D1), (2, 11, 5, 99.0, "REFUNDED", D2)])
    assert all(o.passed for o in expectation_outcomes(good, SILVER_TRANSACTIONS, [D1, D2]))

    bad = frame(
        spark,
        [
            (1, None, 5, 12.5, "APPROVED", D1),  # key missing
            (2, 11, 5, 0.0, "APPROVED", D1),  # amount out of range
            (3, 12, 5, 100001.0, "LOST", D2),  # out of range and unknown status
            (4, 13, 5, 5.0, "LOST", dt.date(2025, 5, 9)),  # another day: not judged
        ],
    )
    outcomes = by_name(expectation_outcomes(bad, SILVER_TRANSACTIONS, [D1, D2]))
    assert outcomes["keys_are_present"].violations == 1 and not outcomes["keys_are_present"].passed
    assert outcomes["amount_is_between_0_01_and_100000"].by_day == {str(D1): 1.0, str(D2): 1.0}
    assert outcomes["status_is_an_accepted_value"].by_day == {str(D1): 0.0, str(D2): 1.0}
    assert "LOST" in outcomes["status_is_an_accepted_value"].examples


def test_expectations_of_a_table_without_days_are_counted_over_all_rows(spark):
    undated = dataclasses.replace(SILVER_TRANSACTIONS, partition_by=())
    rows = frame(spark, [(1, 10, 5, 12.5, "APPROVED", D1), (2, None, 5, 0.0, "LOST", D2), (3, 11, 5, 1.0, "LOST", D2)])
    outcomes = by_name(expectation_outcomes(rows, undated, [D1]))
    assert outcomes["keys_are_present"].violations == 1 and outcomes["keys_are_present"].by_day == {}
    assert outcomes["status_is_an_accepted_value"].violations == 2
    assert "LOST" in outcomes["status_is_an_accepted_value"].examples
    assert outcomes["amount_is_between_0_01_and_100000"].examples.count("transaction_id") == 1
    assert expectation_outcomes(rows.limit(0), undated, [D1])[0].passed


def test_uniqueness_is_judged_over_the_whole_table(spark):
    rows = frame(spark, [(1, 10, 5, 1.0, "APPROVED", D1), (2, 10, 5, 1.0, "APPROVED", D2)])
    assert uniqueness_outcome(rows, SILVER_TRANSACTIONS, [D2]).passed
    repeated = rows.union(frame(spark, [(1, 10, 5, 2.0, "APPROVED", dt.date(2025, 4, 1))]))
    outcome = uniqueness_outcome(repeated, SILVER_TRANSACTIONS, [D1, D2])
    assert not outcome.passed and outcome.violations == 1 and outcome.examples == "1"
    assert outcome.by_day == {str(D1): 1.0, str(D2): 0.0}


def test_uniqueness_of_a_day_reads_only_the_files_its_keys_can_be_in(lake, settings):
    """The day's own files and those whose key bounds overlap its keys: an earlier day's file is never opened
    (here it is gone from disk, so a scan of the whole table would fail)."""
    import os

    from etr_assets.lake.evolve import ensure_table
    from etr_assets.lake.frames import conform

    ensure_table(lake, settings.catalog, SILVER_TRANSACTIONS)
    table = SILVER_TRANSACTIONS.qualified(settings.catalog)
    early, late = dt.date(2025, 1, 1), dt.date(2025, 1, 2)
    for day, first_id in ((early, 100), (late, 200)):
        rows = [(first_id + i, 10, 5, 1.0, "APPROVED", day) for i in range(3)]
        typed = frame(lake, rows).selectExpr(
            "*",
            "'EUR' AS currency",
            "3 AS instalments",
            "'CARD' AS payment_method",
            "current_timestamp() AS created_at",
            "current_timestamp() AS updated_at",
            "'b' AS _batch_id",
            "current_timestamp() AS _processed_at",
        )
        conform(typed, SILVER_TRANSACTIONS).writeTo(table).append()
    files = lake.sql(f"SELECT file_path FROM {table}.files WHERE partition.transaction_date_day = DATE'{early}'")
    (early_file,) = [r[0] for r in files.collect()]
    os.remove(early_file.removeprefix("file:"))

    outcome = uniqueness_outcome(lake.table(table), SILVER_TRANSACTIONS, [late])
    assert outcome.passed and outcome.by_day == {str(late): 0.0}
    with pytest.raises(Exception, match="(?i)not.*exist|FileNotFound|No such file"):
        lake.table(table).groupBy("transaction_id").count().collect()


def test_every_customer_of_a_transaction_must_be_known(spark):
    (reference,) = SILVER_TRANSACTIONS.quality.references
    customers = local_frame(spark, [(10,), (11,)], "customer_id bigint")
    rows = frame(spark, [(1, 10, 5, 1.0, "APPROVED", D1), (2, 11, 5, 1.0, "APPROVED", D2)])
    assert reference_outcome(rows, SILVER_TRANSACTIONS, reference, customers, [D1, D2]).passed

    strangers = rows.union(frame(spark, [(3, 77, 5, 1.0, "APPROVED", D2), (4, 77, 5, 1.0, "APPROVED", D2)]))
    outcome = reference_outcome(strangers, SILVER_TRANSACTIONS, reference, customers, [D1, D2])
    assert not outcome.passed and outcome.severity == Severity.WARN
    assert outcome.violations == 2 and outcome.by_day == {str(D1): 0.0, str(D2): 2.0} and outcome.examples == "77"


def days_with(spark, counts: dict[dt.date, int]):
    rows = [(i, 1, 1, 1.0, "APPROVED", day) for day, n in counts.items() for i in range(n)]
    return frame(spark, rows)


def test_row_count_anomaly_against_the_trailing_median(spark):
    history = {D1 - dt.timedelta(days=k): 100 for k in range(1, 8)}
    normal = days_with(spark, {**history, D1: 120})
    outcome = row_count_outcome(normal, SILVER_TRANSACTIONS, [D1])
    assert outcome.passed and outcome.by_day == {str(D1): 120.0}

    collapsed = days_with(spark, {**history, D1: 20})
    outcome = row_count_outcome(collapsed, SILVER_TRANSACTIONS, [D1])
    assert (
        not outcome.passed
        and outcome.severity == Severity.WARN
        and "20 rows against a median of 100" in outcome.examples
    )

    young = days_with(spark, {D1 - dt.timedelta(days=1): 100, D1: 5})
    outcome = row_count_outcome(young, SILVER_TRANSACTIONS, [D1])
    assert outcome.passed and "no verdict" in outcome.examples

    strict = dataclasses.replace(SILVER_TRANSACTIONS, quality=QualityRules(row_count_tolerance=0.1))
    assert not row_count_outcome(normal, strict, [D1]).passed  # 120 is 20% above: beyond a 10% tolerance


def test_the_row_count_comes_from_the_manifests_unless_deletes_are_pending(lake, settings):
    """The days' record counts in the manifests: no data file is opened (here they are gone from disk). A day with a
    delete file to apply is counted from its rows instead."""
    import os

    from etr_assets.lake.evolve import ensure_table
    from etr_assets.lake.frames import conform

    ensure_table(lake, settings.catalog, SILVER_TRANSACTIONS)
    table = SILVER_TRANSACTIONS.qualified(settings.catalog)
    days = [D1 - dt.timedelta(days=k) for k in range(8, -1, -1)]
    rows = [(i * 10 + n, 10, 5, 1.0, "APPROVED", day) for i, day in enumerate(days) for n in range(4)]
    typed = frame(lake, rows).selectExpr(
        "*", "'EUR' AS currency", "3 AS instalments", "'CARD' AS payment_method", "current_timestamp() AS created_at",
        "current_timestamp() AS updated_at", "'b' AS _batch_id", "current_timestamp() AS _processed_at",
    )  # fmt: skip
    conform(typed, SILVER_TRANSACTIONS).writeTo(table).append()
    assert rows_per_day(lake, table, "transaction_date", days[0], D1) == dict.fromkeys(days, 4)

    lake.sql(f"DELETE FROM {table} WHERE transaction_id = {len(days) * 10 - 10}")  # one row of D1: a delete file
    assert rows_per_day(lake, table, "transaction_date", days[0], D1) is None
    outcome = row_count_outcome(lake.table(table), SILVER_TRANSACTIONS, [D1], table)
    assert outcome.passed and outcome.by_day == {str(D1): 3.0}

    earlier = days[-2]
    for (path,) in lake.sql(f"SELECT file_path FROM {table}.files WHERE content = 0").collect():
        os.remove(path.removeprefix("file:"))
    outcome = row_count_outcome(lake.table(table), SILVER_TRANSACTIONS, [earlier], table)
    assert outcome.passed and outcome.by_day == {str(earlier): 4.0} and "no verdict" not in outcome.examples
    with pytest.raises(Exception, match="(?i)not.*exist|FileNotFound|No such file"):
        row_count_outcome(lake.table(table), SILVER_TRANSACTIONS, [earlier])  # what reading the rows would need


def test_figures_are_recorded_per_table_partition_and_check(lake, settings):
    from etr_assets.lake.evolve import ensure_table
    from etr_assets.lake.frames import conform

    ensure_table(lake, settings.catalog, SILVER_TRANSACTIONS)
    rows = frame(lake, [(1, 10, 5, 1.0, "APPROVED", D1), (2, 10, 5, 0.0, "APPROVED", D2)]).selectExpr(
        "*",
        "'EUR' AS currency",
        "current_timestamp() AS updated_at",
        "'b1' AS _batch_id",
        "current_timestamp() AS _processed_at",
        "CAST(NULL AS INT) AS instalments",
        "CAST(NULL AS STRING) AS payment_method",
        "CAST(NULL AS TIMESTAMP) AS created_at",
    )
    conform(rows.withColumn("amount", rows.amount.cast("decimal(10,2)")), SILVER_TRANSACTIONS).writeTo(
        SILVER_TRANSACTIONS.qualified(settings.catalog)
    ).append()

    outcomes = post_write_outcomes(lake, settings.catalog, SILVER_TRANSACTIONS, [D1, D2], expectations=True)
    names = {o.name for o in outcomes}
    assert {
        "keys_are_present",
        "amount_is_between_0_01_and_100000",
        "customer_id_is_known",
        "row_count_anomaly",
    } <= names
    unknown = by_name(outcomes)["customer_id_is_known"]
    assert not unknown.passed and "landing.customers was never written" in unknown.examples

    record_metrics(lake, settings.catalog, metrics_of(SILVER_TRANSACTIONS, outcomes), "run-1")
    recorded = {
        (r["metric"], r["partition_key"]): (r["value"], r["passed"])
        for r in lake.table(DATA_QUALITY_METRICS.qualified(settings.catalog)).where("run_id = 'run-1'").collect()
    }
    assert recorded[("amount_is_between_0_01_and_100000", str(D1))] == (0.0, True)
    assert recorded[("amount_is_between_0_01_and_100000", str(D2))] == (1.0, False)
    assert recorded[("row_count_anomaly", str(D2))] == (1.0, True)  # one row, no history: no verdict

    # A log of every measurement (README, docs/quality-and-health.md): a re-run's checks of the same days add
    # their rows beside the first run's, which stay as they were measured.
    metrics = metrics_of(SILVER_TRANSACTIONS, outcomes)
    record_metrics(lake, settings.catalog, metrics, "run-2")
    table = lake.table(DATA_QUALITY_METRICS.qualified(settings.catalog))
    runs = {r["run_id"]: r["count"] for r in table.groupBy("run_id").count().collect()}
    assert runs == {"run-1": len(metrics), "run-2": len(metrics)}, runs


@pytest.mark.parametrize("tolerance", [0.0, -1.0])
def test_quality_rules_refuse_nonsense(tolerance):
    from etr_assets.errors import SpecError

    with pytest.raises(SpecError, match="row_count_tolerance"):
        QualityRules(row_count_tolerance=tolerance)


def test_a_reference_to_a_history_finds_keys_outside_the_current_versions_by_value(spark):
    """Keys of current versions are known at once; one whose versions are all closed (a deleted customer) is looked
    up by value and still known; a key of no version is reported."""
    (reference,) = SILVER_TRANSACTIONS.quality.references
    history = local_frame(
        spark,
        [(10, None), (11, dt.datetime(2025, 1, 3)), (10, dt.datetime(2025, 1, 2))],
        "customer_id bigint, _valid_to timestamp",
    )
    rows = frame(
        spark, [(1, 10, 5, 1.0, "APPROVED", D1), (2, 11, 5, 1.0, "APPROVED", D1), (3, 77, 5, 1.0, "APPROVED", D2)]
    )
    outcome = reference_outcome(rows, SILVER_TRANSACTIONS, reference, history, [D1, D2], "_valid_to IS NULL")
    assert outcome.violations == 1 and outcome.by_day == {str(D1): 0.0, str(D2): 1.0} and outcome.examples == "77"
    assert reference_outcome(
        rows.where("customer_id <> 77"), SILVER_TRANSACTIONS, reference, history, [D1], "_valid_to IS NULL"
    ).passed


def counted(spark, df):
    """`df` whose rows add to an accumulator each time a job reads them: how often a check reads a table, counted
    by Spark itself (a cost that grows with the table is counted in rows, whatever the machine's load)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType

    reads = spark.sparkContext.accumulator(0)

    def seen(_):
        reads.add(1)
        return True

    return df.where(F.udf(seen, BooleanType()).asNondeterministic()(F.col(df.columns[0]))), reads


def test_a_reference_to_a_history_reads_its_current_versions_once(spark):
    """The current versions (whose files pile up between compactions of a history) are read once, the few keys
    left looked up by value once: the figures per day, the count and the examples come from that one pass."""
    (reference,) = SILVER_TRANSACTIONS.quality.references
    versions = [(10, None), (12, None), (13, None), (11, dt.datetime(2025, 1, 3)), (10, dt.datetime(2025, 1, 2))]
    history, reads = counted(spark, local_frame(spark, versions, "customer_id bigint, _valid_to timestamp"))
    rows = frame(
        spark,
        [(1, 10, 5, 1.0, "APPROVED", D1), (2, 11, 5, 1.0, "APPROVED", D1)]
        + [(3 + i, 77, 5, 1.0, "APPROVED", D2) for i in range(3)],
    )
    outcome = reference_outcome(rows, SILVER_TRANSACTIONS, reference, history, [D1, D2], "_valid_to IS NULL")
    assert outcome.violations == 3 and outcome.by_day == {str(D1): 0.0, str(D2): 3.0} and outcome.examples == "77"
    assert reads.value == 2 * len(versions)  # the current versions once, the lookup of 11 and 77 once


def test_uniqueness_plans_the_range_of_its_keys_once(spark):
    """The range scan of the keys (planned over every data file's bounds, which grows with the table) runs once: the
    repeated keys come back in one job, and the count, the examples and the rows per day come from them."""
    table, reads = counted(
        spark,
        frame(
            spark, [(1, 10, 5, 1.0, "APPROVED", D1), (2, 10, 5, 1.0, "APPROVED", D2), (2, 11, 5, 1.0, "APPROVED", D2)]
        ),
    )
    outcome = uniqueness_outcome(table, SILVER_TRANSACTIONS, [D2])
    assert not outcome.passed and outcome.violations == 1 and outcome.examples == "2"
    assert outcome.by_day == {str(D2): 2.0}
    # The day's bounds, then the range joined with the day's keys, then the day's rows of the repeated key.
    assert reads.value == 3 * 3 + 3


def test_a_history_checks_the_versions_its_apply_wrote_not_every_version_kept(lake, settings):
    """A table without days checks only the rows `written_rows` selects: files written earlier are skipped by
    their `_ingested_at` bounds (here one is gone from disk, so reading every version would fail)."""
    import os

    from etr_assets.lake.evolve import ensure_table
    from etr_assets.lake.frames import conform
    from etr_assets.lake.specs import SCD2_EXPECTATIONS
    from etr_assets_tests.lake.test_scd2 import SPEC

    spec = dataclasses.replace(SPEC, expectations=SCD2_EXPECTATIONS)  # the landing histories' rules
    ensure_table(lake, settings.catalog, spec)
    table = spec.qualified(settings.catalog)
    for key, ingested in ((1, "2025-01-01"), (2, "2025-06-01")):
        row = lake.sql(
            f"SELECT {key}L AS id, 'x' AS a, 1L AS b, TIMESTAMP'2025-01-01' AS updated_at, "
            f"TIMESTAMP'{ingested}' AS _ingested_at, 'f' AS _source_file, 'b' AS _batch_id, true AS _is_current, "
            "TIMESTAMP'2025-01-01' AS _valid_from, CAST(NULL AS timestamp) AS _valid_to, 0L AS _state_hash"
        )
        conform(row, spec).writeTo(table).append()
    (early,) = [
        r[0]
        for r in lake.sql(f"SELECT file_path FROM {table}.files WHERE readable_metrics.id.lower_bound = 1").collect()
    ]
    os.remove(early.removeprefix("file:"))

    outcomes = post_write_outcomes(lake, settings.catalog, spec, [], True, "_ingested_at >= TIMESTAMP'2025-05-01'")
    assert len(outcomes) == len(SCD2_EXPECTATIONS) and all(o.passed for o in outcomes)
    with pytest.raises(Exception, match="(?i)not.*exist|FileNotFound|No such file"):
        post_write_outcomes(lake, settings.catalog, spec, [], True)
