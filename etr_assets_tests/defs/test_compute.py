"""A layer's report: the same whether the layer ran in process or in the remote job; a JVM out of memory fails
the run with one line naming the setting."""

import dataclasses
import datetime as dt
import json
import logging
import re
import shutil
import uuid

import pytest
from dagster import DagsterInstance, materialize

from etr_assets.definitions import build_definitions
from etr_assets.defs.resources import LayerRunner
from etr_assets.lake.bookkeeping import DATA_QUALITY_METRICS
from etr_assets.lake.wap import branch_name
from etr_assets.pipeline import layers
from etr_assets.remote import jobs
from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, SILVER_TRANSACTIONS


def test_a_layer_out_of_heap_fails_with_one_line_naming_the_setting(spark, monkeypatch):
    jvm = spark.sparkContext._jvm

    def out_of_heap(*args, **kwargs):  # a real JVM error, thrown before anything is allocated
        jvm.java.lang.reflect.Array.newInstance(jvm.java.lang.Byte.TYPE, 2**31 - 1)

    monkeypatch.setattr(layers, "run_layer", out_of_heap)
    request = layers.LAYERS["bronze/bnpl_transactions_raw"].request(["2025-01-01", "2025-01-02"])

    failed = layers.report_layer(spark, "etr", None, request, "r1", {"spark.driver.memory": "1g"}, "/lake/raw")

    assert not failed.figures and not failed.outcomes
    assert failed.failure == (
        "the Spark driver ran out of memory (java.lang.OutOfMemoryError: Requested array size exceeds VM limit) "
        "while building bronze.bnpl_transactions_raw for 2025-01-01..2025-01-02: raise ETR_SPARK_DRIVER_MEMORY "
        "(now 1g)"
    )


def test_other_layer_failures_pass_through_unchanged(spark, monkeypatch):
    def bad_input(*args, **kwargs):
        raise ValueError("raw batch x: 3 of 4 records refused")

    monkeypatch.setattr(layers, "run_layer", bad_input)
    request = layers.LAYERS["bronze/bnpl_transactions_raw"].request(["2025-01-01"])

    with pytest.raises(ValueError, match="3 of 4 records refused"):
        layers.report_layer(spark, "etr", None, request, "r1", {}, "/lake/raw")


# --- the same days run in process and in the remote job ------------------------------------------------------------
DAYS = {
    "2025-02-01": [
        {"transaction_id": 1, "amount": "250000.00"},  # over silver's limit: held back (a failed WARN check)
        {"transaction_id": 2, "amount": "10.00", "channel": "app"},  # a field the spec lacks: a warning
        {"transaction_id": 3, "amount": "ten"},  # malformed: quarantined by bronze (a warning)
        {"transaction_id": 4, "amount": "12.00"},
    ],
    "2025-02-02": [{"transaction_id": 2, "amount": "12.00"}],  # id 2 again: silver's audit fails
}
LAYERS = ["bronze/bnpl_transactions_raw", "silver/bnpl_transactions_clean"]


def write_raw_days(settings) -> None:
    from etr_assets.sources.raw_zone import local_raw_zone

    raw = local_raw_zone(settings.raw_root)
    for day, records in DAYS.items():
        base = {"customer_id": 2, "merchant_id": 3, "currency": "MYR", "instalments": 3, "payment_method": "CARD"}
        base |= {"status": "APPROVED", "transaction_date": day, "created_at": f"{day}T10:00:00Z"}
        lines = "".join(json.dumps(base | {"updated_at": f"{day}T10:00:00Z"} | r) + "\n" for r in records)
        batch = raw.start_batch("bnpl", "transactions", dt.date.fromisoformat(day))
        raw.storage.write_bytes(f"{batch.key}/part-00001.jsonl", lines.encode())
        raw.seal(batch, ["part-00001.jsonl"], len(records))


def reported(settings, runner, lake) -> dict:
    """Everything the runs of DAYS reported, in a form two lakes can be compared in: the lake's catalog, home,
    snapshot ids and the runs' audit branches (named after the run id) replaced by placeholders."""
    defs = build_definitions(settings)
    resources = defs.get_repository_def().get_top_level_resources() | {"layer_runner": runner}
    instance = DagsterInstance.ephemeral()
    days = {}
    for day in DAYS:
        result = materialize(
            list(defs.assets),
            selection=LAYERS,
            resources=resources,
            partition_key=day,
            instance=instance,
            raise_on_error=False,
        )
        logs = instance.all_logs(result.run_id)
        failures = [e.step_failure_data.user_failure_data for e in result.all_events if e.is_step_failure]
        days[day] = {
            "materializations": {
                e.asset_key.to_user_string(): {k: v.value for k, v in e.materialization.metadata.items()}
                for e in result.get_asset_materialization_events()
            },
            "checks": sorted(
                (
                    c.asset_key.to_user_string(),
                    c.check_name,
                    c.passed,
                    c.severity.value,
                    c.description,
                    {k: v.value for k, v in c.metadata.items()},
                )
                for c in result.get_asset_check_evaluations()
            ),
            "warnings": [e.user_message for e in logs if e.level == logging.WARNING and e.dagster_event is None],
            "summaries": [e.user_message for e in logs if " rows written, " in e.user_message],
            "failures": [(f.description, {k: v.value for k, v in f.metadata.items()}) for f in failures if f],
            "logs": [e.user_message for e in logs],
            "branch": branch_name(result.run_id),
        }
    table = DATA_QUALITY_METRICS.qualified(settings.catalog)
    metrics = lake.sql(f"SELECT table_name, metric, partition_key, value, passed FROM {table}").collect()
    text = json.dumps({"days": days, "metrics": sorted(tuple(r) for r in metrics)}, default=str)
    snapshots = {}  # each commit's random id, by its table and place in the table's history
    for spec in (BRONZE_TRANSACTIONS, SILVER_TRANSACTIONS):
        query = f"SELECT snapshot_id FROM {spec.qualified(settings.catalog)}.snapshots ORDER BY committed_at"
        snapshots |= {str(r[0]): f"<{spec.name} snapshot {i}>" for i, r in enumerate(lake.sql(query).collect())}
    text = re.sub(r"\b\d{6,}\b", lambda m: snapshots.get(m.group(), m.group()), text)
    for day in days.values():
        text = text.replace(day["branch"], "audit_<run>")
    return json.loads(text.replace(str(settings.home), "<home>").replace(settings.catalog, "<catalog>"))


@pytest.mark.slow
def test_a_day_run_in_the_remote_job_reports_what_it_reports_in_process(settings, lake, spark, tmp_path):
    """Two lakes with the same raw batches: one builds bronze and silver in process, the other in the remote job
    script (a child process, through Pipes). A good day with warnings, then a day whose audit fails."""
    from etr_assets.lake.session import attach_catalog

    here = dataclasses.replace(settings, max_reject_rate=0.5)  # bronze keeps a day with 1 record in 4 refused
    there = dataclasses.replace(here, home=tmp_path / "remote", catalog=f"r{uuid.uuid4().hex[:12]}")
    write_raw_days(here)
    shutil.copytree(here.raw_root, there.raw_root)  # the same batches, ids included
    local = reported(here, LayerRunner(), lake)
    remote_runner = LayerRunner(compute="subprocess", settings_env=jobs.settings_env(there))
    remote = reported(there, remote_runner, attach_catalog(spark, there))

    good, failed = DAYS
    assert "building silver/bnpl_transactions_clean for 2025-02-01 on local/<catalog>" in remote["days"][good]["logs"]
    # Every figure of every materialization but the table's bytes: its files hold the time of the write
    # (`_ingested_at`, `_processed_at`), which compresses differently from run to run.
    for day in DAYS:
        for run in (local, remote):
            for metadata in run["days"][day]["materializations"].values():
                del metadata["table_bytes"]
    for day in DAYS:
        mine, theirs = local["days"][day], remote["days"][day]
        assert set(theirs["materializations"]) == set(mine["materializations"])
        for asset, metadata in mine["materializations"].items():  # field by field: a failure names the fields
            other = theirs["materializations"][asset]
            assert {k: (v, other.get(k)) for k, v in metadata.items() if other.get(k) != v} == {}
            assert set(other) == set(metadata)
        assert theirs["checks"] == mine["checks"]
        assert theirs["warnings"] == mine["warnings"]
        assert theirs["failures"] == mine["failures"]
        assert theirs["summaries"] == mine["summaries"]
    assert remote["metrics"] == local["metrics"]

    # What was compared is there to compare: warnings of both kinds, a failed WARN check, a failed audit with
    # its branch and the way to inspect it, and the failed figure among the metric rows.
    warnings = " ".join(local["days"][good]["warnings"])
    assert "fields the spec does not declare (channel)" in warnings and "1 record(s) quarantined" in warnings
    assert set(local["days"][good]["materializations"]) == set(LAYERS)
    assert ["silver/bnpl_transactions_clean", "records_quarantined", False] in [
        c[:3] for c in local["days"][good]["checks"]
    ]
    [(description, metadata)] = local["days"][failed]["failures"]
    assert "main is unchanged" in description and metadata["audit_branch"] == "audit_<run>"
    assert "VERSION AS OF 'audit_<run>'" in metadata["inspect"]
    assert ["silver.bnpl_transactions_clean", "transaction_id_is_unique", failed, 1.0, False] in local["metrics"]
