"""Fixtures of the aws-profile tests: moto's S3 and Glue on loopback, dummy credentials only."""

from __future__ import annotations

import urllib.request

import pytest

from etr_assets.settings import Settings
from etr_assets_tests.conftest import AWS_TEST_REGION as REGION  # the Settings default, as the seed's team runs
from etr_assets_tests.infra import create_bucket, s3_client


@pytest.fixture(autouse=True)
def _moto_emptied(moto_endpoint):
    """moto (the root conftest's, one per module) emptied before each test: its backends are global to the process,
    and each test here bootstraps its own Glue databases."""
    request = urllib.request.Request(f"{moto_endpoint}/moto-api/reset", method="POST")
    urllib.request.urlopen(request, timeout=30).close()


@pytest.fixture
def aws_settings(aws_env, moto_endpoint, tmp_path, request) -> Settings:
    """The aws profile on moto: a bucket of the test's own; Glue and S3 both answered by moto's server."""
    bucket = "etr-" + request.node.name.lower().replace("_", "-")[:40].strip("-")
    create_bucket(s3_client(moto_endpoint, REGION), bucket)
    return Settings(
        profile="aws",
        home=tmp_path / "etr",
        bucket=bucket,
        region=REGION,
        s3_endpoint=moto_endpoint,
        glue_endpoint=moto_endpoint,
    )
