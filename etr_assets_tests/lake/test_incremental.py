"""Incremental silver: per day, read only the bronze rows appended since the day was built, else the whole day; the
day's cursor stamped on the silver commit that last rebuilt it."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import functions as F

from etr_assets.lake.incremental import Cursor, ReadMode
from etr_assets.lake.writes import append, current_snapshot_id
from etr_assets.pipeline import transactions as pipeline
from etr_assets.sources.fetch import fetch_day
from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, SILVER_TRANSACTIONS
from etr_assets_tests.conftest import FETCHED_DAYS as DAYS  # the days fetched_raw holds
from etr_assets_tests.sources.clients import bnpl_client

D0, D1 = DAYS


def cursor_of(result) -> Cursor:
    return Cursor(int(result.extra["bronze_snapshot_id"]), int(result.extra["silver_snapshot_id"]))


def silver_rows(lake, settings, day):
    table = lake.table(SILVER_TRANSACTIONS.qualified(settings.catalog)).where(F.col("transaction_date") == day)
    return sorted(tuple(r) for r in table.drop("_processed_at").collect())


def modes(result) -> dict[str, str]:
    return {
        line.split(" | ")[0].strip("| "): line.split(" | ")[1] for line in result.extra["read_plan"].splitlines()[2:]
    }


@pytest.mark.slow
def test_first_loads_append_and_an_unchanged_day_is_neither_read_nor_rewritten(lake, settings, fetched_raw):
    bronze_first = pipeline.load_bronze(lake, settings.catalog, fetched_raw, [D0])
    assert bronze_first.commit.operation == "append"  # a first load: downstream can read it incrementally
    built = pipeline.build_silver(lake, settings.catalog, [D0])
    assert modes(built) == {str(D0): ReadMode.WHOLE_DAY}
    silver_snapshot = current_snapshot_id(lake, SILVER_TRANSACTIONS.qualified(settings.catalog))

    assert pipeline.load_bronze(lake, settings.catalog, fetched_raw, [D1]).commit.operation == "append"
    again = pipeline.build_silver(lake, settings.catalog, [D0])

    assert modes(again) == {str(D0): ReadMode.UNCHANGED}
    assert again.extra["bronze_rows_read"] == 0 and again.commit.snapshot_id is None
    assert current_snapshot_id(lake, SILVER_TRANSACTIONS.qualified(settings.catalog)) == silver_snapshot
    assert again.rows_by_day == built.rows_by_day  # what the day holds, reported all the same


def test_a_read_plan_walks_lineage_on_metadata_without_a_spark_job(lake, settings, fetched_raw):
    """Neither finding the cursors nor planning reads a metadata table (`.snapshots` is every snapshot a table
    keeps, a job that grows with its history): both walk snapshots on metadata."""
    import uuid

    from etr_assets.lake.incremental import plan_reads, stamped_cursors

    pipeline.load_bronze(lake, settings.catalog, fetched_raw, [D0])
    built = pipeline.build_silver(lake, settings.catalog, [D0])
    bronze, silver = BRONZE_TRANSACTIONS.qualified(settings.catalog), SILVER_TRANSACTIONS.qualified(settings.catalog)
    group = f"plan-{uuid.uuid4().hex}"
    lake.sparkContext.setJobGroup(group, group)
    try:
        cursors = stamped_cursors(lake, silver, [D0, D1])
        plan = plan_reads(lake, bronze, silver, "transaction_date", cursors)
    finally:
        lake.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert cursors == {D0: cursor_of(built), D1: None}  # D1 never built
    assert [d.mode for d in plan.days] == [ReadMode.UNCHANGED, ReadMode.WHOLE_DAY]
    assert lake.sparkContext.statusTracker().getJobIdsForGroup(group) == []


@pytest.mark.slow
def test_the_days_a_snapshot_changed_are_read_from_its_own_manifests(lake, settings, fetched_raw):
    """Which days the snapshots since a cursor touched is read from those snapshots' own manifests: a manifest an
    older snapshot wrote is never opened (here it is gone from disk), however many the table keeps."""
    import os

    from etr_assets.lake.incremental import plan_reads

    bronze, silver = BRONZE_TRANSACTIONS.qualified(settings.catalog), SILVER_TRANSACTIONS.qualified(settings.catalog)
    pipeline.load_bronze(lake, settings.catalog, fetched_raw, [D0])
    built = pipeline.build_silver(lake, settings.catalog, [D0])
    pipeline.load_bronze(lake, settings.catalog, fetched_raw, [D1])
    older = lake.sql(
        f"SELECT path FROM {bronze}.manifests WHERE added_snapshot_id = {cursor_of(built).upstream_snapshot_id}"
    )
    for (path,) in older.collect():
        os.remove(path.removeprefix("file:"))

    plan = plan_reads(lake, bronze, silver, "transaction_date", {D0: cursor_of(built)})
    assert [(d.mode, d.reason) for d in plan.days] == [
        (ReadMode.UNCHANGED, f"no snapshot since {cursor_of(built).upstream_snapshot_id} changed the day")
    ]
    with pytest.raises(Exception, match="(?i)not.*exist|FileNotFound|No such file"):
        lake.table(f"{bronze}.all_entries").collect()


@pytest.mark.slow
def test_appended_late_rows_are_merged_and_equal_a_full_rebuild(lake, settings, fetched_raw):
    pipeline.load_bronze(lake, settings.catalog, fetched_raw, DAYS)
    built = pipeline.build_silver(lake, settings.catalog, DAYS)
    bronze = BRONZE_TRANSACTIONS.qualified(settings.catalog)

    # A late batch for D0: three transactions updated an hour later, and two new ones.
    day0 = lake.table(bronze).where(F.col("transaction_date") == D0).orderBy("transaction_id")
    updated = day0.limit(3).withColumns(
        {"status": F.lit("REFUNDED"), "updated_at": F.col("updated_at") + F.expr("INTERVAL 1 HOUR")}
    )
    new = day0.limit(2).withColumn("transaction_id", F.col("transaction_id") + F.lit(10_000_000))
    late = updated.unionByName(new).withColumns(
        {"_batch_id": F.lit("late-batch"), "_ingested_at": F.current_timestamp()}
    )
    assert append(lake, bronze, late.localCheckpoint()).operation == "append"

    merged = pipeline.build_silver(lake, settings.catalog, DAYS)

    assert modes(merged) == {str(D0): ReadMode.APPENDED, str(D1): ReadMode.UNCHANGED}  # D1 got nothing appended
    assert merged.extra["bronze_rows_read"] == 5  # only the late rows, not the day
    assert merged.extra["days_rewritten"] == 1
    assert merged.rows_by_day == {str(D0): built.rows_by_day[str(D0)] + 2, str(D1): built.rows_by_day[str(D1)]}
    incremental_result = silver_rows(lake, settings, D0)
    refunded = {r[0] for r in incremental_result if r[7] == "REFUNDED" and r[11] == "late-batch"}
    assert len(refunded) == 3

    pipeline.build_silver(lake, settings.catalog, [D0], full_refresh=True)
    assert silver_rows(lake, settings, D0) == incremental_result


@pytest.mark.slow
def test_a_reloaded_day_is_read_whole_and_other_days_are_not(lake, settings, fetched_raw, api):
    pipeline.load_bronze(lake, settings.catalog, fetched_raw, DAYS)
    built = pipeline.build_silver(lake, settings.catalog, DAYS)
    # A newer batch of D0.
    fetch_day(bnpl_client(api.url, api.config.token, page_size=25), fetched_raw, "transactions", D0)
    reload = pipeline.load_bronze(lake, settings.catalog, fetched_raw, [D0])
    assert reload.commit.operation == "overwrite"

    rebuilt = pipeline.build_silver(lake, settings.catalog, DAYS)

    plan = modes(rebuilt)
    assert plan == {str(D0): ReadMode.WHOLE_DAY, str(D1): ReadMode.UNCHANGED}
    assert f"snapshot {reload.commit.snapshot_id} (overwrite) rewrote rows of the day" in rebuilt.extra["read_plan"]
    assert rebuilt.extra["bronze_rows_read"] == reload.rows_by_day[str(D0)]
    assert rebuilt.rows_by_day == built.rows_by_day


@pytest.mark.slow
def test_after_a_rollback_the_cursor_is_the_restored_commits_and_a_lost_one_reads_whole(lake, settings, fetched_raw):
    pipeline.load_bronze(lake, settings.catalog, fetched_raw, [D0])
    built = pipeline.build_silver(lake, settings.catalog, [D0])
    silver = SILVER_TRANSACTIONS.qualified(settings.catalog)
    rows = silver_rows(lake, settings, D0)

    # Silver rolled back past a newer build: the day's cursor is the one of the commit main went back to.
    pipeline.build_silver(lake, settings.catalog, [D0], full_refresh=True)
    restored = cursor_of(built).downstream_snapshot_id
    lake.sql(f"CALL {settings.catalog}.system.rollback_to_snapshot('{silver.split('.', 1)[1]}', {restored})")
    result = pipeline.build_silver(lake, settings.catalog, [D0])
    assert modes(result) == {str(D0): ReadMode.UNCHANGED} and silver_rows(lake, settings, D0) == rows
    assert f"no snapshot since {cursor_of(built).upstream_snapshot_id} changed the day" in result.extra["read_plan"]

    # The silver commit that stamped the day's cursor expired: the day is read whole.
    pipeline.load_bronze(lake, settings.catalog, fetched_raw, [D1])
    pipeline.build_silver(lake, settings.catalog, [D1])
    lake.sql(
        f"CALL {settings.catalog}.system.expire_snapshots(table => '{silver.split('.', 1)[1]}', "
        "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)"
    )
    lost = pipeline.build_silver(lake, settings.catalog, [D0])
    assert modes(lost) == {str(D0): ReadMode.WHOLE_DAY} and "no kept commit" in lost.extra["read_plan"]
    assert silver_rows(lake, settings, D0) == rows
    bronze = lake.table(BRONZE_TRANSACTIONS.qualified(settings.catalog))
    assert lost.extra["bronze_rows_read"] == bronze.where(F.col("transaction_date") == D0).count()


@pytest.mark.slow
def test_compaction_snapshots_do_not_force_full_reads(lake, settings, fetched_raw):
    pipeline.load_bronze(lake, settings.catalog, fetched_raw, [D0])
    pipeline.load_bronze(lake, settings.catalog, fetched_raw, [D1])
    built = pipeline.build_silver(lake, settings.catalog, DAYS)
    bronze = BRONZE_TRANSACTIONS.qualified(settings.catalog)
    lake.sql(
        f"CALL {settings.catalog}.system.rewrite_data_files(table => '{bronze.split('.', 1)[1]}', "
        "options => map('rewrite-all', 'true'))"
    )
    assert (
        lake.sql(f"SELECT operation FROM {bronze}.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0] == "replace"
    )

    silver = SILVER_TRANSACTIONS.qualified(settings.catalog)  # silver compacted too: its stamps are passed over
    lake.sql(
        f"CALL {settings.catalog}.system.rewrite_data_files(table => '{silver.split('.', 1)[1]}', "
        "options => map('rewrite-all', 'true'))"
    )
    result = pipeline.build_silver(lake, settings.catalog, DAYS)
    assert modes(result) == {str(D0): ReadMode.UNCHANGED, str(D1): ReadMode.UNCHANGED}
    assert result.extra["bronze_snapshot_id"] != built.extra["bronze_snapshot_id"]
    assert dt.date.fromisoformat(str(D0)) == D0


@pytest.mark.slow
def test_a_lake_restored_without_dagsters_database_goes_on_incrementally(lake, settings):
    """The cursor is the table's: a new Dagster instance (its database lost, or another orchestrator) plans the
    same reads as the one that built the day."""
    from dagster import AssetKey, DagsterInstance, materialize

    from etr_assets.definitions import build_definitions

    defs = build_definitions(settings)
    resources = defs.get_repository_def().get_top_level_resources()
    silver = AssetKey(["silver", "bnpl_transactions_clean"])

    def run(selection, day, instance, run_config=None):
        result = materialize(
            list(defs.assets),
            selection=selection,
            resources=resources,
            partition_key=day,
            instance=instance,
            run_config=run_config,
        )
        assert result.success
        return result.asset_materializations_for_node("silver__bnpl_transactions_clean")[0].metadata

    raw_and_bronze = [AssetKey(["raw", "bnpl_transactions"]), AssetKey(["bronze", "bnpl_transactions_raw"])]
    first = run([*raw_and_bronze, silver], "2025-01-01", DagsterInstance.ephemeral())
    assert first["read_mode"].value == "1 full" and first["bronze_rows_read"].value > 0
    restored = DagsterInstance.ephemeral()  # nothing of the first instance's history
    again = run([silver], "2025-01-01", restored)
    assert again["read_mode"].value == "1 unchanged" and again["bronze_rows_read"].value == 0
    assert again["bronze_snapshot_id"].value == first["bronze_snapshot_id"].value
    assert again["dagster/row_count"].value == first["dagster/row_count"].value
    refreshed = run(
        [silver],
        "2025-01-01",
        restored,
        {"ops": {"silver__bnpl_transactions_clean": {"config": {"full_refresh": True}}}},
    )
    assert refreshed["read_mode"].value == "1 full" and "full refresh requested" in refreshed["read_plan"].value
