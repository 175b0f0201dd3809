"""`etr tables` reads every table of the catalog without a JVM: spec tables, tables someone else made, and damaged
ones, each on its own line (one damaged table never hides the others)."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from urllib.parse import urlparse

from etr_assets.cli import main
from etr_assets.lake.evolve import ensure_table
from etr_assets.lake.metadata import load_table
from etr_assets.tables.entities import LANDING_CUSTOMERS
from etr_assets.tables.feeds import QUARANTINE_TRANSACTIONS, SILVER_QUARANTINE_TRANSACTIONS
from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, SILVER_TRANSACTIONS


def metadata_folder(settings, namespace: str, name: str) -> Path:
    return Path(urlparse(settings.warehouse).path) / namespace / name / "metadata"


def listing(monkeypatch, capsys, settings) -> tuple[int, dict[str, dict], str]:
    monkeypatch.setenv("ETR_HOME", str(settings.home))
    monkeypatch.setenv("ETR_CATALOG", settings.catalog)
    code = main(["tables", "--json"])
    out, err = capsys.readouterr()
    return code, {row["table"]: row for row in map(json.loads, out.splitlines())}, err


def test_every_table_is_listed_and_a_damaged_one_is_named_in_one_line(lake, settings, monkeypatch, capsys):
    catalog = settings.catalog
    for spec in (BRONZE_TRANSACTIONS, SILVER_TRANSACTIONS, LANDING_CUSTOMERS):
        ensure_table(lake, catalog, spec)
    lake.sql(f"CREATE TABLE {catalog}.silver.analyst_copy USING iceberg AS SELECT 1 AS customer_id, 'a@b.c' AS email")

    code, tables, err = listing(monkeypatch, capsys, settings)
    assert code == 0 and err == ""
    copy = tables["silver.analyst_copy"]
    assert copy["exists"] and not copy["has_spec"] and copy["rows"] == 1, copy
    # Every byte under the table's folder, against the current snapshot's data files: metadata included.
    folder = metadata_folder(settings, "silver", "analyst_copy").parent
    on_disk = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    assert copy["stored_bytes"] == on_disk and copy["amplification"] == round(on_disk / copy["bytes"], 3), copy
    assert tables[SILVER_TRANSACTIONS.identifier]["exists"] and tables[SILVER_TRANSACTIONS.identifier]["has_spec"]
    assert tables["audit.gdpr_actions"]["exists"] is False  # declared, never created
    assert main(["tables"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    # Created but never written: no snapshot, so no write to show, only when it was made.
    assert "never written, made " in lines[BRONZE_TRANSACTIONS.identifier], lines
    assert "never written" not in lines["silver.analyst_copy"], lines
    assert f"({copy['amplification']:.2f}x)" in lines["silver.analyst_copy"], lines

    # Truncate silver's current metadata.json; delete the file landing's version hint names.
    silver = metadata_folder(settings, "silver", SILVER_TRANSACTIONS.name)
    current = silver / f"v{(silver / 'version-hint.text').read_text().strip()}.metadata.json"
    current.write_bytes(current.read_bytes()[:40])
    landing = metadata_folder(settings, "landing", LANDING_CUSTOMERS.name)
    (landing / f"v{(landing / 'version-hint.text').read_text().strip()}.metadata.json").unlink()

    code, tables, err = listing(monkeypatch, capsys, settings)
    assert code == 1
    broken = tables[SILVER_TRANSACTIONS.identifier]
    assert broken["problem"].startswith("metadata unreadable: ") and str(current) in broken["problem"], broken
    missing = tables[LANDING_CUSTOMERS.identifier]
    assert missing["exists"] is True and missing["problem"].startswith("metadata file missing: "), missing
    # The other tables are still read, and each damaged one is one line on stderr.
    assert tables[BRONZE_TRANSACTIONS.identifier]["exists"] and not tables[BRONZE_TRANSACTIONS.identifier]["problem"]
    assert tables["silver.analyst_copy"]["rows"] == 1
    lines = err.splitlines()
    assert len(lines) == 2 and all(line.startswith("etr tables: ") for line in lines), err
    assert "Traceback" not in err

    # The text listing says the same without a traceback.
    monkeypatch.setenv("ETR_HOME", str(settings.home))
    assert main(["tables"]) == 1
    out, _ = capsys.readouterr()
    assert "silver.analyst_copy (no spec)" in out and "metadata unreadable" in out and "not created yet" in out


def test_a_quarantine_table_lists_the_records_it_holds_and_when_they_were_written(lake, settings, monkeypatch, capsys):
    """The last column is the last write, not the metadata's last change (snapshot expiry or an ALTER writes no
    row): for a quarantine table, when the records it holds were written; one never written says so."""
    catalog = settings.catalog
    for spec in (QUARANTINE_TRANSACTIONS, SILVER_QUARANTINE_TRANSACTIONS):
        ensure_table(lake, catalog, spec)
    held = QUARANTINE_TRANSACTIONS.qualified(catalog)
    lake.sql(
        f"INSERT INTO {held} VALUES ('b1', DATE'2025-01-02', 'f.jsonl', 3, '{{bad', 'not JSON', NULL, now()), "
        "('b1', DATE'2025-01-02', 'f.jsonl', 7, '{\"amount\": -1}', 'amount below 0', 100042, now())"
    )
    written = load_table(settings, QUARANTINE_TRANSACTIONS).current_snapshot().timestamp_ms / 1000
    time.sleep(1 - time.time() % 1)  # the listing shows seconds: the change below falls in a later one
    lake.sql(f"ALTER TABLE {held} SET TBLPROPERTIES ('comment' = 'reviewed')")  # metadata only, no row written

    code, tables, err = listing(monkeypatch, capsys, settings)
    assert code == 0 and err == ""
    quarantine = tables[QUARANTINE_TRANSACTIONS.identifier]
    last_write = dt.datetime.fromtimestamp(written, dt.UTC)
    assert (quarantine["rows"], quarantine["last_write"]) == (2, last_write.isoformat()), quarantine
    assert quarantine["last_updated"] > quarantine["last_write"]
    never = tables[SILVER_QUARANTINE_TRANSACTIONS.identifier]
    assert (never["rows"], never["snapshots"], never["last_write"]) == (0, 0, None), never

    assert main(["tables"]) == 0
    lines = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert lines["table"][-2:] == ["last", "write"]
    assert lines[QUARANTINE_TRANSACTIONS.identifier][1] == "2"
    assert lines[QUARANTINE_TRANSACTIONS.identifier][-2:] == f"{last_write:%Y-%m-%d %H:%M:%S}Z".split()
    assert lines[SILVER_QUARANTINE_TRANSACTIONS.identifier][-5:-2] == ["never", "written,", "made"]
