"""Fixtures of the aws-profile tests: moto's S3 and Glue on loopback, dummy credentials only."""

from __future__ import annotations

import os
import urllib.request

import pytest

from etr_assets.settings import Settings
from etr_assets_tests.infra import aws_test_env, create_bucket, moto_server, s3_client

REGION = "ap-southeast-5"  # the Settings default, as the seed's team runs


@pytest.fixture
def moto_endpoint():
    """moto on loopback, emptied first: its backends are global to the process, and each test bootstraps its own."""
    with moto_server() as url:
        urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST"), timeout=30).close()
        yield url


@pytest.fixture
def aws_env(monkeypatch):
    """No AWS_* variable of the host reaches boto3 or pyiceberg: the dummy ones only."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    for name, value in aws_test_env(REGION).items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def aws_settings(aws_env, moto_endpoint, tmp_path, request) -> Settings:
    """The aws profile on moto: a bucket of the test's own; Glue and S3 both answered by moto's server."""
    bucket = "etr-" + request.node.name.lower().replace("_", "-")[:40].strip("-")
    create_bucket(s3_client(moto_endpoint, REGION), bucket)
    return Settings(
        profile="aws", home=tmp_path / "etr", bucket=bucket, region=REGION,
        s3_endpoint=moto_endpoint, glue_endpoint=moto_endpoint,
    )
