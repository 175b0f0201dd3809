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
    counting_moto_server,
    create_bucket,
    list_keys,
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
    requests = tmp_path / "requests.jsonl"
    monkeypatch.setenv("ETR_S3_REQUEST_LOG", str(requests))  # the server logs each request it answers
    with counting_moto_server() as (endpoint, _), postgres_server() as jdbc_url:
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
    # Each file Iceberg deleted (old metadata.json at commits, expired manifests and data files), one request: S3A's
    # own delete asks first what the path is (a HEAD after the file's last read) and then lists its parent.
    deleted = single_request_deletes(requests, f"/{bucket}/warehouse/")
    assert len(deleted) >= 5 and all(deleted.values()), {k: v for k, v in deleted.items() if not v}


def single_request_deletes(log: Path, prefix: str) -> dict[str, bool]:
    """Each key under `prefix` the server deleted -> whether nothing but its DELETE followed its last write or read."""
    import json

    since_used: dict[str, list[str]] = {}
    for line in log.read_text().splitlines():
        request = json.loads(line)
        key, kind = request["key"], request["kind"]
        if key.startswith(prefix):
            since_used[key] = [] if kind in ("PUT", "GET", "MULTIPART") else [*since_used.get(key, []), kind]
    return {key: kinds == ["DELETE"] for key, kinds in since_used.items() if "DELETE" in kinds}
