"""Fixtures of the s3-profile tests."""

from etr_assets_tests.conftest import AWS_TEST_REGION as REGION  # aws_env and moto_endpoint: the root conftest.py


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
