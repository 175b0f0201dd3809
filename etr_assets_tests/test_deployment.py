"""The deployment files stay valid: workspace.yaml and dagster_cloud.yaml load the code location, and the
container's command serves it over gRPC to a webserver configured by deployment/workspace.yaml."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from dagster import Definitions

from etr_assets_tests.infra import free_port
from etr_assets_tests.test_cli_subprocess import BIN, REPO, isolated_env, kill_group, start

CONTAINERFILE = REPO / "deployment" / "Containerfile"


def validate(workspace: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "dagster"), "definitions", "validate", "-w", str(workspace)],
        cwd=REPO,
        env=env | {"PYTHONWARNINGS": "ignore"},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_dagster_cloud_yaml_names_a_module_with_definitions():
    config = yaml.safe_load((REPO / "dagster_cloud.yaml").read_text())
    [location] = config["locations"]
    assert location["location_name"] == "etr_assets"
    module = importlib.import_module(location["code_source"]["module_name"])
    assert isinstance(module.defs, Definitions)
    assert {"etr_pipeline", "bootstrap_lake"} <= {j.name for j in module.defs.resolve_all_job_defs()}


def test_the_container_serves_the_module_dagster_cloud_names():
    text = CONTAINERFILE.read_text()
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", text, re.MULTILINE).group(1))
    module = cmd[cmd.index("--module-name") + 1]
    assert (
        module
        == yaml.safe_load((REPO / "dagster_cloud.yaml").read_text())["locations"][0]["code_source"]["module_name"]
    )
    assert re.search(r"^FROM python:3\.11", text, re.MULTILINE) and "openjdk-17-jre-headless" in text
    assert "pip install --no-cache-dir ." in text  # the pins are pyproject.toml's, not a second list


@pytest.mark.slow
def test_workspace_yaml_loads(tmp_path):
    done = validate(REPO / "workspace.yaml", isolated_env(tmp_path))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "etr_assets" in done.stdout + done.stderr


@pytest.mark.slow
def test_the_containers_command_serves_the_production_workspace(tmp_path):
    """The Containerfile's CMD (as written there) on a free port; deployment/workspace.yaml pointed at it loads."""
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", CONTAINERFILE.read_text(), re.MULTILINE).group(1))
    port = free_port()
    cmd[cmd.index("--port") + 1] = str(port)
    cmd[cmd.index("--host") + 1] = "127.0.0.1"
    workspace = yaml.safe_load((REPO / "deployment" / "workspace.yaml").read_text())
    workspace["load_from"][0]["grpc_server"] |= {"host": "127.0.0.1", "port": port}
    local_workspace = tmp_path / "workspace.yaml"
    local_workspace.write_text(yaml.safe_dump(workspace))
    env = isolated_env(tmp_path)
    # Create the instance's storage once: the server and a validate call creating the SQLite schemas at the same
    # moment both stamp alembic ("more than one head present"), as a loaded CI host showed.
    subprocess.run([str(BIN / "dagster"), "instance", "migrate"], env=env, capture_output=True, check=True, timeout=120)
    server = start(cmd, env | {"PYTHONWARNINGS": "ignore"})
    try:
        deadline = time.monotonic() + 120
        while True:  # the server answers once it has loaded the definitions
            done = validate(local_workspace, env)
            if done.returncode == 0 or time.monotonic() > deadline or server.poll() is not None:
                break
            time.sleep(2)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    finally:
        kill_group(server)
