"""A full disk, end to end: `etr_pipeline` in process on a lake whose warehouse and raw zone are small real disks
(tmpfs), filled at the two moments that matter most: the raw fetch writing pages, and the bronze writes (the
transactions' included). Each failed run says in one line which disk filled and what to do, leaves every table as
it was and the day's raw batches pending; once space is freed, running the day again gives exactly the tables of a
lake that never ran out of space (load times, batch ids and file names aside)."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from dagster import DagsterInstance

from etr_assets.definitions import build_definitions
from etr_assets.defs.run_summary import summarize_run
from etr_assets.settings import Settings
from etr_assets.sources.raw_zone import local_raw_zone
from etr_assets.tables import ALL_SPECS
from etr_assets.tables.declared import source
from etr_assets.tables.feeds import TRANSACTIONS
from etr_assets_tests.small_disk import small_disk

pytestmark = pytest.mark.slow  # six runs of the whole pipeline (two cut short): CI and ./dev test only
DAY1, DAY2 = "2025-01-01", "2025-01-02"
# What differs between two loads of the same records: when and from which batch and file they were loaded, by which run.
LOAD_COLUMNS = {
    "_ingested_at",
    "_processed_at",
    "_computed_at",
    "quarantined_at",
    "measured_at",
    "executed_at",
    "_batch_id",
    "_source_file",
    "source_file",
    "run_id",
}
STACK_MARKERS = ("\tat ", "Traceback", "py4j", "Py4J", "org.apache.")
SOURCE = TRANSACTIONS.source  # the BNPL source, as declared
ENDPOINTS = source(SOURCE).declaration.names  # its resources


def run_day(defs, instance, day):
    return defs.get_job_def("etr_pipeline").execute_in_process(
        partition_key=day, instance=instance, raise_on_error=False
    )


def tables(spark, catalog) -> dict[str, list[tuple]]:
    """Every table of the lake, each row without its load columns, sorted: what two equal lakes share."""
    contents = {}
    for spec in ALL_SPECS:
        qualified = spec.qualified(catalog)
        if spark.catalog.tableExists(qualified):
            columns = [c for c in spark.table(qualified).columns if c not in LOAD_COLUMNS]
            rows = spark.table(qualified).select(*columns).collect()
            contents[spec.identifier] = sorted((tuple(r) for r in rows), key=repr)
    return contents


def failures(result) -> dict[str, str]:
    """step -> what the user reads of its failure: the one-line reason, and the error Dagster shows under it."""
    found = {}
    for event in result.all_events:
        if event.event_type_value == "STEP_FAILURE":
            data = event.event_specific_data
            assert data.error.cause is None, "no chained Java error under the one line"
            assert not any(m in data.error.message for m in STACK_MARKERS), data.error.message
            found[event.step_key] = data.user_failure_data.description
    return found


def batches_of(raw, day) -> dict[str, list]:
    return {endpoint: raw.batches(SOURCE, endpoint, dt.date.fromisoformat(day)) for endpoint in ENDPOINTS}


def test_a_full_disk_fails_the_run_in_one_line_keeps_tables_and_batches_and_the_rerun_is_exact(
    lake, settings, tmp_path
):
    spark = lake
    with DagsterInstance.ephemeral() as instance:
        clean = build_definitions(settings)
        for day in (DAY1, DAY2):
            assert run_day(clean, instance, day).success
        reference = tables(spark, settings.catalog)

        full = Settings(home=tmp_path / "full", catalog=f"t{uuid.uuid4().hex[:12]}", api_transactions_per_day=40)
        warehouse, raw_root = full.home / "warehouse", full.home / "raw"
        with small_disk(warehouse) as warehouse_disk, small_disk(raw_root) as raw_disk:
            defs, raw = build_definitions(full), local_raw_zone(full.raw_root)
            assert run_day(defs, instance, DAY1).success
            before = tables(spark, full.catalog)

            # The raw fetch: room for a batch's .pending marker, none for its pages.
            raw_disk.fill(leave=8 * 1024)
            fetch = run_day(defs, instance, DAY2)
            assert not fetch.success
            reasons = failures(fetch)
            assert set(reasons) == {f"raw__{SOURCE}_{endpoint}" for endpoint in ENDPOINTS}
            for endpoint in ENDPOINTS:
                line = reasons[f"raw__{SOURCE}_{endpoint}"]
                assert line.startswith("a disk ran out of space (OSError: [Errno 28] No space left on device) while ")
                assert f"fetching {endpoint} of {DAY2} into the raw zone: the disk of {raw_root} (the raw zone)" in line
                assert "free of 64.0 MiB: free space there" in line and "\n" not in line
            summary = summarize_run(instance, fetch.run_id).lines()
            assert summary[3].startswith(f"  failed: raw__{SOURCE}_") and str(raw_root) in summary[3]
            assert len(summary) == 4 and not any(m in "\n".join(summary) for m in STACK_MARKERS)
            assert tables(spark, full.catalog) == before  # every table readable, and as it was
            assert not any(raw.is_complete(b) for found in batches_of(raw, DAY2).values() for b in found)
            raw_disk.free_space()

            # The bronze writes: the pages are fetched and sealed; the warehouse has no room for any file.
            warehouse_disk.fill()
            load = run_day(defs, instance, DAY2)
            assert not load.success
            reasons = failures(load)
            assert {f"bronze__{SOURCE}_{endpoint}_raw" for endpoint in ENDPOINTS} <= set(reasons)
            line = reasons[f"bronze__{SOURCE}_transactions_raw"]
            assert line.startswith(
                "a disk ran out of space (java.io.IOException: No space left on device) while building "
                f"bronze.{SOURCE}_transactions_raw for {DAY2}: the disk of {warehouse} (the Iceberg warehouse) has "
            )
            assert line.endswith("free space there, or point ETR_HOME at a larger disk, then run it again")
            summary = summarize_run(instance, load.run_id).lines()
            assert summary[3].startswith("  failed: bronze__") and f"the disk of {warehouse}" in summary[3]
            assert not any(m in "\n".join(summary) for m in STACK_MARKERS)
            assert tables(spark, full.catalog) == before
            for endpoint, found in batches_of(raw, DAY2).items():
                sealed = [b for b in found if raw.manifest(b) is not None]
                assert sealed and not any(raw.is_complete(b) for b in found), endpoint  # downloaded, still pending
            warehouse_disk.free_space()

            # Space freed: the day again gives the lake that never ran out of space, and closes every batch.
            assert run_day(defs, instance, DAY2).success
            after = tables(spark, full.catalog)
            for day in (DAY1, DAY2):
                assert all(raw.is_complete(b) for found in batches_of(raw, day).values() for b in found)
    assert set(after) == set(reference)
    for table, rows in reference.items():
        assert after[table] == rows, table
