"""Smoke test of the benchmarks: each runs at a tiny scale in the test process's Spark session and writes a
result with its ratios and counters. Timings are never asserted: only that the figures exist and add up."""

from __future__ import annotations

import json

import pytest

from bench.__main__ import BENCHMARKS, run_benchmark

pytestmark = pytest.mark.slow  # whole-pipeline runs: CI and ./dev test, not the fast tier
TINY = 0.001


@pytest.fixture
def run(spark, tmp_path):
    def run_one(name: str, repeats: int = 1, options: dict | None = None) -> dict:
        scale = 1.0 if options else TINY
        run_benchmark(name, scale, repeats, tmp_path, f"python -m bench {name} --scale {scale}", options=options)
        result = json.loads((tmp_path / f"{name}.json").read_text())
        assert (tmp_path / f"{name}.md").read_text().startswith(f"# {result['title']}")
        assert result["machine"]["cores"] >= 1 and len(result["machine"]["load_average_end"]) == 3
        assert result["ratios"] and all(v is not None for v in result["ratios"].values()), result["ratios"]
        return result

    return run_one


def test_every_benchmark_is_listed():
    assert set(BENCHMARKS) == {"formats", "scd2", "small_files", "health", "orchestration", "history"}


def test_formats_reads_scan_counters_and_compares_updates(run):
    from bench import formats
    from etr_assets.lake.health import TableHealth
    from etr_assets.lake.quality import Severity

    # Sized by days and rows a day, as the record runs at 7 days of 1,000,000 (every repeat must find the same
    # rows to change).
    result = run("formats", repeats=2, options={"days": [4], "per_day": 1000})
    assert (result["data"]["rows"], result["data"]["days"], result["data"]["customers"]) == (4000, 4, 200)
    assert result["data"]["customer_days"] >= 1 and result["data"]["days_per_customer_average"] > 1
    charts = {
        c["file"] for c in result["charts"]
    }  # named by the size, beside the default run's (none without matplotlib)
    assert charts >= {"formats_4x1000.png", "formats_speedup_4x1000.png"} or "charts skipped" in result["notes"][-1]
    reads = {(r["operation"], r["dataset"]): r for r in result["tables"][0]["rows"]}
    days = result["data"]["days"]
    assert reads[("full scan (13 columns)", "Parquet")]["files_read"] == days
    assert reads[("full scan (13 columns)", "Iceberg silver")]["files_read"] == days
    one_day = reads[("one day", "Iceberg silver")]
    assert one_day["files_read"] == 1 and one_day["files_skipped"] == days - 1  # pruned by Iceberg's metadata
    assert reads[("one day", "Parquet")]["files_read"] == 1  # pruned by the folder names
    customer_rows = result["data"]["customer_rows"]
    assert {r["rows"] for (op, _), r in reads.items() if op == "one customer"} == {customer_rows}
    assert reads[("one customer", "Iceberg days+bucket16")]["files_skipped"] > 0  # bucket pruning
    dml = {(r["operation"], r["method"]): r for r in result["tables"][1]["rows"]}
    # The silver spec as the local profile creates it (v3, merge-on-read) is the default; both write modes on both
    # format versions beside it, each named by the version its table really has.
    assert (result["data"]["silver_spec_format_version"], result["data"]["silver_spec_write_mode"]) == (
        3,
        "merge-on-read",
    )
    assert {m for op, m in dml if op == "delete one customer"} == {
        "Parquet: rewrite affected partitions",
        "Iceberg v2 copy-on-write",
        "Iceberg v2 merge-on-read (position deletes)",
        "Iceberg v3 copy-on-write",
        "Iceberg v3 merge-on-read (deletion vectors): silver spec, the default",
    }
    for version in (
        "v2 merge-on-read (position deletes)",
        "v3 merge-on-read (deletion vectors): silver spec, the default",
    ):
        mor = dml[("delete one customer", f"Iceberg {version}")]
        assert mor["delete_files_written"] >= 1 and mor["files_rewritten"] == 0 and mor["full_scan_after_s"] > 0
    rewrites = [r for (op, method), r in dml.items() if method.startswith("Parquet")]
    assert rewrites and all(r["files_rewritten"] >= 1 for r in rewrites)
    cow = dml[("delete one customer", "Iceberg v3 copy-on-write")]
    assert cow["delete_files_written"] == 0 and cow["files_rewritten"] >= 1
    # Each target judged on the default and on the best variant (the verdicts, not the timings, are checked).
    verdicts = {r["target"].rsplit(":", 1)[0]: r for r in result["tables"][3]["rows"]}
    assert set(verdicts) == {
        *formats.TARGETS,
        "full scan",
        "full scan after a merge-on-read 1% update and the health-triggered maintenance / clean",
    }
    assert all(r["verdict, default"] in {"met", "MISSED"} for r in verdicts.values())
    assert verdicts["delete one customer"]["wanted"] == ">= 10x"
    # What a layout costs the daily write: one day replaced whole, in each write mode (an overwrite of whole files).
    daily = result["tables"][4]["rows"]
    assert [r["layout"] for r in daily] == [
        "Iceberg silver spec (merge-on-read: its own)",
        "Iceberg silver spec in copy-on-write",
        "Iceberg + bloom (sized for the day)",  # 1,000 rows a day: a smaller filter than the spec's 10,000 ids
    ]
    assert all(r["rows"] == 1000 and r["files_rewritten"] == 1 and r["delete_files_written"] == 0 for r in daily)
    assert verdicts["delete one customer"]["best"] == max(
        r["speedup_vs_parquet"]
        for (op, m), r in dml.items()
        if op == "delete one customer" and r.get("speedup_vs_parquet")
    )

    # Health, then the maintenance its sensor would launch, after a merge-on-read 1% update: at this size the few
    # deletion vectors stay under the WARN limit, so the sensor would not act (maintenance runs regardless).
    updated, maintained = result["tables"][2]["rows"]
    assert updated["delete_files"] >= 1
    assert (updated["health"], updated["needs_maintenance"], updated["reasons"]) == ("OK", "no", "none")
    assert any("so the sensor would NOT launch table_maintenance" in note for note in result["notes"])
    # A WARN table is one the sensor acts on, and the row says so.
    warned = formats._health_figures(TableHealth("t", exists=True, status=Severity.WARN, reasons=("manifests",)))
    assert (warned["health"], warned["needs_maintenance"], warned["reasons"]) == ("WARN", "yes", "manifests")
    assert maintained["delete_files_removed"] >= updated["delete_files"] and maintained["files_rewritten"] >= 1
    assert maintained["delete_files"] == 0 and "delete files" not in maintained["reasons"]
    assert maintained["full_scan_delete_files_read"] == 0
    assert maintained["rows"] == updated["rows"] == maintained["full_scan_rows"] == result["data"]["rows"]
    assert "full scan after a 1% update, Iceberg v2 merge-on-read (position deletes) / before" in result["ratios"]
    # The maintained table is read in turns with itself as it was before the update (by time travel).
    assert len(maintained["full_scan_all_runs_s"]) == len(maintained["clean_full_scan_all_runs_s"]) >= 1
    assert maintained["clean_full_scan_s"] == min(maintained["clean_full_scan_all_runs_s"]) > 0
    label = "full scan after a merge-on-read 1% update + health-triggered maintenance / before, read in turns"
    assert result["ratios"][f"{label} (target: <= 1.2)"] == formats.ratio(
        maintained["full_scan_s"], maintained["clean_full_scan_s"]
    )
    assert any(note.startswith("Health after the merge-on-read 1% update") for note in result["notes"])


def test_scd2_counts_changes_and_replays_commit_nothing(run, monkeypatch):
    from bench import scd2

    # One share at two sizes: every method and the replay at the first; the second is over FULL_RUN_MAX_KEYS, so only
    # the floor, the seed and the daily path run there (checked against the seed's versions), and both are judged.
    monkeypatch.setattr(scd2, "SHARES", (10,))
    monkeypatch.setattr(scd2, "TARGETS", {10: 2.0})
    monkeypatch.setattr(scd2, "FLOOR_SHARE", 10)
    monkeypatch.setattr(scd2, "FULL_RUN_MAX_KEYS", 100)
    monkeypatch.setattr(scd2, "TARGET_FROM_KEYS", 1)
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


def test_small_files_maintenance_leaves_fewer_manifests_and_snapshots(run):
    before, after = run("small_files")["tables"][0]["rows"]
    assert after["snapshots"] < before["snapshots"] and after["manifests"] <= before["manifests"]
    assert after["rows"] == before["rows"]


def test_health_agrees_with_spark_as_the_table_grows(run):
    points = run("health")["tables"][0]["rows"]
    assert [p["growing"] for p in points] == ["rows"] * 3 + ["snapshots"] * 2
    assert points[-1]["snapshots"] > points[0]["snapshots"] and points[2]["rows"] > points[0]["rows"]


def test_orchestration_runs_both_paths(run, monkeypatch):
    from bench import orchestration

    monkeypatch.setattr(orchestration, "WARM_UP_ROUNDS", 0)  # one counted round of each path: figures, not speed
    result = run("orchestration")
    paths = {r["path"] for r in result["tables"][0]["rows"] if r["counted"]}
    assert paths == {"Dagster materialize", "library calls"}


def test_keys_sets_the_scd2_sizes_and_is_refused_elsewhere(tmp_path, monkeypatch):
    from bench import __main__ as bench_main
    from bench import scd2

    seen = {}
    monkeypatch.setattr(scd2, "run", lambda lake, scale, repeats, sizes=None: seen.update(sizes=sizes) or {})
    monkeypatch.setattr(bench_main, "open_lake", lambda name: __import__("contextlib").nullcontext(None))
    monkeypatch.setattr("bench.report.write", lambda result, out: [])
    bench_main.main(["scd2", "--keys", "3000000,200", "--out", str(tmp_path)])
    assert seen["sizes"] == [3_000_000, 200]
    with pytest.raises(SystemExit, match="--keys sets the scd2 benchmark's table sizes"):
        bench_main.main(["formats", "--keys", "3000000"])
    with pytest.raises(SystemExit, match="each >= 100"):
        bench_main.main(["scd2", "--keys", "50"])


def test_history_times_every_layer_over_time_and_at_volume(spark, tmp_path, monkeypatch):
    from bench import history

    monkeypatch.setattr(history, "WARM_UP", False)  # the test session is warm: figures, not speed
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


def test_size_options_go_to_the_benchmarks_that_take_them(tmp_path, monkeypatch):
    from bench import __main__ as bench_main
    from bench import data, formats

    seen = {}
    monkeypatch.setattr(formats, "run", lambda lake, scale, repeats, **sizes: seen.update(sizes) or {})
    monkeypatch.setattr(bench_main, "open_lake", lambda name: __import__("contextlib").nullcontext(None))
    monkeypatch.setattr("bench.report.write", lambda result, out: [])
    bench_main.main(["formats", "--days", "7", "--per-day", "1000000", "--out", str(tmp_path)])
    assert seen == {"days": 7, "per_day": 1_000_000}
    assert data.sizes(1.0, 7, 1_000_000) == {"rows": 7_000_000, "days": 7, "customers": 350_000}
    assert data.sizes(1.0) == data.sizes(1.0, 365, 10_000)  # the default run: 10,000 rows a day for a year
    with pytest.raises(SystemExit, match="--volume: an option of history only, not formats"):
        bench_main.main(["formats", "--volume", "1000", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="formats takes one --days value"):
        bench_main.main(["formats", "--days", "7,30", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="formats takes --scale or --days/--per-day, not both"):
        bench_main.main(["formats", "--per-day", "1000", "--scale", "2", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="--days, --per-day: an option of history and formats only, not scd2"):
        bench_main.main(["scd2", "--days", "7", "--per-day", "10", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="--volume is 0..999999"):
        bench_main.main(["history", "--volume", "1000000", "--out", str(tmp_path)])


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


def test_scd2_against_a_revision_runs_both_applies_on_the_same_states(spark, capsys):
    """HEAD's SCD2 modules, loaded from git beside this tree's, apply the same two days to the same versions."""
    from bench import scd2_against

    scd2_against.main(["HEAD", "200", "1"])
    found = json.loads(capsys.readouterr().out)
    assert found["daily: same versions"] and found["late: same versions"], found
    assert set(found["best"]) == {"daily then", "daily now", "late then", "late now"}, found
    assert "change" in found["runs"]["late now reason"], found  # the late day changed keys, not nothing


def test_silver_layout_times_each_layout_on_every_operation(spark):
    """Each layout is a table of its own, ordered and grouped as named, and timed on every operation beside the
    Parquet rewrites."""
    from bench import silver_layout

    found = silver_layout.main(2, 2_000, 1)
    layouts = found["layouts"]
    assert layouts["the spec's"] == {
        "sort-order": "transaction_date ASC NULLS FIRST, status ASC NULLS FIRST, customer_id ASC NULLS FIRST",
        "write.parquet.row-group-size-bytes": str(8 * 1024 * 1024),
    }
    before = layouts["by customer, 128 MiB row groups (silver before)"]
    assert before["sort-order"] == "transaction_date ASC NULLS FIRST, customer_id ASC NULLS FIRST", before
    operations = {
        "one day's PENDING update",
        "delete one customer",
        "scattered 1% update",
        "daily write (replace_days)",
        "full scan",
    }
    timed = {f"{name}: {operation}" for name in silver_layout.LAYOUTS for operation in operations}
    rewrites = {"Parquet rewrite: one day's PENDING update", "Parquet rewrite: delete one customer"}
    assert set(found["seconds"]) == timed | rewrites and min(found["seconds"].values()) > 0, found
    assert all(r > 0 for r in found["parquet_rewrite_over_iceberg"].values()), found


def test_the_declared_sources_benchmarks_run_small_and_report_their_figures():
    """bench.fetch, bench.definitions_load and bench.propagation at a tiny size (figures: docs/benchmarks.md)."""
    from bench import definitions_load, fetch, propagation

    loads = definitions_load.main(endpoints=4, rounds=1)
    assert loads["assets"]["declared"] > loads["assets"]["shipped"] and loads["ratio_declared_to_shipped"]
    view = propagation.main(days=12, rounds=1)
    assert view["days_flagged"] == 1 + 12 + 12 and view["median_rules_seconds"] >= 0
    fetched = fetch.compare(transactions=300, rounds=1, revision=fetch.last_api_client_revision())
    assert fetched["same bytes stored"] and fetched["now / then (best)"] and fetched["records"] >= 300


def test_propagation_latency_times_a_correction_through_the_daemon():
    """bench.propagation_latency on 2 days of 20 transactions: a real daemon, its sensor's runs, the figure's split
    (about 4 minutes: four runs of a JVM each, and the sensor ticks each minute; no wait for a tick after the last)."""
    from bench import propagation_latency

    found = propagation_latency.main(days=2, per_day=20, timeout=900, confirm=False)
    assert found["build"]["status"] == found["correction"]["status"] == "SUCCESS", found
    assert not found["timed_out"] and not found["out_of_date_at_the_end"], found
    jobs = [r["job"] for r in found["runs"]]
    assert "flag_out_of_date" in jobs and jobs.count("rederive_gold") >= 2, found["runs"]
    assert all(r["status"] == "SUCCESS" for r in found["runs"] if r["job"] == "rederive_gold"), found["runs"]
    assert {r["propagates"] for r in found["runs"] if r["job"] == "rederive_gold"} >= {
        "gold/bnpl_daily_summary 2025-01-01...2025-01-01",
        "gold/customer_activity, gold/customer_profiles 2025-01-01...2025-01-02",
    }
    split = found["split"]
    assert found["latency_seconds"] > 0 and all(v is not None for v in split.values()), split
    assert sum(split.values()) == pytest.approx(found["latency_seconds"], abs=0.5)
    assert len(found["load_average"]["end"]) == 3
