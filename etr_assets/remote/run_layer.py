"""Entry script of a remote job (Glue 5.0, EMR Serverless): build one layer, report back through Dagster Pipes.

The Dagster side (`etr_assets.defs.compute.LayerRunner`) puts a `LayerRequest` and the lake's settings in the Pipes
context's extras; this script runs the layer with `etr_assets.pipeline.layers.run_layer`, exactly what the runner
runs in process, and reports the materialization's figures and every check outcome. A blocking check that fails
reports its outcomes, then fails the job with the audit branch's name (main is untouched), as in process.

Glue passes the Pipes bootstrap parameters as job arguments (`--dagster-pipes-context ...`); a local subprocess
gets them as environment variables. The context and messages travel through S3 when the launcher uses S3
(`pipes/` prefix of the lake's bucket), through files otherwise.
"""

from __future__ import annotations

import os
import sys

from etr_assets.lake.figures import Tagged, check_figures
from etr_assets.pipeline.layers import LayerRequest, run_layer
from etr_assets.settings import Settings
from etr_assets.sources.s3_storage import open_raw_zone

PLATFORM_EXTRA = "platform"  # where the job runs: on these, the platform configures the Spark session
MANAGED_PLATFORMS = ("glue", "emr-serverless")


def pipes_metadata(figures: dict[str, object]) -> dict[str, object]:
    return {
        key: {"raw_value": value.value, "type": value.kind} if isinstance(value, Tagged) else value
        for key, value in figures.items()
    }


def open_pipes():
    from dagster_pipes import (
        PipesCliArgsParamsLoader,
        PipesDefaultContextLoader,
        PipesDefaultMessageWriter,
        PipesEnvVarParamsLoader,
        PipesS3ContextLoader,
        PipesS3MessageWriter,
        open_dagster_pipes,
    )

    cli = any(arg.startswith("--dagster-pipes") for arg in sys.argv)
    params = PipesCliArgsParamsLoader() if cli else PipesEnvVarParamsLoader()
    on_s3 = "bucket" in params.load_context_params()
    if on_s3:
        import boto3

        s3 = boto3.client("s3")
        return open_dagster_pipes(
            params_loader=params, context_loader=PipesS3ContextLoader(s3), message_writer=PipesS3MessageWriter(s3)
        )
    return open_dagster_pipes(
        params_loader=params, context_loader=PipesDefaultContextLoader(), message_writer=PipesDefaultMessageWriter()
    )


def session(settings: Settings, platform: str):
    from etr_assets.lake.session import attach_catalog, get_spark

    if platform not in MANAGED_PLATFORMS:  # a child process on this machine: our own session, as in process
        return get_spark(settings)
    from pyspark.sql import SparkSession

    # Glue/EMR made the session from the job's --conf (Iceberg provided, Glue catalog): use it as it is.
    return attach_catalog(SparkSession.builder.getOrCreate(), settings)


def run(pipes) -> None:
    from etr_assets.lake.wap import AuditFailed

    extras = dict(pipes.extras)
    request = LayerRequest.from_extras(extras)
    settings = Settings.from_env({**os.environ, **(extras.get("settings") or {}), "ETR_COMPUTE": "local"})
    spark = session(settings, extras.get(PLATFORM_EXTRA, "local"))
    pipes.log.info(f"building {request.layer} for {', '.join(request.days)} on {settings.profile}/{settings.catalog}")

    def raw():
        scheme = "s3a" if settings.profile == "s3" else "s3"
        return open_raw_zone(
            settings.raw_root, s3_endpoint=settings.s3_endpoint, region=settings.region, uri_scheme=scheme
        )

    try:
        finished = run_layer(spark, settings.catalog, raw, request, pipes.run_id)
    except AuditFailed as failed:
        report_checks(pipes, failed.results)
        raise
    report_checks(pipes, finished.outcomes)
    pipes.report_asset_materialization(metadata=pipes_metadata(finished.figures))


def report_checks(pipes, outcomes) -> None:
    for o in outcomes:
        pipes.report_asset_check(
            o.name, o.passed, severity=o.severity.upper(), metadata=pipes_metadata(check_figures(o))
        )


def main() -> None:
    with open_pipes() as pipes:
        run(pipes)


if __name__ == "__main__":
    main()
