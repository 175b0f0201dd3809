"""bench/small_files.py at a tiny size."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # whole-pipeline runs: CI and ./dev test, not the fast tier


def test_small_files_maintenance_leaves_fewer_manifests_and_snapshots(run):
    before, after = run("small_files")["tables"][0]["rows"]
    assert after["snapshots"] < before["snapshots"] and after["manifests"] <= before["manifests"]
    assert after["rows"] == before["rows"]
