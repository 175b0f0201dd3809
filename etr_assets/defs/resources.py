"""Dagster resources: thin handles on the library, configured from the profile's settings."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from dagster import ConfigurableResource, EnvVar, InitResourceContext
from dagster_pyspark import LazyPySparkResource
from pydantic import PrivateAttr

from etr_assets.lake.session import catalog_conf, spark_conf
from etr_assets.settings import Settings
from etr_assets.sources.api_client import ApiClient
from etr_assets.sources.raw_zone import RawZone
from etr_assets.sources.s3_storage import open_raw_zone

LOCAL_API_TOKEN = "etr-local-token"  # the embedded synthetic API's token: not a secret


class LakeResource(ConfigurableResource):
    """The Iceberg lakehouse: a Spark session (started on first use) on the profile's catalog."""

    spark: LazyPySparkResource
    catalog: str
    catalog_conf: dict[str, str]

    def session(self):
        spark = self.spark.spark_session
        # A session made earlier in this process (getOrCreate) may not know this catalog yet: catalog
        # settings are read lazily by Spark, so setting them here always takes effect.
        for key, value in self.catalog_conf.items():
            spark.conf.set(key, value)
        return spark


class RawZoneResource(ConfigurableResource):
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


class BnplApiResource(ConfigurableResource):
    """The BNPL provider's API. With no URL, the synthetic API is started on loopback for the run."""

    base_url: str = ""
    token: str = LOCAL_API_TOKEN
    page_size: int = 100
    timeout_seconds: float = 30.0
    synthetic_seed: int = 7
    synthetic_transactions_per_day: int = 200
    _url: str = PrivateAttr(default="")

    @contextmanager
    def yield_for_execution(self, context: InitResourceContext) -> Iterator[BnplApiResource]:
        if self.base_url:
            self._url = self.base_url
            yield self
            return
        from etr_assets.sources.synthetic_api import ApiConfig, serve

        config = ApiConfig(
            seed=self.synthetic_seed, transactions_per_day=self.synthetic_transactions_per_day, token=self.token
        )
        with serve(config) as api:
            if context.log:
                context.log.info(f"started the synthetic BNPL API on {api.url} for this run")
            self._url = api.url
            yield self

    def client(self) -> ApiClient:
        return ApiClient(self._url or self.base_url, self.token, self.page_size, self.timeout_seconds)


def build_resources(settings: Settings) -> dict[str, object]:
    if settings.api_url:
        api = BnplApiResource(
            base_url=settings.api_url, token=EnvVar("ETR_API_TOKEN"), page_size=settings.api_page_size
        )
    elif settings.profile == "local":
        api = BnplApiResource(
            page_size=settings.api_page_size,
            synthetic_seed=settings.api_seed,
            synthetic_transactions_per_day=settings.api_transactions_per_day,
        )
    else:
        raise ValueError(f"ETR_PROFILE={settings.profile} needs ETR_API_URL: the synthetic API runs only in local")
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
            spark_scheme="s3a" if settings.profile == "s3" else "s3",
        ),
        "bnpl_api": api,
    }
