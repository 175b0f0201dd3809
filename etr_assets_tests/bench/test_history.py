"""bench/history.py: every layer timed over time and at volume (a tiny size), and its paired ratios."""

from __future__ import annotations

import json

import pytest

from bench.__main__ import run_benchmark


@pytest.mark.slow  # a whole-pipeline run: CI and ./dev test, not the fast tier
def test_history_times_every_layer_over_time_and_at_volume(spark, tmp_path, monkeypatch):
    from bench import history

    monkeypatch.setattr(history, "WARM_UP", False)  # the test session is warm: figures, not speed
    monkeypatch.setattr(history, "FULL_GC", False)  # a full GC before each of 50 layers: 11 of 100 CPU s
    per_day, volume = 30, 300
    options = {"days": [3], "per_day": per_day, "volume": volume}
    run_benchmark("history", 1.0, 1, tmp_path, "python -m bench history --days 3", options=options)
    result = json.loads((tmp_path / "history.json").read_text())
    assert (tmp_path / "history.md").read_text().startswith(f"# {result['title']}")
    assert result["data"]["commit"] and result["data"]["date"] and len(result["machine"]["load_average_end"]) == 3
    assert result["ratios"] and all(v is not None for v in result["ratios"].values()), result["ratios"]
    by_title = {table["title"].split(",")[0].split(" (")[0]: table["rows"] for table in result["tables"]}

    # Day 4 after 3 days against day 1, every layer timed in both, with a verdict.
    compared = by_title["Day N+1 against day 1"]
    assert [r["layer"] for r in compared] == list(history.LAYERS)
    assert all(r["day 1 (s)"] > 0 and r["day 4 (s)"] > 0 and r["x after 3"] is not None for r in compared)
    assert {r["verdict (paired median <= 1.2x after 3)"] for r in compared} <= {"met", "MISSED"}
    timed = by_title["Every timed day"]
    assert [(r["stage"], r["layer"]) for r in timed] == [
        (stage, layer) for stage in ("day 1", "after 3 days", "day 1") for layer in history.LAYERS
    ]  # day 4 is followed by day 1 on a fresh lake, timed beside it
    assert all(r["peak_rss_mib"] > 0 for r in timed)
    silver = [r for r in timed if r["layer"] == "silver/bnpl_transactions_clean"]
    assert [r["rows_written"] for r in silver] == [per_day] * 3
    assert [r["table_rows"] for r in silver] == [per_day, 4 * per_day, per_day]  # days 2 and 3 seeded in between
    seeded = [r for r in by_title["The warm-up and the seeded history"] if r["stage"] == "seed to 3 days"]
    assert [r["layer"] for r in seeded] == list(history.LAYERS) and seeded[0]["days"].endswith("(2)")

    # The big day: every layer against a floor measured in the same run, then the whole day.
    big = by_title[f"One day of {volume} transactions"]
    assert [r["layer"] for r in big[:-1]] == list(history.LAYERS) and big[-1]["layer"].startswith("whole day")
    assert all(r["seconds"] > 0 and r["x floor"] is not None for r in big)
    assert big[-1]["seconds"] == pytest.approx(sum(r["seconds"] for r in big[:-1]), abs=0.01)
    (floor,) = by_title["The floor: the day's raw JSON read with bronze's types"]
    assert floor["seconds"] > 0 and floor["files"] >= 1


def test_a_day_after_the_history_is_compared_with_the_day_1_timed_right_after_it():
    from bench import history

    def run(stage: str, seconds: float, layer: str = "silver") -> dict:
        return {"stage": stage, "layer": layer, "seconds": seconds}

    # The machine slows down between the two pairs: each pair alone says 1.1x, the best of each side says 2.2x.
    timed = [
        run("day 1", 1.0),
        run("after 30 days", 1.1),
        run("day 1", 1.0),
        run("day 1", 9.0, layer="gold"),
        run("after 365 days", 2.2),
        run("day 1", 2.0),
        run("after 365 days", 4.4),
        run("day 1", 4.0),
    ]
    assert history.paired_ratios(timed, "silver", 365) == [1.1, 1.1]
    assert history.paired_ratios(timed, "silver", 30) == [1.1]
    assert history.paired_ratios(timed, "gold", 365) == []
