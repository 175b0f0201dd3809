"""Entry script of a remote job (Glue 5.0, EMR Serverless): run the Pipes extras' `LayerRequest`, send its `Report`
as one message. A failure the report describes ends the job normally: Pipes drops every message of a failed job."""

from __future__ import annotations

import dataclasses
import os
import sys
from functools import partial

from etr_assets.pipeline.layers import report_layer, request_from_extras
from etr_assets.settings import Profile, Settings
from etr_assets.sources.s3_storage import open_raw_zone

MANAGED_PLATFORMS = ("glue", "emr-serverless")  # the extra "platform": on these, the platform configures Spark


def open_pipes():
    from dagster_pipes import (
        PipesCliArgsParamsLoader,
        PipesEnvVarParamsLoader,
        PipesS3ContextLoader,
        PipesS3MessageWriter,
        open_dagster_pipes,
    )

    cli = any(arg.startswith("--dagster-pipes") for arg in sys.argv)
    params = PipesCliArgsParamsLoader() if cli else PipesEnvVarParamsLoader()
    if "bucket" not in params.load_context_params():
        return open_dagster_pipes(params_loader=params)  # files: the default context loader and message writer
    import boto3

    s3 = boto3.client("s3")
    return open_dagster_pipes(
        params_loader=params, context_loader=PipesS3ContextLoader(s3), message_writer=PipesS3MessageWriter(s3)
    )


def session(settings: Settings, platform: str):
    from etr_assets.lake.session import attach_catalog, get_spark

    if platform not in MANAGED_PLATFORMS:  # a child process on this machine: our own session, as in process
        return get_spark(settings)
    from pyspark.sql import SparkSession

    # Glue/EMR made the session from the job's --conf (Iceberg provided, Glue catalog): use it as it is.
    return attach_catalog(SparkSession.builder.getOrCreate(), settings)


def main() -> None:
    with open_pipes() as pipes:
        extras = dict(pipes.extras)
        request = request_from_extras(extras)
        settings = Settings.from_env({**os.environ, **(extras.get("settings") or {}), "ETR_COMPUTE": "local"})
        spark = session(settings, extras.get("platform", "local"))
        pipes.log.info(
            f"building {request.layer} for {', '.join(request.days)} on {settings.profile}/{settings.catalog}"
        )
        s3 = {"s3_endpoint": settings.s3_endpoint, "region": settings.region}
        scheme = "s3a" if settings.profile == Profile.S3 else "s3"
        raw = partial(open_raw_zone, settings.raw_root, **s3, uri_scheme=scheme)
        conf = dict(spark.sparkContext.getConf().getAll())
        report = report_layer(spark, settings.catalog, raw, request, pipes.run_id, conf, settings.raw_root)
        pipes.report_custom_message(dataclasses.asdict(report))


if __name__ == "__main__":
    main()
