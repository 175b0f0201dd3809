"""Where a table layer runs: in the run's own Spark (`ETR_COMPUTE=local`), or as a Glue 5.0 / EMR Serverless job
through Dagster Pipes. Either way `etr_assets.pipeline.layers.report_layer` runs it (in the job:
`etr_assets/remote/run_layer.py`, which sends the report back) and `show` records the report. Every table asset's
body is `yield from layer_runner.run(...)`: the runner alone decides where.

`Compute.SUBPROCESS` runs the job script in a child process on this machine (its own JVM): what the tests use
to exercise the whole protocol without AWS.
"""

import dataclasses
import sys

from dagster import AssetExecutionContext, ConfigurableResource, Failure, MaterializeResult
from pydantic import Field

from etr_assets.defs.common import as_metadata, check_results, log_partition_counts, on_partitions
from etr_assets.defs.resources import LakeResource, RawZoneResource
from etr_assets.lake.wap import branch_name
from etr_assets.pipeline.layers import LayerRequest, Report, report_layer
from etr_assets.remote import jobs
from etr_assets.settings import Compute, Settings

PIPES_PREFIX = "pipes"  # context and messages exchanged with the job, under the lake's bucket (IAM: PipesExchange)


class LayerRunner(ConfigurableResource):
    compute: Compute = Compute.LOCAL
    settings_env: dict[str, str] = Field(default_factory=dict)  # what the job rebuilds its Settings from (no secrets)
    start_job_run_params: dict = Field(default_factory=dict)  # Glue's or EMR Serverless's, from etr_assets.remote.jobs
    bucket: str = ""
    region: str = "ap-southeast-5"
    s3_endpoint: str = ""

    def aws_client(self):
        """The boto3 client of the compute service (glue or emr-serverless; credentials from the environment)."""
        import boto3

        return boto3.client(self.compute.value, region_name=self.region)  # the values are the services' names

    def run(
        self,
        context: AssetExecutionContext,
        lake: LakeResource,
        raw_zone: RawZoneResource | None = None,
        options: dict | None = None,
    ):
        """Build and finish the asset's layer (named by its key) for the run's days, here or in a remote job; yields
        the materialization and the check results. Bronze's raw zone (run) config travels with the request, so a
        remote bronze obeys it too."""
        layer = context.asset_key.to_user_string()
        policy = raw_zone.policy() if raw_zone else {}
        request = LayerRequest(layer, context.partition_keys, branch_name(context.run.run_id), policy | (options or {}))
        if self.compute == Compute.LOCAL:
            spark, conf = lake.session(), lake.spark.spark_config or {}
            zone, root = (raw_zone.zone, raw_zone.root) if raw_zone else (None, "")
            yield from show(context, report_layer(spark, lake.catalog, zone, request, context.run.run_id, conf, root))
            return
        extras = dataclasses.asdict(request) | {"settings": self.settings_env, "platform": self.compute.value}
        context.log.info(f"running {layer} on {self.compute} for {', '.join(request.days)}")
        if self.compute == Compute.SUBPROCESS:
            from dagster import PipesSubprocessClient

            invocation = PipesSubprocessClient().run(
                context=context, extras=extras, command=[sys.executable, "-m", "etr_assets.remote.run_layer"]
            )
        else:
            invocation = self._aws_pipes_client().run(
                context=context, start_job_run_params=dict(self.start_job_run_params), extras=extras
            )
        [report] = invocation.get_custom_messages()  # the job's one message; a job that failed raised above
        yield from show(context, Report.from_json(report))

    def _aws_pipes_client(self):
        """dagster-aws writes each run's messages under a random top-level key; here they go under `pipes/`, inside
        what the IAM policy grants and what the bucket's lifecycle rule expires. (dagster-aws is imported only when a
        run goes remote: it costs a second at import.)"""
        from contextlib import contextmanager

        import boto3
        from dagster_aws.pipes import (
            PipesEMRServerlessClient,
            PipesGlueClient,
            PipesS3ContextInjector,
            PipesS3MessageReader,
        )

        class PrefixedS3MessageReader(PipesS3MessageReader):
            @contextmanager
            def get_params(self):
                with super().get_params() as params:
                    yield {**params, "key_prefix": f"{PIPES_PREFIX}/{params['key_prefix']}"}

        s3 = boto3.client("s3", region_name=self.region, endpoint_url=self.s3_endpoint or None)
        injector = PipesS3ContextInjector(bucket=self.bucket, client=s3, key_prefix=PIPES_PREFIX)
        reader = PrefixedS3MessageReader(bucket=self.bucket, client=s3, interval=2)
        client = self.aws_client()
        if self.compute == Compute.GLUE:
            return PipesGlueClient(context_injector=injector, message_reader=reader, client=client)
        return PipesEMRServerlessClient(client=client, context_injector=injector, message_reader=reader)


def show(context: AssetExecutionContext, report: Report):
    """The report as the run records it: its log lines, the materialization, the check results, then the failure."""
    for level, message in report.logs:
        context.log.log(level, message)
    if report.failure is None:
        log_partition_counts(context, report.figures)
        yield MaterializeResult(metadata=as_metadata(report.figures))
    yield from on_partitions(context, check_results(report.outcomes))
    if report.failure is not None:
        raise Failure(description=report.failure, metadata=as_metadata(report.failure_figures))


def build_layer_runner(settings: Settings) -> LayerRunner:
    params = {Compute.GLUE: jobs.glue_job_run_params, Compute.EMR_SERVERLESS: jobs.emr_serverless_job_run_params}
    return LayerRunner(
        start_job_run_params=params[settings.compute](settings) if settings.compute in params else {},
        compute=settings.compute,
        settings_env=jobs.settings_env(settings),
        bucket=settings.bucket,
        region=settings.region,
        s3_endpoint=settings.s3_endpoint,
    )
