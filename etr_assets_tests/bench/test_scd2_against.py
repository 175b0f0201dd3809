"""bench/scd2_against.py: HEAD's SCD2 modules against this tree's, on the same states."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow  # whole-pipeline runs: CI and ./dev test, not the fast tier


def test_scd2_against_a_revision_runs_both_applies_on_the_same_states(spark, capsys, monkeypatch):
    """HEAD's SCD2 modules, loaded from git beside this tree's, apply the same two days to the same versions."""
    from bench import scd2_against

    monkeypatch.setattr(scd2_against, "WARM_UP", False)  # the test session is warm: figures, not speed
    scd2_against.main(["HEAD", "200", "1"])
    found = json.loads(capsys.readouterr().out)
    assert found["daily: same versions"] and found["late: same versions"], found
    runs = ("daily then", "daily now", "late then", "late now")
    assert set(found["best"]) == {*runs, *(f"{run} cpu" for run in runs)}, found  # the time and the JVM's CPU
    assert all(len(found["runs"][run]) == 1 for run in runs), found  # one counted round, none before it
    assert "change" in found["runs"]["late now reason"], found  # the late day changed keys, not nothing
