"""Dagster resources: the lake, the raw zone, the API, and the layer runner, which runs a table layer in the run's
Spark, as a Glue / EMR Serverless job through Pipes, or (tests) in a child process; `show` records its report."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from pydantic import Field, PrivateAttr

from etr_assets.defs.announcements import API_STARTED, SPARK_STARTED, SPARK_STARTING
from etr_assets.defs.common import as_metadata, check_results, on_partitions, record_days
from etr_assets.defs.dagster_private import spark_started
from etr_assets.lake.iam import PIPES_PREFIX  # the IAM policy's PipesExchange prefix
from etr_assets.lake.session import catalog_conf, spark_conf
from etr_assets.lake.wap import branch_name
from etr_assets.pipeline.contract import Report
from etr_assets.pipeline.layers import LAYERS, report_layer
from etr_assets.remote import jobs
from etr_assets.settings import Compute, Profile, Settings
from etr_assets.sources.declaration import FromEnv
from etr_assets.sources.raw_zone import RawZone
from etr_assets.sources.s3_storage import open_raw_zone

if TYPE_CHECKING:
    from etr_assets.sources.http_fetch import SourceClient

LOCAL_API_TOKEN = "etr-local-token"  # the embedded synthetic API's token: not a secret


class LakeResource(dg.ConfigurableResource):
    """The Iceberg lakehouse: a Spark session (started on first use) on the profile's catalog."""

    spark: LazyPySparkResource
    catalog: str
    catalog_conf: dict[str, str]

    def session(self):
        if not spark_started(self.spark):  # the run's log says what the step waits for
            log, began = dg.get_dagster_logger(), time.monotonic()
            log.info(SPARK_STARTING)
            spark = self.spark.spark_session
            log.info(f"{SPARK_STARTED} after {time.monotonic() - began:.0f} s")
        spark = self.spark.spark_session
        # A session made earlier (getOrCreate) may not know this catalog: Spark reads catalog settings lazily.
        for key, value in self.catalog_conf.items():
            spark.conf.set(key, value)
        return spark


class RawZoneResource(dg.ConfigurableResource):
    """Where API responses land before Iceberg: a folder (local profile) or an S3 prefix (s3, aws)."""

    root: str  # a folder, or s3://bucket/prefix
    max_reject_rate: float = 0.05  # a batch refusing more than this share fails and stays pending
    # A reload may shrink a loaded day by at most this share (1.0 in a run's config: the shrink is intended).
    max_day_shrink: float = 0.5
    s3_endpoint: str = ""  # MinIO / moto; empty: AWS
    region: str = "ap-southeast-5"
    spark_scheme: str = "s3a"  # how Spark names S3 objects: s3a (Hadoop S3A) or s3 (Glue/EMR S3FileIO)

    def zone(self) -> RawZone:
        return open_raw_zone(self.root, s3_endpoint=self.s3_endpoint, region=self.region, uri_scheme=self.spark_scheme)

    def policy(self) -> dict[str, float]:
        """What bronze layers take from this resource's (run) config: the reject and shrink limits."""
        return {"max_reject_rate": self.max_reject_rate, "max_day_shrink": self.max_day_shrink}


class SourceApiResource(dg.ConfigurableResource):
    """A declared source's API: its URL and secrets are read from the environment when a step first asks for a
    client, never stored by Dagster. Locally, a synthetic API with no URL is started on loopback for the run (not by
    resources initialised again after the run, as `dagster job execute` does)."""

    source: str
    base_url: str = ""  # overrides the declaration's (a setting: ETR_API_URL for the BNPL source)
    page_size: int = 0  # 0: the declaration's
    start_synthetic: bool = False
    synthetic_seed: int = 7
    synthetic_transactions_per_day: int = 200
    _url: str = PrivateAttr(default="")
    _run: ExitStack | None = PrivateAttr(default=None)  # the run's scope: the synthetic API stops with it
    _secrets: dict[str, str] = PrivateAttr(default_factory=dict)  # the synthetic API's own credentials

    @contextmanager
    def yield_for_execution(self, context: dg.InitResourceContext) -> Iterator[SourceApiResource]:
        with ExitStack() as self._run:
            yield self

    def client(self) -> SourceClient:
        """A client for the run; a variable the declaration names and the environment lacks fails here, first."""
        from etr_assets.sources.http_fetch import connect
        from etr_assets.tables.declared import source

        declaration = source(self.source).declaration
        url = self._url or self.base_url or _from_environment(declaration.client.base_url)
        if not url and self.start_synthetic and declaration.client.synthetic and self._run is not None:
            running, self._secrets = self._run.enter_context(self._synthetic(declaration.client.synthetic))
            self._url = url = running.url
            dg.get_dagster_logger().info(f"{API_STARTED} on {self._url} for this run")
        secrets = self._secrets if self._url else None
        return connect(declaration, os.environ, base_url=url or None, secrets=secrets, page_size=self.page_size or None)

    @contextmanager
    def _synthetic(self, name: str):
        """The synthetic API `name` on loopback, and the (not secret) credentials it accepts."""
        if name == "stores":
            from etr_assets.sources.synthetic_stores import StoresConfig
            from etr_assets.sources.synthetic_stores import serve as serve_stores

            config = StoresConfig()
            with serve_stores(config) as running:
                yield running, {"api_key": config.api_key}
            return
        from etr_assets.sources.synthetic_api import ApiConfig, serve

        with serve(
            ApiConfig(self.synthetic_seed, self.synthetic_transactions_per_day, token=LOCAL_API_TOKEN)
        ) as running:
            yield running, {"token": LOCAL_API_TOKEN}


def _from_environment(value) -> str:
    return os.environ.get(value.variable, "") if isinstance(value, FromEnv) else value


class LayerRunner(dg.ConfigurableResource):
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
        self, context: dg.AssetExecutionContext, lake: LakeResource, raw_zone: RawZoneResource | None = None, **options
    ):
        """Build and finish the asset's layer for the run's days, here or remotely; yields what the run records.
        `options`: what its request type takes beyond the days (bronze's limits come from `raw_zone`)."""
        layer = context.asset_key.to_user_string()
        policy = raw_zone.policy() if raw_zone else {}
        request = LAYERS[layer].request(context.partition_keys, branch_name(context.run.run_id), **policy, **options)
        if self.compute == Compute.LOCAL:
            spark, conf = lake.session(), lake.spark.spark_config or {}
            zone, root = (raw_zone.zone, raw_zone.root) if raw_zone else (None, "")
            yield from show(context, report_layer(spark, lake.catalog, zone, request, context.run.run_id, conf, root))
            return
        extras = request.to_extras() | {"settings": self.settings_env, "platform": self.compute.value}
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
        """Messages under `pipes/` (dagster-aws picks a random top-level key), which the IAM policy grants and the
        lifecycle rule expires. dagster-aws is imported only here: it costs a second at import."""
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
        pipes = PipesGlueClient if self.compute == Compute.GLUE else PipesEMRServerlessClient
        return pipes(client=self.aws_client(), context_injector=injector, message_reader=reader)


def show(context: dg.AssetExecutionContext, report: Report):
    """The report as the run records it: its log lines, the materialization, the check results, then the failure."""
    for level, message in report.logs:
        context.log.log(level, message)
    if report.failure is None:
        record_days(context, report.figures)
        yield dg.MaterializeResult(metadata=as_metadata(report.figures))
    yield from on_partitions(context, check_results(report.outcomes))
    if report.failure is not None:
        raise dg.Failure(description=report.failure, metadata=as_metadata(report.failure_figures))


def source_resources(settings: Settings) -> dict[str, SourceApiResource]:
    """`<source>_api` for every declared source. The BNPL source's URL and page size are settings too (ETR_API_URL,
    ETR_API_PAGE_SIZE), and its synthetic API's seed and size."""
    from etr_assets.tables.declared import SOURCES

    resources = {}
    for declared in SOURCES:
        bnpl = declared.declaration.client.synthetic == "bnpl"
        resources[f"{declared.name}_api"] = SourceApiResource(
            source=declared.name,
            base_url=settings.api_url if bnpl else "",
            page_size=settings.api_page_size if bnpl else 0,
            start_synthetic=settings.profile == Profile.LOCAL,
            synthetic_seed=settings.api_seed,
            synthetic_transactions_per_day=settings.api_transactions_per_day,
        )
    return resources


def build_resources(settings: Settings) -> dict[str, object]:
    params = {Compute.GLUE: jobs.glue_job_run_params, Compute.EMR_SERVERLESS: jobs.emr_serverless_job_run_params}
    return {
        "lake": LakeResource(
            spark=LazyPySparkResource(spark_config=spark_conf(settings)),
            catalog=settings.catalog,
            catalog_conf=catalog_conf(settings),
        ),
        "raw_zone": RawZoneResource(
            root=settings.raw_root,
            max_reject_rate=settings.max_reject_rate,
            max_day_shrink=settings.max_day_shrink,
            s3_endpoint=settings.s3_endpoint,
            region=settings.region,
            spark_scheme="s3a" if settings.profile == Profile.S3 else "s3",
        ),
        **source_resources(settings),
        "layer_runner": LayerRunner(
            start_job_run_params=params[settings.compute](settings) if settings.compute in params else {},
            compute=settings.compute,
            settings_env=jobs.settings_env(settings),
            bucket=settings.bucket,
            region=settings.region,
            s3_endpoint=settings.s3_endpoint,
        ),
    }
