"""Where the lake lives and how to reach it, read once from ``ETR_*`` variables (docs/production.md). Nothing here
imports Dagster or starts a JVM, so the library, the CLI and the Dagster layer all read the same object."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from enum import StrEnum
from pathlib import Path

from etr_assets.errors import SettingsError


class Profile(StrEnum):
    """Where the lake lives: this machine (Hadoop catalog), S3 + PostgreSQL catalog, or S3 + AWS Glue."""

    LOCAL = "local"
    S3 = "s3"
    AWS = "aws"


class Compute(StrEnum):
    """Where the heavy assets run: in the run's own Spark, or as a Glue / EMR Serverless job through Dagster Pipes."""

    LOCAL = "local"
    GLUE = "glue"
    EMR_SERVERLESS = "emr-serverless"
    SUBPROCESS = "subprocess"  # the job script in a child process: the tests' Pipes run without AWS, not a setting


PROFILES = tuple(Profile)
COMPUTES = tuple(c for c in Compute if c != Compute.SUBPROCESS)  # what ETR_COMPUTE accepts


@dataclasses.dataclass(frozen=True)
class Settings:
    profile: Profile = Profile.LOCAL
    home: Path = Path(".etr")
    catalog: str = "etr"
    # Spark
    spark_master: str = "local[2]"
    driver_memory: str = ""  # empty: sized from this machine (driver_memory_for)
    shuffle_partitions: int = 4
    spark_jars: tuple[str, ...] = ()  # explicit jar paths instead of the wheel's Iceberg runtime
    spark_packages: tuple[str, ...] = ()  # Maven coordinates, for machines that reach Maven
    provided_iceberg: bool = False  # the platform ships Iceberg (Glue 5.0, EMR): add no jar
    executor_memory: str = ""  # empty: Spark's default (1g); a standalone worker must offer at least this
    table_format_version: int = 0  # Iceberg format of new tables whose spec names none; 0: the profile's
    manifest_cache: bool = True  # Iceberg keeps manifests it read in memory (they never change): fewer S3 GETs
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
    api_seed: int = 7
    api_transactions_per_day: int = 200
    api_page_size: int = 1000  # the synthetic API's largest: a day of a million transactions is 1,030 pages and files
    start_date: dt.date = dt.date(2025, 1, 1)
    # Ingestion policy
    max_reject_rate: float = 0.05  # a batch refusing more than this share of its records fails and stays pending
    max_day_shrink: float = 0.5  # a reload shrinking a loaded day by more than this share fails and stays pending
    pending_alert_hours: float = 6.0  # the sensor reports batches pending longer than this
    compute: Compute = Compute.LOCAL
    glue_job_name: str = ""
    glue_worker_type: str = "G.1X"
    glue_workers: int = 2
    emr_application_id: str = ""
    remote_role_arn: str = ""  # the role the EMR Serverless job runs as (Glue jobs carry theirs)

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise SettingsError(f"ETR_PROFILE={self.profile!r} is not one of {', '.join(PROFILES)}")
        if self.compute not in COMPUTES:
            raise SettingsError(f"ETR_COMPUTE={self.compute!r} is not one of {', '.join(COMPUTES)}")
        object.__setattr__(self, "profile", Profile(self.profile))  # from text (ETR_PROFILE, a test) to the enum
        object.__setattr__(self, "compute", Compute(self.compute))
        if self.profile != Profile.LOCAL and not self.bucket:
            raise SettingsError(f"ETR_PROFILE={self.profile} needs ETR_S3_BUCKET (the lake's bucket)")
        if self.profile == Profile.S3 and not self.jdbc_url:
            raise SettingsError("ETR_PROFILE=s3 needs ETR_JDBC_URL (the PostgreSQL Iceberg catalog)")
        if self.table_format_version not in (0, 2, 3):
            raise SettingsError(f"ETR_TABLE_FORMAT_VERSION={self.table_format_version} must be 2 or 3 (or unset)")
        for name, share in (("ETR_MAX_REJECT_RATE", self.max_reject_rate), ("ETR_MAX_DAY_SHRINK", self.max_day_shrink)):
            if not 0 <= share <= 1:
                raise SettingsError(f"{name}={share} must be between 0 and 1")
        if self.compute != Compute.LOCAL and self.profile == Profile.LOCAL:
            raise SettingsError(f"ETR_COMPUTE={self.compute} needs a shared lake: ETR_PROFILE=aws (or s3), not local")
        if self.compute == Compute.GLUE and not self.glue_job_name:
            raise SettingsError("ETR_COMPUTE=glue needs ETR_GLUE_JOB_NAME (the Glue job that runs etr_assets)")
        if self.compute == Compute.EMR_SERVERLESS and not (self.emr_application_id and self.remote_role_arn):
            raise SettingsError("ETR_COMPUTE=emr-serverless needs ETR_EMR_APPLICATION_ID and ETR_REMOTE_ROLE_ARN")
        if not self.catalog.isidentifier():
            raise SettingsError(f"ETR_CATALOG={self.catalog!r} must be a plain identifier")
        object.__setattr__(self, "home", Path(self.home).absolute())

    @property
    def warehouse(self) -> str:
        """The Iceberg warehouse root, in the scheme the profile's file IO expects."""
        if self.profile == Profile.LOCAL:
            return (self.home / "warehouse").as_uri()
        return f"{'s3a' if self.profile == Profile.S3 else 's3'}://{self.bucket}/warehouse"

    @property
    def raw_root(self) -> str:
        """Root of the raw zone: a local folder, or an ``s3://bucket/raw`` prefix."""
        return str(self.home / "raw") if self.profile == Profile.LOCAL else f"s3://{self.bucket}/raw"

    @property
    def spark_driver_memory(self) -> str:
        """The driver's heap: ETR_SPARK_DRIVER_MEMORY, or when it is unset a share of this machine's memory."""
        return self.driver_memory or driver_memory_for(machine_memory_bytes())

    @property
    def format_version(self) -> int:
        """The Iceberg format version of new tables (unless their spec pins one): ETR_TABLE_FORMAT_VERSION, else 3,
        but 2 on aws, where Amazon Athena (which cannot read v3) queries the tables."""
        return self.table_format_version or (2 if self.profile == Profile.AWS else 3)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        """Settings from ETR_* variables (`ENVIRONMENT`); a variable unset or empty keeps the field's default."""
        env = os.environ if environ is None else environ
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        values = {}
        for field, (names, parse) in ENVIRONMENT.items():
            if not (raw := next((env[n].strip() for n in names if env.get(n, "").strip()), "")):
                continue
            try:
                values[field] = parse(raw)
            except ValueError:
                raise SettingsError(f"{names[0]}={raw!r} is not {_KINDS.get(parse, 'valid')}") from None
        return cls(**{**defaults, **values})


def driver_memory_for(total_bytes: int | None) -> str:
    """The driver heap for a machine of `total_bytes`: a quarter of it (docs/production.md#driver-memory), in whole
    256 MB from 1g to 8g; 1g when the size is unknown."""
    share = (total_bytes or 0) // 4 // 2**20 // 256 * 256
    megabytes = min(max(share, 1024), 8192)
    return f"{megabytes // 1024}g" if megabytes % 1024 == 0 else f"{megabytes}m"


CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")  # cgroup v2, v1


def machine_memory_bytes() -> int | None:
    """This machine's physical memory, or its container's limit when that is lower; None if neither can be read."""
    try:
        sizes = [os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")]
    except (ValueError, OSError, AttributeError):
        sizes = []
    for path in CGROUP_LIMITS:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():  # "max" (v2) means no limit; v1 writes a huge number instead
            sizes.append(int(text))
    return min(sizes) if sizes else None


_KINDS = {int: "an integer", float: "a number", dt.date.fromisoformat: "a date (YYYY-MM-DD)"}
_PARSERS = {  # a field's type -> how its variable is read; any other type is read as text
    "int": int,
    "float": float,
    "bool": lambda raw: raw.lower() in ("1", "true", "yes"),
    "tuple[str, ...]": lambda raw: tuple(part.strip() for part in raw.split(",") if part.strip()),  # comma-separated
    "dt.date": dt.date.fromisoformat,
    "Path": Path,
}
_NAMED = {  # the variables not spelled ETR_ and the field's name in capitals; the first set wins
    "driver_memory": ("ETR_SPARK_DRIVER_MEMORY",),
    "shuffle_partitions": ("ETR_SPARK_SHUFFLE_PARTITIONS",),
    "provided_iceberg": ("ETR_ICEBERG_PROVIDED",),
    "executor_memory": ("ETR_SPARK_EXECUTOR_MEMORY",),
    "bucket": ("ETR_S3_BUCKET",),
    "region": ("ETR_AWS_REGION", "AWS_REGION"),
}
# Field -> (variables, parser from the field's type). The defaults are the fields' own, written once above.
ENVIRONMENT = {
    f.name: (_NAMED.get(f.name, (f"ETR_{f.name.upper()}",)), _PARSERS.get(f.type, str))
    for f in dataclasses.fields(Settings)
}
