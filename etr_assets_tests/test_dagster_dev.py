"""`./dev ui` (`dg dev` on the project) for real: a webserver and daemon in their own process group.

Asserts that it starts without a warning, on the port and instance it is given; then on what the GraphQL API
returns (assets with their groups, the job, the stopped schedule, the daemon's freshness states), then that SIGINT
to the process group stops the whole tree. No Spark run is started here: loading the definitions must not need a JVM.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from etr_assets_tests.test_cli_subprocess import isolated_env

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
READY_TIMEOUT_S = 90
STOP_TIMEOUT_S = 30
KILL_GRACE_S = 20

EXPECTED_ASSETS = {  # the declared BNPL source's assets in its group (README: the asset graph)
    ("raw", "bnpl_transactions"): "bnpl",
    ("bronze", "bnpl_transactions_raw"): "bnpl",
    ("silver", "bnpl_transactions_clean"): "silver",
    ("gold", "bnpl_daily_summary"): "gold",
}

LOCATION_QUERY = """
{ workspaceOrError { __typename
    ... on Workspace { locationEntries { name loadStatus
        locationOrLoadError { __typename ... on PythonError { message } } } }
    ... on PythonError { message } } }
"""
ASSETS_QUERY = "{ assetNodes { assetKey { path } groupName kinds } }"
FRESHNESS_QUERY = """
{ assetNodes { assetKey { path } freshnessStatusInfo { freshnessStatus }
    internalFreshnessPolicy { ... on TimeWindowFreshnessPolicy { failWindowSeconds } } } }
"""
FRESHNESS_TIMEOUT_S = 60
REPOSITORIES_QUERY = """
{ repositoriesOrError { __typename
    ... on RepositoryConnection { nodes { name location { name }
        jobs { name }
        schedules { name pipelineName cronSchedule scheduleState { status } } } }
    ... on PythonError { message } } }
"""


# --- helpers -----------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no output: {exc})"


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member exists but is not ours to signal
        return True
    return True


def group_members(pgid: int) -> str:
    """`pid state command` of each process still in the group, from /proc (for failure messages)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()  # after "pid (comm)": state ppid pgrp ...
        if int(fields[2]) == pgid:
            found.append(f"{stat.parent.name} {fields[0]} {cmdline.strip()[:200]}")
    return "\n".join(found) or "(none found in /proc)"


def stop_group(proc: subprocess.Popen, timeout: float = KILL_GRACE_S) -> int | None:
    """SIGINT the process group we started; SIGKILL it if it is still there after `timeout` s."""
    pgid = proc.pid  # start_new_session=True: the leader's pid is the group id
    if proc.poll() is None or group_alive(pgid):
        try:
            os.killpg(pgid, signal.SIGINT)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (proc.poll() is None or group_alive(pgid)):
        time.sleep(0.2)
    if group_alive(pgid):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        return proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return None


def graphql(port: int, query: str, timeout: float = 10) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body = json.loads(response.read())
    assert not body.get("errors"), f"GraphQL errors for {query!r}: {body['errors']}"
    return body["data"]


def dev_ui(env: dict[str, str], out) -> subprocess.Popen:
    """`./dev ui`'s own command (its `ui` function cut out of the script, without the setup `./dev` runs first), on
    this venv, in a new process group."""
    script = (REPO / "dev").read_text()
    body = script[script.index("\nui() {") :]
    body = body[: body.index("\n}\n") + 3]
    return subprocess.Popen(
        ["bash", "-c", f'VENV="{BIN.parent}"\n{body}\nui'],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_until_loaded(proc: subprocess.Popen, port: int, log: Path) -> list[dict]:
    """Poll until the webserver answers and every code location has finished loading."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    last = "no answer yet"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"./dev ui exited with {proc.returncode} before it was ready; output tail:\n{tail(log)}")
        try:
            workspace = graphql(port, LOCATION_QUERY, timeout=5)["workspaceOrError"]
        except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError) as exc:
            last = repr(exc)
        else:
            entries = workspace.get("locationEntries") or []
            last = json.dumps(workspace)
            if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                return entries
        time.sleep(0.5)
    pytest.fail(
        f"./dev ui on port {port} not ready after {READY_TIMEOUT_S} s (last: {last}); output tail:\n{tail(log)}"
    )


def wait_for_freshness(port: int, key: tuple[str, ...], log: Path) -> dict[tuple[str, ...], tuple[str, int | None]]:
    """(freshness status, fail window in seconds) of every asset, once the daemon has judged `key`."""
    deadline, states = time.monotonic() + FRESHNESS_TIMEOUT_S, {}
    while time.monotonic() < deadline:
        states = {
            tuple(n["assetKey"]["path"]): (
                n["freshnessStatusInfo"]["freshnessStatus"] if n["freshnessStatusInfo"] else None,
                (n["internalFreshnessPolicy"] or {}).get("failWindowSeconds"),
            )
            for n in graphql(port, FRESHNESS_QUERY)["assetNodes"]
        }
        if states.get(key, ("UNKNOWN",))[0] != "UNKNOWN":
            return states
        time.sleep(1)
    pytest.fail(f"no freshness state for {key} after {FRESHNESS_TIMEOUT_S} s: {states}; output tail:\n{tail(log)}")


# --- the test ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_dev_ui_serves_the_code_location_and_stops_on_sigint(tmp_path: Path) -> None:
    port = free_port()
    # Dagster's freshness daemon every 2 s instead of 30.
    env = isolated_env(tmp_path, ETR_UI_PORT=str(port), FRESHNESS_DAEMON_INTERVAL_SECONDS="2")
    for unset in ("VIRTUAL_ENV", "PYTHONWARNINGS"):  # as a new shell: ./dev ui sets both itself
        env.pop(unset, None)
    log = tmp_path / "dev-ui.log"
    with log.open("wb") as out:
        proc = dev_ui(env, out)
    pgid = proc.pid
    stopped = False
    try:
        entries = wait_until_loaded(proc, port, log)
        assert [e["locationOrLoadError"]["__typename"] for e in entries] == ["RepositoryLocation"], entries
        # `dg dev`, not the superseded `dagster dev`: no warning at start (neither that nor dg's about the venv).
        said = log.read_text(errors="replace")
        assert f"Serving dagster-webserver on http://127.0.0.1:{port} in process" in said, tail(log)
        assert not [line for line in said.splitlines() if "warning" in line.lower()], tail(log)

        # The four pipeline assets, each in its group: the BNPL source's, silver's, gold's.
        nodes = graphql(port, ASSETS_QUERY)["assetNodes"]
        groups = {tuple(n["assetKey"]["path"]): n["groupName"] for n in nodes}
        assert {k: groups.get(k) for k in EXPECTED_ASSETS} == EXPECTED_ASSETS, groups
        kinds = {tuple(n["assetKey"]["path"]): set(n["kinds"]) for n in nodes}
        for key in EXPECTED_ASSETS:
            if key[0] != "raw":
                assert {"iceberg", "spark"} <= kinds[key], (key, kinds[key])

        # The job and its daily schedule, which a fresh instance must not start on its own.
        repos = graphql(port, REPOSITORIES_QUERY)["repositoriesOrError"]
        assert repos["__typename"] == "RepositoryConnection", repos
        jobs = {j["name"] for repo in repos["nodes"] for j in repo["jobs"]}
        schedules = {s["name"]: s for repo in repos["nodes"] for s in repo["schedules"]}
        assert "etr_pipeline" in jobs, jobs
        assert "etr_pipeline_daily" in schedules, schedules
        schedule = schedules["etr_pipeline_daily"]
        assert schedule["pipelineName"] == "etr_pipeline", schedule
        assert schedule["scheduleState"]["status"] == "STOPPED", schedule

        # The daemon evaluates each table's FreshnessPolicy (the shipped dagster.yaml enables it): a table
        # materialized now passes, one never materialized is unknown, a raw asset has no policy.
        from dagster import AssetKey, AssetMaterialization, DagsterInstance

        with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
            silver = AssetKey(["silver", "bnpl_transactions_clean"])
            instance.report_runless_asset_event(AssetMaterialization(silver, partition="2025-01-02"))
        states = wait_for_freshness(port, ("silver", "bnpl_transactions_clean"), log)
        assert states[("silver", "bnpl_transactions_clean")] == ("HEALTHY", 36 * 3600), states
        assert states[("gold", "bnpl_daily_summary")] == ("UNKNOWN", 36 * 3600), states
        assert states[("raw", "bnpl_transactions")] == (None, None), states

        # SIGINT to the group stops dg dev, and its webserver and daemon children with it.
        os.killpg(pgid, signal.SIGINT)
        try:
            code = proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"./dev ui still running {STOP_TIMEOUT_S} s after SIGINT; output tail:\n{tail(log)}")
        deadline = time.monotonic() + 10
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not group_alive(pgid), (
            f"process group {pgid} not empty after ./dev ui exited ({code}):\n{group_members(pgid)}"
        )
        stopped = True
    finally:
        if not stopped:
            stop_group(proc)
