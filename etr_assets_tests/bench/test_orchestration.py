"""bench/orchestration.py at a tiny size: both paths run."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # whole-pipeline runs: CI and ./dev test, not the fast tier


def test_orchestration_runs_both_paths(run, monkeypatch):
    from bench import orchestration

    monkeypatch.setattr(orchestration, "WARM_UP_ROUNDS", 0)  # one counted round of each path: figures, not speed
    result = run("orchestration")
    paths = {r["path"] for r in result["tables"][0]["rows"] if r["counted"]}
    assert paths == {"Dagster materialize", "library calls"}
