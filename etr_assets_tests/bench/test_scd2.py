"""bench/scd2.py at a tiny size: changes counted, replays committing nothing, every size judged."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # whole-pipeline runs: CI and ./dev test, not the fast tier


def test_scd2_counts_changes_and_replays_commit_nothing(run, monkeypatch):
    from bench import scd2, scd2_late

    # One share at two sizes: every method and the replay at the first; the second is over FULL_RUN_MAX_KEYS, so only
    # the floor, the seed and the daily path run there (checked against the seed's versions), and both are judged.
    monkeypatch.setattr(scd2, "SHARES", (10,))
    monkeypatch.setattr(scd2, "TARGETS", {10: 2.0})
    monkeypatch.setattr(scd2, "FLOOR_SHARE", 10)
    monkeypatch.setattr(scd2, "FULL_RUN_MAX_KEYS", 100)
    monkeypatch.setattr(scd2, "TARGET_FROM_KEYS", 1)
    monkeypatch.setattr(scd2, "WARM_UP", False)  # no untimed daily apply first: the test session is warm, figures only
    # The late day against the daily apply (its own tables, at the larger size): a short and a longer history, each
    # day applied once, with no untimed late day first (at --repeats 2 and 30 days it was half of this test's CPU): the
    # daily apply that makes the late day's starting state is the daily path's counted run.
    monkeypatch.setattr(scd2, "LATE_REPEATS", 1)
    monkeypatch.setattr(scd2_late, "WARM_UP", False)
    monkeypatch.setattr(scd2_late, "LATE_HISTORY_DAYS", (2, 3))
    monkeypatch.setattr(scd2, "LATE_HISTORY_DAYS", (2, 3))
    result = run("scd2", repeats=2)  # the compared methods twice: each run from batch 0's state
    tables = {t["title"]: t["rows"] for t in result["tables"]}
    rows = tables["SCD2 apply of batch 1, and its replay"]
    small, large = sorted({r["keys"] for r in rows})
    ours = [r for r in rows if r["method"] == "ours: one MERGE"]
    assert [r["keys"] for r in ours if r["seconds"]] == [small]
    assert all(r["replay_commits"] == 0 and r["changed_keys"] > 0 for r in ours if r["keys"] == small)
    # The bench itself fails unless the daily path was taken and gave the recompute's (and the seed's) versions.
    daily = [r for r in rows if r["method"] == "ours: current rows (daily path)"]
    assert len(daily) == 2 and all(r["seconds"] > 0 for r in daily)
    assert [r["replay_commits"] for r in daily] == [0, None]  # no replay above FULL_RUN_MAX_KEYS
    assert all(r["commits"] == 2 for r in daily)  # the closes and the new versions, published by one fast-forward
    assert all(len(r["all_runs_s"]) == 2 for r in daily)  # the second run applied the batch again
    # A day older than the newest takes the general path (the bench fails if it took the daily one).
    late = [r for r in rows if r["method"].startswith("ours: late day")]
    assert len(late) == 1 and late[0]["commits"] == 1 and late[0]["keys"] == small, late
    seed = [r for r in rows if r["method"].startswith("seed")]
    assert all(r["commits"] >= 1 for r in seed)
    assert len(seed[0]["all_runs_s"]) == 2
    judged = tables["Against the targets (from 1 keys up)"]
    assert [(r["keys"], r["wanted"]) for r in judged] == [(k, w) for k in (small, large) for w in (">= 2x", "<= 2.5x")]
    assert all(r["verdict"] in ("met", "MISSED") and r["measured"] > 0 for r in judged)
    # Beside each best-of ratio the verdicts take, the ratio of the sides' median runs (the floor runs once).
    assert [r["medians of the runs"] is None for r in judged] == [False, True, False, True]
    assert all(r["medians of the runs"] > 0 for r in judged if r["wanted"].startswith(">="))
    assert [r["keys"] for r in tables["Peak memory of the JVM, per size (driver and executors: local mode)"]] == [
        small,
        large,
    ]
    # The late day against the daily apply, at the larger size: each history's day taken by the daily path, then the
    # day before it through the window (the bench fails if either took another path), each run once.
    late = tables["A late day against the daily apply of a day of the same size"]
    assert [(r["keys"], r["history_days"], r["path"]) for r in late] == [
        (large, days, path) for days in (2, 3) for path in ("current-rows", "window")
    ]
    assert all(len(r["all_runs_s"]) == 1 and r["seconds"] > 0 for r in late)
