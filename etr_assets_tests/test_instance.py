"""`etr prepare-instance`: the one command that makes a Dagster instance ready (what ./dev runs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from etr_assets_tests.test_cli_subprocess import isolated_env

ETR = str(Path(sys.executable).parent / "etr")


@pytest.mark.slow
def test_prepare_instance_writes_the_config_migrates_and_creates_every_pool_once(tmp_path):
    from dagster import DagsterInstance

    from etr_assets.definitions import defs
    from etr_assets.instance import LAPTOP_CONFIG, pool_names

    env = isolated_env(tmp_path)
    home = Path(env["DAGSTER_HOME"])
    (home / "dagster.yaml").unlink()  # a new instance folder

    first = subprocess.run([ETR, "prepare-instance"], env=env, capture_output=True, text=True, timeout=180)
    assert first.returncode == 0, first.stderr
    assert (home / "dagster.yaml").read_text() == LAPTOP_CONFIG.read_text()
    assert f"created {len(pool_names(defs))} pool(s)" in first.stdout

    (home / "dagster.yaml").write_text(LAPTOP_CONFIG.read_text() + "# edited by the user\n")
    again = subprocess.run([ETR, "prepare-instance"], env=env, capture_output=True, text=True, timeout=180)
    assert again.returncode == 0 and "pool(s)" not in again.stdout and "wrote" not in again.stdout
    assert (home / "dagster.yaml").read_text().endswith("# edited by the user\n")  # a user's config is kept
    instance = DagsterInstance.from_config(str(home))
    assert {p.name for p in instance.event_log_storage.get_pool_limits()} == set(pool_names(defs))
    assert all(p.limit == 1 for p in instance.event_log_storage.get_pool_limits())
