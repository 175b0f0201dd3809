"""`etr run DAY` / `etr run FIRST..LAST`: which instance it uses and which jobs it runs (plain: no Dagster, no JVM)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from etr_assets.errors import EtrError
from etr_assets.run_request import dagster_home, run, runnable_jobs


def test_the_instance_is_dagster_home_else_the_one_dev_prepares_under_etr_home(tmp_path):
    assert dagster_home(tmp_path, {"DAGSTER_HOME": "/srv/dagster"}) == Path("/srv/dagster")
    with pytest.raises(EtrError) as raised:  # one line from `etr`: where it looked, and what to do
        dagster_home(tmp_path, {})
    assert str(raised.value).startswith(f"DAGSTER_HOME is not set and {tmp_path / 'dagster'} has no dagster.yaml")
    (tmp_path / "dagster").mkdir()
    (tmp_path / "dagster" / "dagster.yaml").write_text("")
    assert dagster_home(tmp_path, {"DAGSTER_HOME": " "}) == tmp_path / "dagster"


def test_etr_run_runs_etr_pipeline_or_a_declared_sources_job_and_names_them_for_anything_else(tmp_path, capsys):
    assert runnable_jobs()[0] == "etr_pipeline" and {"bnpl_ingest", "stores_ingest"} <= set(runnable_jobs())
    assert run("2025-01-02", dt.date(2025, 1, 1), tmp_path, job="stores") == 2  # no run made
    said = capsys.readouterr().err.strip()
    assert said == f"etr run: no job 'stores' to run: give one of {', '.join(runnable_jobs())}"
