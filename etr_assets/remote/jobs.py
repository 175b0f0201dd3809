"""Start-job parameters for Glue 5.0 and EMR Serverless, from the profile: the job runs `code/run_layer.py` with the
package zipped beside it; the platform provides Iceberg and dagster-pipes, `catalog_conf` the Glue catalog."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

from etr_assets.lake.session import ICEBERG_EXTENSIONS, catalog_conf
from etr_assets.settings import ENVIRONMENT, Profile, Settings

PIPES_VERSION = "1.13.27"  # dagster-pipes matching dagster==1.13.27
SCRIPT_KEY, PACKAGE_KEY = "code/run_layer.py", "code/etr_assets.zip"


def code_uri(settings: Settings, key: str) -> str:
    return f"s3://{settings.bucket}/{key}"


def job_spark_conf(settings: Settings) -> dict[str, str]:
    """The Spark settings a remote job needs beyond the platform's: Iceberg's SQL extensions and our catalog."""
    return {"spark.sql.extensions": ICEBERG_EXTENSIONS, "spark.sql.session.timeZone": "UTC"} | catalog_conf(settings)


def settings_env(settings: Settings) -> dict[str, str]:
    """The (non-secret) settings the job rebuilds `Settings` from; it never gets a token or a password."""
    fields = ["profile", "catalog", "bucket", "region", "start_date", "max_reject_rate", "max_day_shrink"]
    fields += [f for f in ("s3_endpoint", "glue_endpoint") if getattr(settings, f)]
    fields += ["home"] if settings.profile == Profile.LOCAL else []
    env = {ENVIRONMENT[field][0][0]: str(getattr(settings, field)) for field in fields}
    if settings.profile == Profile.AWS or settings.provided_iceberg:  # Glue 5.0 / EMR ship Iceberg
        env["ETR_ICEBERG_PROVIDED"] = "true"
    return env


def glue_job_run_params(settings: Settings) -> dict:
    """`start_job_run` parameters for PipesGlueClient (it adds the Pipes bootstrap arguments)."""
    return {
        "JobName": settings.glue_job_name,
        "WorkerType": settings.glue_worker_type,
        "NumberOfWorkers": settings.glue_workers,
        "Arguments": {
            "--datalake-formats": "iceberg",
            # Glue takes one `--conf` argument: further pairs are chained inside its value (`a=1 --conf b=2`).
            "--conf": " --conf ".join(f"{key}={value}" for key, value in job_spark_conf(settings).items()),
            "--extra-py-files": code_uri(settings, PACKAGE_KEY),
            "--additional-python-modules": f"dagster-pipes=={PIPES_VERSION}",
            "--enable-glue-datacatalog": "true",
        },
    }


def glue_job_definition(settings: Settings, role_arn: str) -> dict:
    """`create_job` parameters for the one Glue job (docs/production.md: Production on AWS)."""
    return {
        "Name": settings.glue_job_name,
        "Role": role_arn,
        "GlueVersion": "5.0",
        "Command": {"Name": "glueetl", "ScriptLocation": code_uri(settings, SCRIPT_KEY), "PythonVersion": "3"},
        "WorkerType": settings.glue_worker_type,
        "NumberOfWorkers": settings.glue_workers,
        "DefaultArguments": glue_job_run_params(settings)["Arguments"],
    }


def emr_serverless_job_run_params(settings: Settings) -> dict:
    """`start_job_run` parameters for PipesEMRServerlessClient."""
    submit = " ".join(f"--conf {key}={value}" for key, value in job_spark_conf(settings).items())
    return {
        "applicationId": settings.emr_application_id,
        "executionRoleArn": settings.remote_role_arn,
        "jobDriver": {
            "sparkSubmit": {
                "entryPoint": code_uri(settings, SCRIPT_KEY),
                "sparkSubmitParameters": f"--py-files {code_uri(settings, PACKAGE_KEY)} {submit}",
            }
        },
    }


def package_zip() -> bytes:
    """The `etr_assets` package as the zip `--extra-py-files` / `--py-files` ship (sources and the declared sources'
    YAML, no caches)."""
    root = Path(__file__).resolve().parents[1]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".properties", ".yaml"):
                archive.write(path, Path("etr_assets") / path.relative_to(root))
    return buffer.getvalue()


def upload_code(s3_client, settings: Settings) -> list[str]:
    """Put the entry script and the package where the job definitions point (run on each deploy)."""
    for key, body in (
        (SCRIPT_KEY, Path(__file__).with_name("run_layer.py").read_bytes()),
        (PACKAGE_KEY, package_zip()),
    ):
        s3_client.put_object(Bucket=settings.bucket, Key=key, Body=body)
    return [code_uri(settings, SCRIPT_KEY), code_uri(settings, PACKAGE_KEY)]
