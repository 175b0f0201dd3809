"""Dagster Pipes end to end: silver and gold built by the remote job script in a child process (its own JVM),
standing in for Glue/EMR, with the materialization figures and blocking-check results reported back to Dagster."""

from __future__ import annotations

import importlib.metadata

import pytest
from dagster import AssetKey, DagsterInstance, materialize

from etr_assets.definitions import build_definitions
from etr_assets.defs.resources import LayerRunner
from etr_assets.pipeline.contract import BronzeRequest, RebuildRequest
from etr_assets.pipeline.layers import LAYERS, request_from_extras
from etr_assets.remote import jobs
from etr_assets.tables.transactions import GOLD_DAILY_SUMMARY, SILVER_TRANSACTIONS

DAY = "2025-01-02"


def run(defs, selection, runner, instance):
    resources = defs.get_repository_def().get_top_level_resources() | {"layer_runner": runner}
    result = materialize(
        list(defs.assets),
        selection=selection,
        resources=resources,
        partition_key=DAY,
        instance=instance,
        raise_on_error=False,
    )
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    return result


@pytest.mark.slow
def test_silver_and_gold_run_in_the_job_script_and_report_back(settings, lake):
    defs = build_definitions(settings)
    instance = DagsterInstance.ephemeral()
    run(defs, ["raw/bnpl_transactions", "bronze/bnpl_transactions_raw"], LayerRunner(), instance)

    remote = LayerRunner(compute="subprocess", settings_env=jobs.settings_env(settings))
    result = run(defs, ["silver/bnpl_transactions_clean", "gold/bnpl_daily_summary"], remote, instance)

    reported = {
        e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()
    }
    assert set(reported) == {"silver/bnpl_transactions_clean", "gold/bnpl_daily_summary"}
    for spec in (SILVER_TRANSACTIONS, GOLD_DAILY_SUMMARY):
        metadata = reported[f"{spec.namespace}/{spec.name}"]
        table = spec.qualified(settings.catalog)
        current = lake.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]
        assert metadata["snapshot_id"].value == str(current)  # the child's commit, reported through Pipes
        rows = lake.sql(f"SELECT count(*) FROM {table}").first()[0]
        assert metadata["dagster/row_count"].value == rows == metadata["table_rows"].value > 0
        assert metadata["rows_by_day"].value == {DAY: rows}
        assert metadata["table_uri"].value.endswith(f"{spec.namespace}/{spec.name}")
    silver = reported["silver/bnpl_transactions_clean"]
    assert silver["dagster/partition_row_count"].value == settings.api_transactions_per_day

    checks = {(c.asset_key, c.check_name): c.passed for c in result.get_asset_check_evaluations()}
    expected = {c.name for c in SILVER_TRANSACTIONS.expectations} | {"transaction_id_is_unique"}
    silver_checks = {name for key, name in checks if key == AssetKey(["silver", "bnpl_transactions_clean"])}
    silver = AssetKey(["silver", "bnpl_transactions_clean"])
    # Every check the asset declares came back; the blocking ones passed (others, e.g. customers being known,
    # are warnings that need the customer tables this test does not build).
    assert expected <= silver_checks and all(checks[(silver, name)] for name in expected), checks
    assert silver_checks == {s.name for s in defs.get_assets_def(silver).check_specs}
    # The audit branch was published and dropped by the child, as in process.
    refs = lake.sql(f"SELECT name FROM {SILVER_TRANSACTIONS.qualified(settings.catalog)}.refs").collect()
    assert [r[0] for r in refs] == ["main"]


def test_glue_job_parameters_carry_iceberg_the_glue_catalog_and_the_package(tmp_path):
    from etr_assets.settings import Settings

    settings = Settings(
        profile="aws",
        bucket="etr-lake",
        home=tmp_path,
        compute="glue",
        glue_job_name="etr-assets",
        glue_worker_type="G.2X",
        glue_workers=4,
    )
    params = jobs.glue_job_run_params(settings)
    assert params["JobName"] == "etr-assets" and params["WorkerType"] == "G.2X" and params["NumberOfWorkers"] == 4
    args = params["Arguments"]
    assert args["--datalake-formats"] == "iceberg"
    assert args["--extra-py-files"] == "s3://etr-lake/code/etr_assets.zip"
    # The job installs the dagster-pipes this orchestrator's dagster was released with (and runs here), so both
    # ends speak one Pipes protocol; a dagster upgrade without moving the pin fails here.
    required = [r for r in importlib.metadata.requires("dagster") if r.startswith("dagster-pipes")]
    installed = f"dagster-pipes=={importlib.metadata.version('dagster-pipes')}"
    assert args["--additional-python-modules"] == installed and required == [installed]
    # One --conf argument, the others chained in its value (Glue's only way to pass several).
    conf = dict(pair.split("=", 1) for pair in args["--conf"].split(" --conf "))
    assert conf["spark.sql.catalog.etr.catalog-impl"] == "org.apache.iceberg.aws.glue.GlueCatalog"
    assert conf["spark.sql.catalog.etr.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert conf["spark.sql.catalog.etr.warehouse"] == "s3://etr-lake/warehouse"
    assert conf["spark.sql.catalog.etr.client.region"] == "ap-southeast-5"
    assert conf["spark.sql.extensions"].endswith("IcebergSparkSessionExtensions")
    assert not any("jars" in key for key in conf)  # Glue ships Iceberg: no jar of ours
    definition = jobs.glue_job_definition(settings, "arn:aws:iam::123456789012:role/etr")
    assert (
        definition["GlueVersion"] == "5.0"
        and definition["Command"]["ScriptLocation"] == "s3://etr-lake/code/run_layer.py"
    )
    # What the job is told about the lake: no secret ever.
    env = jobs.settings_env(settings)
    assert env["ETR_PROFILE"] == "aws" and env["ETR_ICEBERG_PROVIDED"] == "true"
    assert not any(word in key for key in env for word in ("TOKEN", "PASSWORD", "SECRET"))


def test_emr_serverless_parameters_and_the_shipped_package(tmp_path):
    import io
    import zipfile

    from etr_assets.settings import Settings

    settings = Settings(
        profile="aws",
        bucket="etr-lake",
        home=tmp_path,
        compute="emr-serverless",
        emr_application_id="00abc",
        remote_role_arn="arn:aws:iam::1:role/etr",
    )
    params = jobs.emr_serverless_job_run_params(settings)
    assert params["applicationId"] == "00abc" and params["executionRoleArn"] == "arn:aws:iam::1:role/etr"
    submit = params["jobDriver"]["sparkSubmit"]
    assert submit["entryPoint"] == "s3://etr-lake/code/run_layer.py"
    assert "--py-files s3://etr-lake/code/etr_assets.zip" in submit["sparkSubmitParameters"]
    assert (
        "--conf spark.sql.catalog.etr.catalog-impl=org.apache.iceberg.aws.glue.GlueCatalog"
        in submit["sparkSubmitParameters"]
    )
    names = zipfile.ZipFile(io.BytesIO(jobs.package_zip())).namelist()
    assert "etr_assets/remote/run_layer.py" in names and "etr_assets/pipeline/transactions.py" in names
    assert "etr_assets/lake/log4j2.properties" in names and not any("__pycache__" in n for n in names)
    assert "etr_assets/defs/sources/bnpl/defs.yaml" in names  # the job finds every shipped source's layers


def test_the_shipped_package_loads_its_declared_sources_from_inside_the_zip(tmp_path):
    """What `--py-files` / `--extra-py-files` gives the job: the package zipped, its declarations read from the zip."""
    import os
    import subprocess
    import sys

    package = tmp_path / "etr_assets.zip"
    package.write_bytes(jobs.package_zip())
    probe = "import etr_assets, etr_assets.pipeline.layers as l; print(etr_assets.__file__); print(sorted(l.LAYERS))"
    env = {**os.environ, "PYTHONPATH": str(package), "ETR_SOURCE_DIRS": ""}
    out = subprocess.run([sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    where, layers = out.stdout.splitlines()
    assert where.startswith(str(package)) and "bronze/bnpl_transactions_raw" in layers and "landing/customers" in layers


def test_a_request_travels_typed_and_one_without_a_known_layer_is_refused_by_name():
    silver = LAYERS["silver/bnpl_transactions_clean"].request([DAY], "audit_x", full_refresh=True)
    extras = silver.to_extras() | {"settings": {"ETR_PROFILE": "s3"}, "platform": "glue"}
    assert request_from_extras(extras) == silver and isinstance(silver, RebuildRequest)
    bronze = LAYERS["bronze/bnpl_transactions_raw"].request([DAY], max_reject_rate=0.2)
    assert request_from_extras(bronze.to_extras()) == bronze and isinstance(bronze, BronzeRequest)
    with pytest.raises(TypeError, match="full_refresh"):  # gold takes nothing beyond its days
        LAYERS["gold/bnpl_daily_summary"].request([DAY], full_refresh=True)
    with pytest.raises(ValueError, match="unknown layer 'silver/nope'"):
        request_from_extras({"layer": "silver/nope", "days": [DAY]})
    with pytest.raises(ValueError, match="lack days"):
        request_from_extras({"layer": "gold/bnpl_daily_summary"})


@pytest.mark.parametrize(
    "env, message",
    [
        ({"ETR_COMPUTE": "lambda"}, "ETR_COMPUTE='lambda' is not one of local, glue, emr-serverless"),
        ({"ETR_COMPUTE": "glue", "ETR_PROFILE": "aws", "ETR_S3_BUCKET": "b"}, "needs ETR_GLUE_JOB_NAME"),
        ({"ETR_COMPUTE": "glue"}, "needs a shared lake"),
        ({"ETR_COMPUTE": "emr-serverless", "ETR_PROFILE": "aws", "ETR_S3_BUCKET": "b"}, "ETR_EMR_APPLICATION_ID"),
    ],
)
def test_compute_settings_name_what_is_missing(env, message):
    from etr_assets.errors import SettingsError
    from etr_assets.settings import Settings

    with pytest.raises(SettingsError, match=message):
        Settings.from_env(env)
