"""pyiceberg's catalog on the `s3` profile's PostgreSQL: one per process, whatever the number of table readings."""

from __future__ import annotations

import contextlib

from etr_assets_tests.infra import postgres_server
from etr_assets_tests.s3.conftest import s3_profile_settings


def client_connections(jdbc_url: str) -> int:
    import psycopg2

    # psycopg2's own `with` ends a transaction, not the connection
    with contextlib.closing(psycopg2.connect(jdbc_url.removeprefix("jdbc:"), user="postgres")) as connection:
        with connection.cursor() as cursor:
            others = "backend_type = 'client backend' AND pid <> pg_backend_pid()"
            cursor.execute(f"SELECT count(*) FROM pg_stat_activity WHERE {others}")
            return cursor.fetchone()[0]


def test_table_readings_share_one_catalog_and_hold_one_connection(tmp_path):
    """Health reads every table at each tick: a catalog made per reading kept its pool's connections open until the
    garbage collector ran, and a benchmark's month ran PostgreSQL out of them."""
    from etr_assets.lake.metadata import catalog

    with postgres_server() as jdbc_url:
        settings = s3_profile_settings("etr-unused", "http://127.0.0.1:9", jdbc_url, tmp_path / "etr")
        for _ in range(30):
            assert catalog(settings).list_namespaces() == []
        assert client_connections(jdbc_url) == 1
        assert catalog(settings) is catalog(settings)
