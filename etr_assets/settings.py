"""Where the lake lives and how to reach it, read once from the environment.

Every setting is an ``ETR_*`` environment variable (the README lists them). Nothing here imports Dagster or
starts a JVM, so the library, the CLI and the Dagster layer all read the same object.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from pathlib import Path

PROFILES = ("local", "s3", "aws")
COMPUTES = ("local", "glue", "emr-serverless")


class SettingsError(ValueError):
    """A setting is missing or malformed; the message names the variable."""


@dataclasses.dataclass(frozen=True)
class Settings:
    profile: str = "local"
    home: Path = Path(".etr")
    catalog: str = "etr"
    # Spark
    spark_master: str = "local[2]"
    driver_memory: str = "1g"
    shuffle_partitions: int = 4
    spark_jars: tuple[str, ...] = ()  # explicit jar paths instead of the wheel's Iceberg runtime
    spark_packages: tuple[str, ...] = ()  # Maven coordinates, for machines that reach Maven
    provided_iceberg: bool = False  # the platform ships Iceberg (Glue 5.0, EMR): add no jar
    executor_memory: str = ""  # empty: Spark's default (1g); a standalone worker must offer at least this
    # Object storage and catalogs (s3 / aws profiles)
    bucket: str = ""
    s3_endpoint: str = ""
    region: str = "ap-southeast-5"
    glue_endpoint: str = ""  # a Glue-compatible endpoint (moto, a VPC endpoint); empty: the region's Glue
    jdbc_url: str = ""
    jdbc_user: str = ""
    jdbc_password: str = ""
    # The BNPL API
    api_url: str = ""  # empty: the local profile starts the synthetic API on loopback for the run
    api_token_env: str = "ETR_API_TOKEN"
    api_seed: int = 7
    api_transactions_per_day: int = 200
    api_page_size: int = 100
    start_date: dt.date = dt.date(2025, 1, 1)
    # Ingestion policy
    max_reject_rate: float = 0.05  # a batch refusing more than this share of its records fails and stays pending
    max_day_shrink: float = 0.5  # a reload shrinking a loaded day by more than this share fails and stays pending
    pending_alert_hours: float = 6.0  # the sensor reports batches pending longer than this
    # Where the heavy assets run: in the run's own Spark, or as a Glue / EMR Serverless job through Dagster Pipes
    compute: str = "local"
    glue_job_name: str = ""
    glue_worker_type: str = "G.1X"
    glue_workers: int = 2
    emr_application_id: str = ""
    remote_role_arn: str = ""  # the role the EMR Serverless job runs as (Glue jobs carry theirs)

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise SettingsError(f"ETR_PROFILE={self.profile!r} is not one of {', '.join(PROFILES)}")
        if self.profile != "local" and not self.bucket:
            raise SettingsError(f"ETR_PROFILE={self.profile} needs ETR_S3_BUCKET (the lake's bucket)")
        if self.profile == "s3" and not self.jdbc_url:
            raise SettingsError("ETR_PROFILE=s3 needs ETR_JDBC_URL (the PostgreSQL Iceberg catalog)")
        if not 0 <= self.max_reject_rate <= 1:
            raise SettingsError(f"ETR_MAX_REJECT_RATE={self.max_reject_rate} must be between 0 and 1")
        if not 0 <= self.max_day_shrink <= 1:
            raise SettingsError(f"ETR_MAX_DAY_SHRINK={self.max_day_shrink} must be between 0 and 1")
        if self.compute not in COMPUTES:
            raise SettingsError(f"ETR_COMPUTE={self.compute!r} is not one of {', '.join(COMPUTES)}")
        if self.compute != "local" and self.profile == "local":
            raise SettingsError(f"ETR_COMPUTE={self.compute} needs a shared lake: ETR_PROFILE=aws (or s3), not local")
        if self.compute == "glue" and not self.glue_job_name:
            raise SettingsError("ETR_COMPUTE=glue needs ETR_GLUE_JOB_NAME (the Glue job that runs etr_assets)")
        if self.compute == "emr-serverless" and not (self.emr_application_id and self.remote_role_arn):
            raise SettingsError("ETR_COMPUTE=emr-serverless needs ETR_EMR_APPLICATION_ID and ETR_REMOTE_ROLE_ARN")
        if not self.catalog.isidentifier():
            raise SettingsError(f"ETR_CATALOG={self.catalog!r} must be a plain identifier")
        object.__setattr__(self, "home", Path(self.home).absolute())

    # --- derived locations -------------------------------------------------------------------------
    @property
    def warehouse(self) -> str:
        """The Iceberg warehouse root, in the scheme the profile's file IO expects."""
        if self.profile == "local":
            return (self.home / "warehouse").as_uri()
        scheme = "s3a" if self.profile == "s3" else "s3"
        return f"{scheme}://{self.bucket}/warehouse"

    @property
    def raw_root(self) -> str:
        """Root of the raw zone: a local folder, or an ``s3://bucket/raw`` prefix."""
        if self.profile == "local":
            return str(self.home / "raw")
        return f"s3://{self.bucket}/raw"

    @property
    def scratch_dir(self) -> Path:
        return self.home / "spark"

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster"

    @property
    def serialize_writers(self) -> bool:
        """The Hadoop catalog has no atomic commit on a local disk: one writer per table at a time."""
        return self.profile == "local"

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ

        def get(name: str, default: str = "") -> str:
            return env.get(name, default).strip()

        def integer(name: str, default: int) -> int:
            raw = get(name)
            if not raw:
                return default
            try:
                return int(raw)
            except ValueError:
                raise SettingsError(f"{name}={raw!r} is not an integer") from None

        def number(name: str, default: float) -> float:
            raw = get(name)
            if not raw:
                return default
            try:
                return float(raw)
            except ValueError:
                raise SettingsError(f"{name}={raw!r} is not a number") from None

        def csv(name: str) -> tuple[str, ...]:
            return tuple(part.strip() for part in get(name).split(",") if part.strip())

        start = get("ETR_START_DATE", "2025-01-01")
        try:
            start_date = dt.date.fromisoformat(start)
        except ValueError:
            raise SettingsError(f"ETR_START_DATE={start!r} is not a date (YYYY-MM-DD)") from None

        return cls(
            profile=get("ETR_PROFILE", "local") or "local",
            home=Path(get("ETR_HOME", ".etr") or ".etr"),
            catalog=get("ETR_CATALOG", "etr") or "etr",
            spark_master=get("ETR_SPARK_MASTER", "local[2]") or "local[2]",
            driver_memory=get("ETR_SPARK_DRIVER_MEMORY", "1g") or "1g",
            shuffle_partitions=integer("ETR_SPARK_SHUFFLE_PARTITIONS", 4),
            spark_jars=csv("ETR_SPARK_JARS"),
            spark_packages=csv("ETR_SPARK_PACKAGES"),
            provided_iceberg=get("ETR_ICEBERG_PROVIDED").lower() in ("1", "true", "yes"),
            executor_memory=get("ETR_SPARK_EXECUTOR_MEMORY"),
            bucket=get("ETR_S3_BUCKET"),
            s3_endpoint=get("ETR_S3_ENDPOINT"),
            region=get("ETR_AWS_REGION", get("AWS_REGION", "ap-southeast-5")) or "ap-southeast-5",
            glue_endpoint=get("ETR_GLUE_ENDPOINT"),
            jdbc_url=get("ETR_JDBC_URL"),
            jdbc_user=get("ETR_JDBC_USER"),
            jdbc_password=get("ETR_JDBC_PASSWORD"),
            api_url=get("ETR_API_URL"),
            api_seed=integer("ETR_API_SEED", 7),
            api_transactions_per_day=integer("ETR_API_TRANSACTIONS_PER_DAY", 200),
            api_page_size=integer("ETR_API_PAGE_SIZE", 100),
            start_date=start_date,
            max_reject_rate=number("ETR_MAX_REJECT_RATE", 0.05),
            max_day_shrink=number("ETR_MAX_DAY_SHRINK", 0.5),
            pending_alert_hours=number("ETR_PENDING_ALERT_HOURS", 6.0),
            compute=get("ETR_COMPUTE", "local") or "local",
            glue_job_name=get("ETR_GLUE_JOB_NAME"),
            glue_worker_type=get("ETR_GLUE_WORKER_TYPE", "G.1X") or "G.1X",
            glue_workers=integer("ETR_GLUE_WORKERS", 2),
            emr_application_id=get("ETR_EMR_APPLICATION_ID"),
            remote_role_arn=get("ETR_REMOTE_ROLE_ARN"),
        )
