"""The Glue path of Dagster Pipes end to end: PipesGlueClient, its S3 context injector and message reader on moto,
and a stand-in for the Glue service that runs each job run on this machine the way Glue 5.0 would: `spark-submit`
of the job script fetched from the job's S3 location, with the run's `--conf`, the Iceberg runtime (what
`--datalake-formats iceberg` adds), the package from `--extra-py-files`, and the run's arguments (Pipes' included).
Spark's GlueCatalog cannot run here (docs/stack.md), so the job writes the local Hadoop catalog."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import subprocess
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from dagster import DagsterInstance, materialize

from etr_assets.definitions import build_definitions
from etr_assets.defs.resources import LayerRunner
from etr_assets.lake.session import iceberg_runtime_jar
from etr_assets.remote import jobs
from etr_assets.tables.entities import LANDING_CUSTOMERS
from etr_assets.tables.transactions import GOLD_DAILY_SUMMARY
from etr_assets_tests.aws.conftest import REGION
from etr_assets_tests.infra import create_bucket, s3_client
from etr_assets_tests.spark_cluster import spark_home

DAY = "2025-01-03"
JOB = "etr-assets"


class GlueRunsJobsHere:
    """The boto3 Glue calls PipesGlueClient makes (start_job_run, get_job_run, batch_stop_job_run), served by
    running the job on this machine. Each run's parameters are kept for the test to inspect."""

    def __init__(self, s3, bucket: str, work: Path, env: dict[str, str]):
        self.meta = SimpleNamespace(region_name=REGION)
        self.s3, self.bucket, self.work, self.env = s3, bucket, work, env
        self.runs: dict[str, dict] = {}

    def _fetch(self, uri: str) -> str:
        key = uri.removeprefix(f"s3://{self.bucket}/")
        target = self.work / Path(key).name
        self.s3.download_file(self.bucket, key, str(target))
        return str(target)

    def start_job_run(self, JobName: str, Arguments: dict, WorkerType: str, NumberOfWorkers: int):
        Arguments = dict(Arguments)  # the caller's dict is reused for the next run: never change it
        assert Arguments.pop("--datalake-formats") == "iceberg", "the job needs Glue's Iceberg"
        conf = [pair for pair in Arguments.pop("--conf").split(" --conf ")]
        local = [
            "spark.master=local[1]",
            "spark.driver.host=127.0.0.1",
            "spark.driver.bindAddress=127.0.0.1",
            "spark.ui.enabled=false",
            f"spark.local.dir={self.work}",
            "spark.driver.memory=512m",
            "spark.sql.shuffle.partitions=1",  # one core, a few hundred rows (Glue's 200 suit a cluster)
        ]
        script = self._fetch(jobs.code_uri(SimpleNamespace(bucket=self.bucket), jobs.SCRIPT_KEY))
        package = self._fetch(Arguments.pop("--extra-py-files"))
        Arguments.pop("--additional-python-modules"), Arguments.pop("--enable-glue-datacatalog")
        command = [str(spark_home() / "bin" / "spark-submit"), "--jars", iceberg_runtime_jar(), "--py-files", package]
        for pair in conf + local:
            command += ["--conf", pair]
        command += [script, "--JOB_NAME", JobName]
        for key, value in Arguments.items():
            command += [key, value]
        run_id = f"jr_{uuid.uuid4().hex}"
        log = (self.work / f"{run_id}.log").open("w")
        process = subprocess.Popen(command, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.runs[run_id] = {"process": process, "log": log.name, "worker_type": WorkerType, "workers": NumberOfWorkers}
        return {"JobRunId": run_id}

    def get_job_run(self, JobName: str, RunId: str):
        code = self.runs[RunId]["process"].poll()
        state = "RUNNING" if code is None else "SUCCEEDED" if code == 0 else "FAILED"
        message = Path(self.runs[RunId]["log"]).read_text()[-3000:] if state == "FAILED" else ""
        return {"JobRun": {"Id": RunId, "JobName": JobName, "JobRunState": state, "ErrorMessage": message}}

    def batch_stop_job_run(self, JobName: str, JobRunIds: list[str]):
        for run_id in JobRunIds:
            self.runs[run_id]["process"].kill()

    def stop_all(self) -> None:
        for run in self.runs.values():
            if run["process"].poll() is None:
                run["process"].kill()
                run["process"].wait(timeout=30)


STAND_INS: dict[str, GlueRunsJobsHere] = {}


class GlueHereRunner(LayerRunner):
    """The production runner with its Glue client swapped for the stand-in (Dagster rebuilds resources from config,
    so the stand-in is found by bucket rather than held by the instance)."""

    def aws_client(self):
        return STAND_INS[self.bucket]


@pytest.mark.slow
def test_gold_and_scd2_history_run_as_glue_job_runs_through_pipes(aws_env, moto_endpoint, settings, lake, tmp_path):
    """A transaction layer (gold) and an SCD2 landing table, each one Glue job run of the same layer code the assets
    run in process; what they write equals what the source served."""
    from etr_assets.sources.synthetic_api import ApiConfig, customers_as_of

    bucket = "etr-pipes"
    s3 = s3_client(moto_endpoint, REGION)
    create_bucket(s3, bucket)
    # The deploy step (docs/production.md, "Production on AWS"): the script and the package in the bucket's code/.
    uploaded = jobs.upload_code(s3, SimpleNamespace(bucket=bucket))
    assert uploaded == [f"s3://{bucket}/code/run_layer.py", f"s3://{bucket}/code/etr_assets.zip"]

    defs = build_definitions(settings)
    instance = DagsterInstance.ephemeral()
    resources = defs.get_repository_def().get_top_level_resources()
    upstream = ["raw/bnpl_transactions", "bronze/bnpl_transactions_raw", "silver/bnpl_transactions_clean"]
    upstream += ["raw/bnpl_customers", "bronze/bnpl_customers_raw"]
    assert materialize(
        list(defs.assets), selection=upstream, resources=resources, partition_key=DAY, instance=instance
    ).success

    glue_settings = dataclasses.replace(
        settings, bucket=bucket, glue_job_name=JOB, glue_worker_type="G.1X", glue_workers=2
    )
    # The job's Python has dagster-pipes (what --additional-python-modules installs on Glue): this venv's.
    env = dict(os.environ) | {
        "AWS_ENDPOINT_URL_S3": moto_endpoint,
        "PYTHONWARNINGS": "ignore",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    glue = GlueRunsJobsHere(s3, bucket, tmp_path, env)
    STAND_INS[bucket] = glue
    runner = GlueHereRunner(
        compute="glue",
        settings_env=jobs.settings_env(settings),
        start_job_run_params=jobs.glue_job_run_params(glue_settings),
        bucket=bucket,
        region=REGION,
        s3_endpoint=moto_endpoint,
    )
    try:
        result = materialize(
            list(defs.assets),
            selection=["gold/bnpl_daily_summary", "landing/customers"],
            partition_key=DAY,
            resources=resources | {"layer_runner": runner},
            instance=instance,
            raise_on_error=False,
        )
    finally:
        glue.stop_all()
    logs = "\n".join(Path(run["log"]).read_text()[-3000:] for run in glue.runs.values())
    assert result.success, logs

    assert len(glue.runs) == 2, glue.runs
    assert all(run["worker_type"] == "G.1X" and run["workers"] == 2 for run in glue.runs.values())
    reported = {
        e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()
    }
    metadata = reported["gold/bnpl_daily_summary"]
    table = GOLD_DAILY_SUMMARY.qualified(settings.catalog)
    current = lake.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]
    assert metadata["snapshot_id"].value == str(current)
    total = lake.sql(f"SELECT sum(transactions) FROM {table} WHERE transaction_date = DATE'{DAY}'").first()[0]
    assert total == settings.api_transactions_per_day
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks and all(checks[c.name] for c in GOLD_DAILY_SUMMARY.expectations), checks

    history = reported["landing/customers"]
    landing = LANDING_CUSTOMERS.qualified(settings.catalog)
    served = customers_as_of(
        ApiConfig(seed=settings.api_seed, transactions_per_day=settings.api_transactions_per_day),
        dt.date.fromisoformat(DAY),
    )
    current = lake.sql(f"SELECT count(*) FROM {landing} WHERE _is_current").first()[0]
    assert history["current_rows"].value == current == len(served)
    assert history["history_method"].value == "recompute" and history["versions_inserted"].value == len(served)
    assert all(checks[c.name] for c in LANDING_CUSTOMERS.expectations), checks
    # Context and messages went through the bucket's pipes/ prefix, as the IAM policy allows.
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert any(k.startswith("pipes/") for k in keys), keys
    assert [k for k in keys if not k.startswith(("code/", "pipes/"))] == [], keys
