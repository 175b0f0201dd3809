"""`etr sql` on a table that does not exist answers from the catalog's metadata, without starting a JVM, and
suggests the nearest names; long queries come from a file or standard input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from etr_assets_tests.test_cli_subprocess import isolated_env

ETR = str(Path(sys.executable).parent / "etr")
# Runs the CLI, then fails unless pyspark was never imported (no JVM can have started).
NO_JVM = (
    "import sys; from etr_assets.cli import main; code = main(sys.argv[1:]); "
    "assert 'pyspark' not in sys.modules; sys.exit(code)"
)


def lake_with_one_table(tmp_path: Path) -> dict[str, str]:
    env = isolated_env(tmp_path)
    (Path(env["ETR_HOME"]) / "warehouse" / "silver" / "bnpl_transactions_clean" / "metadata").mkdir(parents=True)
    return env


def test_a_misspelt_table_fails_at_once_naming_it_and_the_nearest_table(tmp_path):
    env = lake_with_one_table(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", NO_JVM, "sql", "SELECT * FROM etr.silver.bnpl_transactions_clen LIMIT 5"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and done.stdout == "", done.stderr  # the assertion inside: no JVM was started
    assert done.stderr.splitlines() == [
        "etr sql: table silver.bnpl_transactions_clen does not exist in catalog etr; "
        "did you mean silver.bnpl_transactions_clean?"
    ]


def test_long_queries_come_from_a_file_or_standard_input(tmp_path):
    env = lake_with_one_table(tmp_path)
    query = tmp_path / "q.sql"
    query.write_text("SELECT *\nFROM gold.nowhere\nJOIN silver.bnpl_transactions_clean USING (x)\n")
    from_file = subprocess.run([ETR, "sql", "-f", str(query)], env=env, capture_output=True, text=True, timeout=60)
    from_stdin = subprocess.run(
        [ETR, "sql", "-"], input=query.read_text(), env=env, capture_output=True, text=True, timeout=60
    )
    for done in (from_file, from_stdin):
        assert done.returncode == 1
        assert done.stderr.splitlines() == [
            "etr sql: table gold.nowhere does not exist in catalog etr; `etr tables` lists the tables"
        ]
    neither = subprocess.run([ETR, "sql"], env=env, capture_output=True, text=True, timeout=60)
    assert neither.returncode == 1 and "give a query" in neither.stderr
