"""Real servers for tests, on loopback only: moto's S3 and a private PostgreSQL 15.

Plain context managers (not fixtures), so any test module or helper script can use them. Each one stops what it
started in a ``finally``, even when the test fails; nothing here touches a server it did not start.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PG_USER = "postgres"
PG_DATABASE = "etr"
# Dummy credentials for moto: never real ones. Tests put them in the environment (monkeypatch) or pass them.
AWS_TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_SECURITY_TOKEN": "testing",
}


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def missing_or_skip(what: str, install: str) -> None:
    """A missing system part: skip when we cannot install it (not root), fail loudly when setup should have."""
    if is_root():
        pytest.fail(f"{what} is missing although we run as root: `./dev test` installs it ({install})")
    pytest.skip(f"{what} is missing: install it ({install}) to run these tests")


# --- S3 (moto) ------------------------------------------------------------------------------------------
def aws_test_env(region: str) -> dict[str, str]:
    """The dummy AWS environment a test or a subprocess gets (with no real profile or credentials file)."""
    return AWS_TEST_ENV | {
        "AWS_DEFAULT_REGION": region,
        "AWS_REGION": region,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def clean_env(region: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of the environment without any AWS_* variable of the host, plus the dummy ones."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith("AWS_")}
    return env | aws_test_env(region)


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """moto's S3 (and every other service it emulates) on 127.0.0.1; yields the endpoint URL."""
    from moto.server import ThreadedMotoServer

    # One INFO line per request would bury a failing test's report; restored on exit.
    access_log = logging.getLogger("werkzeug")
    level = access_log.level
    access_log.setLevel(logging.WARNING)
    # Port 0: the OS picks a free port at bind time (no race with another test grabbing it).
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        access_log.setLevel(level)


class CountedRequests:
    """S3 requests a counting moto server answered, by (label, kind): the caller sets `label` to say whose they are
    (a layer of the pipeline, a test step). Glue requests (an X-Amz-Target header) are not counted."""

    def __init__(self):
        import collections
        import threading

        self.label = ""
        self.mark = ""  # in the request log beside the label: a benchmark's day number
        self.counts: collections.Counter = collections.Counter()
        self.lock = threading.Lock()
        # ETR_S3_REQUEST_LOG=FILE: each request as a JSON line (label, kind, method, key), to find which tables'
        # and files' requests grow from one day to another.
        self.log_path = os.environ.get("ETR_S3_REQUEST_LOG")

    def wrap(self, app):
        from etr_assets.sources.s3_requests import classify

        def counting(environ, start_response):
            if "HTTP_X_AMZ_TARGET" not in environ:
                kind = classify(
                    environ["REQUEST_METHOD"], environ.get("QUERY_STRING", ""), "HTTP_X_AMZ_COPY_SOURCE" in environ
                )
                with self.lock:
                    self.counts[(self.label, kind)] += 1
                    if self.log_path:
                        self._log(kind, environ)
            return app(environ, start_response)

        return counting

    def _log(self, kind: str, environ) -> None:
        import json

        line = {
            "mark": self.mark,
            "label": self.label,
            "kind": kind,
            "method": environ["REQUEST_METHOD"],
            "key": environ["PATH_INFO"],
        }
        with open(self.log_path, "a") as log:
            log.write(json.dumps(line) + "\n")

    def of(self, label: str | None = None):
        """Counts by kind, of one label or of all."""
        import collections

        with self.lock:
            found = collections.Counter()
            for (each, kind), n in self.counts.items():
                if label is None or each == label:
                    found[kind] += n
            return found


@contextlib.contextmanager
def counting_moto_server() -> Iterator[tuple[str, CountedRequests]]:
    """moto's server on 127.0.0.1 as `moto_server`, counting every S3 request it answers; yields (URL, counts)."""
    import threading

    from moto.server import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    access_log = logging.getLogger("werkzeug")
    level = access_log.level
    access_log.setLevel(logging.WARNING)
    counted = CountedRequests()
    app = counted.wrap(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", counted
    finally:
        server.shutdown()
        thread.join()
        access_log.setLevel(level)


def s3_client(endpoint: str, region: str):
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=AWS_TEST_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=AWS_TEST_ENV["AWS_SECRET_ACCESS_KEY"],
    )


def create_bucket(client, bucket: str) -> None:
    region = client.meta.region_name
    extra = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
    client.create_bucket(Bucket=bucket, **extra)


def list_keys(client, bucket: str, prefix: str = "") -> list[str]:
    keys: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [obj["Key"] for obj in page.get("Contents", [])]
    return keys


# --- PostgreSQL 15 ----------------------------------------------------------------------------------------
def _as_pg_user(command: list[str]) -> list[str]:
    # initdb and pg_ctl refuse to run as root: run them as the postgres user (docs/stack.md).
    return ["runuser", "-u", PG_USER, "--", *command] if is_root() else command


def _run(command: list[str], what: str, log: Path | None = None) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()[-2000:]
        if log is not None and log.exists():
            detail += "\n--- server log ---\n" + log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{what} failed (exit {done.returncode}): {detail}")


@contextlib.contextmanager
def postgres_server(database: str = PG_DATABASE) -> Iterator[str]:
    """A private PostgreSQL 15 on 127.0.0.1 (trust auth, user postgres) with database `database`.

    Yields its JDBC URL ``jdbc:postgresql://127.0.0.1:<port>/<database>``. The cluster lives in a temporary
    folder owned by the postgres user, with its own socket directory; it is stopped and removed on exit.
    """
    initdb, pg_ctl, createdb = PG_BIN / "initdb", PG_BIN / "pg_ctl", PG_BIN / "createdb"
    if not (initdb.exists() and pg_ctl.exists() and createdb.exists()):
        missing_or_skip(f"PostgreSQL 15 ({PG_BIN})", "apt-get install postgresql")
    if is_root():
        try:
            pwd.getpwnam(PG_USER)
        except KeyError:
            pytest.fail(f"the '{PG_USER}' user is missing: reinstall Debian's postgresql package")
    # Not under pytest's tmp_path: that folder is root's (0700) and the postgres user could not enter it.
    root = Path(tempfile.mkdtemp(prefix="etr-pg-"))
    data, sockets, log = root / "data", root / "sockets", root / "server.log"
    started = False
    try:
        sockets.mkdir()
        if is_root():
            for path in (root, sockets):
                shutil.chown(path, PG_USER, PG_USER)
        _run(
            _as_pg_user(
                [
                    str(initdb),
                    "-D",
                    str(data),
                    "-A",
                    "trust",
                    "-U",
                    PG_USER,
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-sync",
                    "--no-instructions",
                ]
            ),
            "initdb",
        )
        for attempt in range(3):  # a free port can be taken between our probe and the server's bind
            port = free_port()
            options = (
                f"-c listen_addresses=127.0.0.1 -p {port} -k {sockets} -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off"
            )
            try:
                _run(
                    _as_pg_user(
                        [str(pg_ctl), "-D", str(data), "-l", str(log), "-w", "-t", "60", "-o", options, "start"]
                    ),
                    "pg_ctl start",
                    log,
                )
            except RuntimeError:
                _stop(pg_ctl, data)  # in case it half-started
                if attempt == 2:
                    raise
                continue
            started = True
            break
        _run(_as_pg_user([str(createdb), "-h", "127.0.0.1", "-p", str(port), "-U", PG_USER, database]), "createdb")
        yield f"jdbc:postgresql://127.0.0.1:{port}/{database}"
    finally:
        if started:
            _stop(pg_ctl, data)
        shutil.rmtree(root, ignore_errors=True)


def _stop(pg_ctl: Path, data: Path) -> None:
    if (data / "postmaster.pid").exists():
        subprocess.run(
            _as_pg_user([str(pg_ctl), "-D", str(data), "-m", "fast", "-w", "stop"]), capture_output=True, timeout=120
        )


def psycopg2_connect(jdbc_url: str, user: str = PG_USER):
    """A psycopg2 connection to the database a JDBC URL names (trust auth: no password)."""
    from urllib.parse import urlparse

    import psycopg2

    parsed = urlparse(jdbc_url.removeprefix("jdbc:"))
    return psycopg2.connect(host=parsed.hostname, port=parsed.port, dbname=parsed.path.lstrip("/"), user=user)


# --- the s3 profile's jars ---------------------------------------------------------------------------------
def require_s3_profile_jars() -> list[str]:
    """The S3A jars and the PostgreSQL JDBC driver (setup fetches them); skip or fail as `missing_or_skip` says."""
    from etr_assets.errors import JarNotFound
    from etr_assets.lake.session import s3_profile_jars

    try:
        return s3_profile_jars()
    except JarNotFound as exc:
        missing_or_skip("a jar of the s3 profile", f"{exc}; apt-get install libpostgresql-jdbc-java")
        raise  # unreachable: pytest.skip/fail raise
