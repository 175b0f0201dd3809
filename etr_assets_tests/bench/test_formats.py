"""bench/formats.py at a tiny size: its scan counters, the updates compared, and the verdicts."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # whole-pipeline runs: CI and ./dev test, not the fast tier


def test_formats_reads_scan_counters_and_compares_updates(run):
    from bench import formats
    from etr_assets.lake.health import TableHealth
    from etr_assets.lake.quality import Severity

    # Sized by days and rows a day, as the record runs at 7 days of 1,000,000; one run of each operation (no figure
    # checked here needs a second: the best of runs is a min, read in turns with itself).
    result = run("formats", options={"days": [2], "per_day": 1000})
    assert (result["data"]["rows"], result["data"]["days"], result["data"]["customers"]) == (2000, 2, 100)
    assert result["data"]["customer_days"] >= 1 and result["data"]["days_per_customer_average"] > 1
    charts = {
        c["file"] for c in result["charts"]
    }  # named by the size, beside the default run's (none without matplotlib)
    assert charts >= {"formats_2x1000.png", "formats_speedup_2x1000.png"} or "charts skipped" in result["notes"][-1]
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
