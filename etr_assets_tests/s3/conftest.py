"""Fixtures of the s3-profile tests."""

import os

import pytest

from etr_assets_tests.infra import aws_test_env

REGION = "ap-southeast-5"  # the Settings default: S3A and pyiceberg get it from the profile


@pytest.fixture
def aws_env(monkeypatch):
    """Dummy credentials only: no AWS_* variable of the host reaches boto3, pyiceberg or a subprocess."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    for name, value in aws_test_env(REGION).items():
        monkeypatch.setenv(name, value)


def s3_profile_settings(bucket: str, endpoint: str, jdbc_url: str, home, **extra):
    """The `s3` profile on moto's S3 and a test PostgreSQL catalog (user postgres)."""
    from etr_assets.settings import Settings

    return Settings(
        profile="s3",
        bucket=bucket,
        s3_endpoint=endpoint,
        jdbc_url=jdbc_url,
        jdbc_user="postgres",
        home=home,
        region=REGION,
        **extra,
    )
