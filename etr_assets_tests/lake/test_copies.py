"""Copies of a customer outside a table's live rows: the erasure removes them, or its proof fails naming them.

A small personal-data table of its own (no pipeline run): an unreferenced Parquet copy in its data folder, a table
someone made from it without a spec, manifest bounds that kept the erased id, and a branch with a snapshot
retention of its own. Each of these made the proof say VERIFIED (or the erasure never complete) before.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import shutil
from pathlib import Path
from urllib.parse import urlparse

import pytest

from etr_assets.lake.copies import bounds_naming, orphan_files
from etr_assets.lake.erasure import ErasureRequest, erase_table, prove_erased
from etr_assets.lake.evolve import ensure_table
from etr_assets.lake.specs import METRICS_COLUMN_PROPERTY, Column, TableSpec

SPEC = TableSpec(
    namespace="silver",
    name="people",
    description="customers and their e-mail, one file per day",
    columns=(Column("customer_id", "bigint"), Column("email", "string", pii=True), Column("day", "date")),
    partition_by=("days(day)",),
    subject_column="customer_id",
)
ERASED, KEPT = 100_001, 100_002


@pytest.fixture
def people(lake, settings):
    ensure_table(lake, settings.catalog, SPEC)
    table = SPEC.qualified(settings.catalog)
    for day, ids in (("2025-01-01", (ERASED, KEPT)), ("2025-01-02", (KEPT,))):
        values = ", ".join(f"({i}, 'person{i}@example.com', DATE'{day}')" for i in ids)
        lake.sql(f"INSERT INTO {table} VALUES {values}")
    return table


def request() -> ErasureRequest:
    return ErasureRequest.create("REQ-COPIES", [ERASED], b"k")


def test_personal_data_columns_leave_no_bounds_in_manifests(lake, settings, people):
    assert SPEC.table_properties[METRICS_COLUMN_PROPERTY.format("email")] == "counts"
    metrics = lake.sql(
        f"SELECT readable_metrics.email.lower_bound, readable_metrics.customer_id.upper_bound, "
        f"readable_metrics.email.value_count FROM {people}.files"
    ).collect()
    assert metrics and all(r[0] is None and r[1] is None and r[2] >= 1 for r in metrics)


@pytest.mark.slow
def test_bounds_kept_by_deleted_manifest_entries_are_rewritten_away(lake, settings):
    # A table written before personal-data columns had metrics `counts`: its manifests carry the ids.
    legacy = dataclasses.replace(
        SPEC,
        name="legacy_people",
        properties={METRICS_COLUMN_PROPERTY.format(c): "truncate(16)" for c in SPEC.personal_data_columns},
    )
    ensure_table(lake, settings.catalog, legacy)
    table = legacy.qualified(settings.catalog)
    lake.sql(f"INSERT INTO {table} VALUES ({ERASED}, 'erased@example.com', DATE'2025-01-01')")
    lake.sql(f"INSERT INTO {table} VALUES ({KEPT}, 'kept@example.com', DATE'2025-01-02')")
    assert bounds_naming(lake, table, "customer_id", [ERASED])

    result = erase_table(lake, settings.catalog, legacy, request())

    assert result.removed == {ERASED: 1}
    assert bounds_naming(lake, table, "customer_id", [ERASED]) == {}  # no DELETED entry kept the id
    assert bounds_naming(lake, table, "customer_id", [KEPT])  # the other customer's own file is untouched
    assert prove_erased(lake, settings.catalog, None, request(), specs=(legacy,)).passed


@pytest.mark.slow
def test_an_unreferenced_copy_in_the_data_folder_is_deleted_or_named_when_recent(lake, settings, people):
    [holding] = [
        Path(urlparse(r[0]).path)
        for r in lake.sql(f"SELECT file_path FROM {people}.files WHERE partition.day_day = DATE'2025-01-01'").collect()
    ]
    old_copy, recent_copy = holding.with_name("copy-old.parquet"), holding.with_name("copy-recent.parquet")
    for copy in (old_copy, recent_copy):
        shutil.copy(holding, copy)
    week_ago = (dt.datetime.now() - dt.timedelta(days=7)).timestamp()
    os.utime(old_copy, (week_ago, week_ago))
    assert {Path(urlparse(o.path).path) for o in orphan_files(lake, people)} == {old_copy, recent_copy}

    result = erase_table(lake, settings.catalog, SPEC, request())

    assert [Path(urlparse(p).path) for p in result.orphans_deleted] == [old_copy] and not old_copy.exists()
    assert [Path(urlparse(p).path) for p in result.orphans_left] == [recent_copy] and recent_copy.exists()
    proof = prove_erased(lake, settings.catalog, None, request(), specs=(SPEC,))
    assert not proof.passed and proof.found_ids == (ERASED,)
    [finding] = proof.findings
    assert f"orphan file file:{recent_copy}" in finding
    assert "no snapshot references it" in finding and "maybe by a write still running" in finding

    recent_copy.unlink()  # the running write failed and its file was cleaned up: the erasure completes
    assert prove_erased(lake, settings.catalog, None, request(), specs=(SPEC,)).passed


@pytest.mark.slow
def test_a_copy_in_a_table_without_a_spec_fails_the_proof_naming_it(lake, settings, people):
    lake.sql(f"CREATE TABLE {settings.catalog}.silver.analyst_copy USING iceberg AS SELECT * FROM {people}")
    erase_table(lake, settings.catalog, SPEC, request())

    proof = prove_erased(lake, settings.catalog, None, request(), specs=(SPEC,))

    assert not proof.passed and proof.found_ids == (ERASED,)
    assert len(proof.findings) == 1 and proof.findings[0].startswith("silver.analyst_copy (a table without a spec")
    lake.sql(f"DROP TABLE {settings.catalog}.silver.analyst_copy PURGE")
    assert prove_erased(lake, settings.catalog, None, request(), specs=(SPEC,)).passed


@pytest.mark.slow
def test_a_branch_with_its_own_snapshot_retention_is_expired_and_its_retention_restored(lake, settings, people):
    lake.sql(f"ALTER TABLE {people} CREATE BRANCH kept RETAIN 3650 DAYS WITH SNAPSHOT RETENTION 5 SNAPSHOTS")
    lake.sql(f"INSERT INTO {people}.branch_kept VALUES ({KEPT}, 'again@example.com', DATE'2025-01-03')")

    result = erase_table(lake, settings.catalog, SPEC, request())

    assert result.branches_erased == {"kept": 1} and result.retention_overridden
    assert "kept 5 snapshot(s)" in result.retention_overridden[0]
    proof = prove_erased(lake, settings.catalog, None, request(), specs=(SPEC,))
    assert proof.passed, proof.findings
    [ref] = lake.sql(
        f"SELECT min_snapshots_to_keep, max_reference_age_in_ms FROM {people}.refs WHERE name = 'kept'"
    ).collect()
    assert (ref[0], ref[1]) == (5, 3650 * 86_400_000)  # the branch's own retention is back
    kept = lake.read.format("iceberg").option("branch", "kept").load(people)
    assert {r[0] for r in kept.select("customer_id").collect()} == {KEPT}
