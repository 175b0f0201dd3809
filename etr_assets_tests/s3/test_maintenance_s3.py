"""Maintenance and health on the `s3` profile: S3A on moto, the JDBC catalog on a real PostgreSQL.

Spark runs in a subprocess (maintenance_job.py); health is then read from this process through pyiceberg on the
same PostgreSQL catalog and bucket. remove_orphan_files lists the table through S3A (`s3a://` paths): with the
#4346 options it must delete no live file, and a fresh unreferenced object (younger than three days) stays.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from etr_assets_tests.infra import (
    create_bucket,
    list_keys,
    moto_server,
    postgres_server,
    require_s3_profile_jars,
    s3_client,
)
from etr_assets_tests.s3.conftest import REGION, s3_profile_settings
from etr_assets_tests.s3.test_s3_profile import finish_jobs, job_args, start_job

JOB = Path(__file__).with_name("maintenance_job.py")


@pytest.mark.slow
def test_maintenance_on_s3a_keeps_every_live_file_and_health_reads_the_postgres_catalog(tmp_path, aws_env, monkeypatch):
    from etr_assets.lake.health import table_health
    from etr_assets_tests.s3 import maintenance_job, test_s3_profile

    require_s3_profile_jars()
    monkeypatch.setattr(test_s3_profile, "JOB", JOB)  # reuse its runner (own process group, killed on timeout)
    with moto_server() as endpoint, postgres_server() as jdbc_url:
        bucket = f"etr-lake-{uuid.uuid4().hex[:10]}"
        client = s3_client(endpoint, REGION)
        create_bucket(client, bucket)
        planted = "warehouse/silver/ledger/data/written-by-a-crashed-job.parquet"
        client.put_object(Bucket=bucket, Key=planted, Body=b"not referenced by any snapshot")
        settings = s3_profile_settings(bucket, endpoint, jdbc_url, tmp_path / "etr")
        (result,) = finish_jobs([start_job("maintain", job_args(settings), tmp_path)], tmp_path)

        assert result["file_scheme"] == "s3a"
        assert result["ids"] == sorted({n * 10 + i for n in range(5) for i in range(2)} - {10})  # no row lost
        assert result["before"] == ["WARN", 5, 1] and result["after"] == ["OK", 1, 0]
        assert result["orphans_removed"] == [] and planted in list_keys(client, bucket, "warehouse/silver/ledger/")
        assert result["log"] == [["WARN", "OK", 1]]
        health = table_health(settings, maintenance_job.SPEC)  # pyiceberg on PostgreSQL + moto, no JVM
        assert (health.status, health.data_files, health.delete_files, health.rows) == ("OK", 1, 0, 9)
        assert health.metadata_file_bytes > 0
