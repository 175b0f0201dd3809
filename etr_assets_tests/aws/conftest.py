"""Fixtures of the aws-profile tests: moto's S3 and Glue on loopback, dummy credentials only."""

from __future__ import annotations

import urllib.request

import pytest

from etr_assets.settings import Settings
from etr_assets_tests.infra import create_bucket, moto_server, s3_client
from etr_assets_tests.s3.conftest import aws_env  # noqa: F401  (dummy credentials only; one definition)

REGION = "ap-southeast-5"  # the Settings default, as the seed's team runs


@pytest.fixture
def moto_endpoint():
    """moto on loopback, emptied first: its backends are global to the process, and each test bootstraps its own."""
    with moto_server() as url:
        urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST"), timeout=30).close()
        yield url


@pytest.fixture
def aws_settings(aws_env, moto_endpoint, tmp_path, request) -> Settings:  # noqa: F811
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
