"""The lake end to end through its real command lines: the README's `dg launch` lines, then `etr sql` / `etr tables`.

One 2-day backfill (module fixture: the README's "run a range") feeds every assertion; each `etr sql` is a JVM
start (~15 s), so the layer counts come from a single UNION ALL query. Everything runs in subprocesses with ETR_HOME
and DAGSTER_HOME under pytest's tmp dir, never the user's ~/.etr or the repo's .etr.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from etr_assets.cli import SPARK_STARTING
from etr_assets_tests.conftest import SUITE_DRIVER_MEMORY

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DAYS = ("2025-01-01", "2025-01-02")  # a range of two days is a backfill as much as three
PER_DAY = 50  # ETR_API_TRANSACTIONS_PER_DAY: the synthetic API serves exactly this many distinct transactions
# The transaction lineage: gold's daily summary and everything upstream of it (raw -> bronze -> silver -> gold), for
# tests that need only those tables (this module's lake runs the README's whole etr_pipeline instead).
PIPELINE = "*gold/bnpl_daily_summary"
MATERIALIZE_TIMEOUT_S = 300
SQL_TIMEOUT_S = 180

# One JVM for all three layers. Per layer and day: n rows, distinct keys (transaction ids; currencies in gold),
# distinct currencies, and gold's sum(transactions).
COUNTS_SQL = """
SELECT 'bronze' AS layer, CAST(transaction_date AS STRING) AS day, count(*) AS n,
       count(DISTINCT transaction_id) AS keys, count(DISTINCT currency) AS currencies, CAST(NULL AS BIGINT) AS total
FROM bronze.bnpl_transactions_raw GROUP BY transaction_date
UNION ALL
SELECT 'silver', CAST(transaction_date AS STRING), count(*), count(DISTINCT transaction_id),
       count(DISTINCT currency), CAST(NULL AS BIGINT)
FROM silver.bnpl_transactions_clean GROUP BY transaction_date
UNION ALL
SELECT 'gold', CAST(transaction_date AS STRING), count(*), count(DISTINCT currency),
       count(DISTINCT currency), sum(transactions)
FROM gold.bnpl_daily_summary GROUP BY transaction_date
ORDER BY layer, day
"""


# --- helpers -----------------------------------------------------------------------------------------------


def isolated_env(root: Path, **extra: str) -> dict[str, str]:
    """The caller's environment without any ETR_* / DAGSTER_*, pointed at homes under `root`, with the suite's JVM
    settings (a 1 GB heap, one shuffle partition)."""
    etr_home, dagster_home = root / "etr", root / "dagster"
    dagster_home.mkdir(parents=True, exist_ok=True)
    if not (dagster_home / "dagster.yaml").exists():
        shutil.copy(REPO / "etr_assets" / "conf" / "dagster.yaml", dagster_home / "dagster.yaml")
    # No PYTHONWARNINGS either: `etr` must be quiet on its own (only dagster's own commands get "ignore").
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ETR_", "DAGSTER_")) and k != "PYTHONWARNINGS"}
    env |= {
        "ETR_HOME": str(etr_home),
        "DAGSTER_HOME": str(dagster_home),
        "ETR_SPARK_DRIVER_MEMORY": SUITE_DRIVER_MEMORY,
        "ETR_SPARK_SHUFFLE_PARTITIONS": "1",  # the suite's, as conftest.py sets for its other runs
        # The suite's lake: the shipped sources and the one its tests declare (conftest.py).
        "ETR_SOURCE_DIRS": os.environ.get("ETR_SOURCE_DIRS", ""),
    }
    return env | extra


def prepare_instance(env: dict[str, str]) -> None:
    """What `etr prepare-instance` does to env's DAGSTER_HOME (./dev runs it before the README's commands), done in
    this process: the tests are about the commands after it (test_instance.py runs the command itself), and its
    process cost about 4 CPU s of imports and definitions for a second of work."""
    from etr_assets.instance import prepare_instance as prepare

    previous = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = env["DAGSTER_HOME"]
    try:
        prepare()
    finally:
        if previous is None:
            del os.environ["DAGSTER_HOME"]
        else:
            os.environ["DAGSTER_HOME"] = previous


def tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class Done:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return (
            f"{' '.join(self.args)!r} exited {self.returncode}\n"
            f"--- stdout tail:\n{tail(self.stdout)}\n--- stderr tail:\n{tail(self.stderr)}"
        )


def start(args: list[str], env: dict[str, str], stderr: int = subprocess.PIPE) -> subprocess.Popen:
    """A command from the venv's bin, in its own process group (so a timeout can stop its JVM too); `stderr`:
    `subprocess.STDOUT` merges it into stdout, in the order a terminal shows them."""
    return subprocess.Popen(
        [str(BIN / args[0]), *args[1:]],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen, timeout: float) -> Done:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out, err = kill_group(proc)
        pytest.fail(f"{proc.args!r} still running after {timeout} s\n--- stderr tail:\n{tail(err)}")
    finally:
        if proc.poll() is None:
            kill_group(proc)
    return Done([Path(proc.args[0]).name, *proc.args[1:]], proc.returncode, out, err)


def kill_group(proc: subprocess.Popen) -> tuple[str, str]:
    """SIGINT the group we started, SIGKILL it after 20 s; return what it wrote."""
    pgid = proc.pid
    for sig, grace in ((signal.SIGINT, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        try:
            return proc.communicate(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
    return proc.communicate()


def run(args: list[str], env: dict[str, str], timeout: float = SQL_TIMEOUT_S) -> Done:
    return finish(start(args, env), timeout)


def materialize(env: dict[str, str], *partition_args: str) -> Done:
    """The transaction lineage (PIPELINE) through `dagster asset materialize` (the cluster test's runs)."""
    done = run(
        ["dagster", "asset", "materialize", "-m", "etr_assets.definitions", "--select", PIPELINE, *partition_args],
        env | {"PYTHONWARNINGS": "ignore"},
        MATERIALIZE_TIMEOUT_S,
    )
    assert done.returncode == 0, done.describe()
    return done


def readme_runs() -> dict[str, list[str]]:
    """The README's everyday command lines ("run one day", "run a range"), by the partition option they use."""
    block = (REPO / "README.md").read_text().split("## Everyday use", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = [shlex.split(line) for line in block.splitlines() if line.startswith("dg launch")]
    return {next(arg for arg in line if arg.startswith("--partition")): line for line in lines}


def run_readme_line(env: dict[str, str], option: str, value: str) -> Done:
    """The README's line with `option` (--partition or --partition-range), with the test's day(s) for its dates,
    in an activated virtual environment (as the README's `source .venv/bin/activate`); nothing silences warnings."""
    line = readme_runs()[option]
    line[line.index(option) + 1] = value
    venv = Path(sys.executable).parent
    activated = env | {"VIRTUAL_ENV": str(venv.parent), "PATH": f"{venv}{os.pathsep}{env.get('PATH', '')}"}
    done = run(line, activated, MATERIALIZE_TIMEOUT_S)
    assert done.returncode == 0, done.describe()
    warned = [text for text in done.stderr.splitlines() if "Warning" in text or "warning" in text.lower()]
    assert warned == [], f"the README's command printed warnings: {warned}"
    # Its log holds INFO lines and above (the shipped instance's python_log_level; it printed 149 DEBUG lines of
    # 167): a step's own lines, then the run's summary, last.
    lines = done.stderr.splitlines()
    assert [line for line in lines if " - DEBUG - " in line] == [], done.describe()
    assert re.search(r" - INFO - etr_pipeline - [0-9a-f-]{36} - run [0-9a-f]{8} of etr_pipeline for ", lines[-3])
    assert lines[-3].endswith(": every step succeeded") and lines[-1].startswith("  checks: "), done.describe()
    return done


def latest_metadata(env: dict[str, str], *asset_keys: str) -> list[dict]:
    """The metadata of each asset's latest materialization in the instance at env's DAGSTER_HOME."""
    from dagster import AssetKey, DagsterInstance

    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        events = [instance.get_latest_materialization_event(AssetKey.from_user_string(key)) for key in asset_keys]
    return [event.asset_materialization.metadata for event in events]


def json_lines(done: Done) -> list[dict]:
    assert done.returncode == 0, done.describe()
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def layer_counts(env: dict[str, str]) -> dict[str, dict[str, dict]]:
    """{layer: {day: row}} from one `etr sql --json` call."""
    done = run(["etr", "sql", "--json", "--limit", "0", COUNTS_SQL], env)
    rows = json_lines(done)  # stdout: the rows alone
    said = done.stderr.splitlines()
    assert said == [SPARK_STARTING], f"stderr should only say Spark is starting (quiet Spark)\n{done.describe()}"
    counts: dict[str, dict[str, dict]] = {}
    for row in rows:
        counts.setdefault(row["layer"], {})[row["day"]] = row
    return counts


def assert_no_java_stack(text: str) -> None:
    for line in text.splitlines():
        assert not line.startswith("\tat ") and "at org.apache" not in line, f"Java stack trace leaked:\n{text}"


def assert_one_error_line(done: Done, *needles: str) -> str:
    assert done.returncode != 0, done.describe()
    assert_no_java_stack(done.stderr)
    assert_no_java_stack(done.stdout)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, f"expected exactly one line on stderr\n{done.describe()}"
    assert any(n.lower() in lines[0].lower() for n in needles), f"{lines[0]!r} names none of {needles}"
    assert done.stdout == "", done.describe()
    return lines[0]


# --- fixtures ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lake_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A lake with the whole pipeline materialized for DAYS in one single-run backfill: the README's "run a range"."""
    env = isolated_env(tmp_path_factory.mktemp("lake"), ETR_API_TRANSACTIONS_PER_DAY=str(PER_DAY))
    prepare_instance(env)  # what ./dev does before the README's commands
    run_readme_line(env, "--partition-range", f"{DAYS[0]}...{DAYS[-1]}")
    return env


@pytest.fixture(scope="module")
def counts(lake_env: dict[str, str]) -> dict[str, dict[str, dict]]:
    return layer_counts(lake_env)


# --- tests -------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_backfill_fills_every_layer_for_every_day(counts: dict[str, dict[str, dict]]) -> None:
    assert set(counts) == {"bronze", "silver", "gold"}, counts
    for layer, by_day in counts.items():
        assert sorted(by_day) == list(DAYS), (layer, by_day)

    for day in DAYS:
        bronze, silver, gold = (counts[layer][day] for layer in ("bronze", "silver", "gold"))
        # Silver: exactly the API's transactions, one row each.
        assert silver["n"] == silver["keys"] == PER_DAY, silver
        # Bronze: every record as received (some arrive twice), covering the same transactions.
        assert bronze["keys"] == PER_DAY and PER_DAY <= bronze["n"] <= PER_DAY * 1.25, bronze
        # Gold: one row per (day, currency) that silver has, summing to silver's count.
        assert gold["n"] == gold["keys"] == silver["currencies"] >= 1, (gold, silver)
        assert gold["total"] == silver["n"], (gold, silver)


@pytest.mark.slow
def test_etr_tables_reads_the_same_lake_without_spark(
    lake_env: dict[str, str], counts: dict[str, dict[str, dict]]
) -> None:
    done = run(["etr", "tables", "--json"], lake_env, timeout=60)
    assert done.stderr == "", done.describe()
    tables = {row["table"]: row for row in json_lines(done)}
    expected_rows = {
        "bronze.bnpl_transactions_raw": sum(r["n"] for r in counts["bronze"].values()),
        "silver.bnpl_transactions_clean": sum(r["n"] for r in counts["silver"].values()),
        "gold.bnpl_daily_summary": sum(r["n"] for r in counts["gold"].values()),
    }
    for name, rows in expected_rows.items():
        table = tables.get(name)
        assert table is not None, tables
        assert table["exists"] is True and table["rows"] == rows > 0, table
        assert table["snapshots"] >= 1 and table["data_files"] >= 1 and table["bytes"] > 0, table
        assert table["current_snapshot_id"], table
        assert table["location"].endswith(name.replace(".", "/")), table
        assert table["location"].startswith(Path(lake_env["ETR_HOME"]).as_uri()), table

    audit = {name: t for name, t in tables.items() if name.startswith("audit.")}
    assert audit, tables
    for table in audit.values():  # no erasure or rollback ran: listed, not created
        assert table["exists"] is False and table["rows"] == 0 and table["snapshots"] == 0, table
    # The daily-growth check on silver ran with the backfill and recorded its figures.
    metrics = tables["monitoring.data_quality_metrics"]
    assert metrics["exists"] is True and metrics["rows"] >= 2, metrics


@pytest.mark.slow
def test_rerunning_a_day_replaces_it_without_duplicates(
    lake_env: dict[str, str], counts: dict[str, dict[str, dict]]
) -> None:
    before = {r["table"]: r for r in json_lines(run(["etr", "tables", "--json"], lake_env))}
    snapshots_before = {name: table["snapshots"] for name, table in before.items()}
    run_readme_line(lake_env, "--partition", DAYS[1])  # the README's "run one day"

    # The re-run committed: each table gained a snapshot, yet every table holds the rows it held (read with
    # pyiceberg through `etr tables`: no JVM; the in-process pipeline test checks the same per day).
    after = {r["table"]: r for r in json_lines(run(["etr", "tables", "--json"], lake_env))}
    for name in ("bronze.bnpl_transactions_raw", "silver.bnpl_transactions_clean", "gold.bnpl_daily_summary"):
        assert after[name]["snapshots"] == snapshots_before[name] + 1, (name, snapshots_before, after[name])
        layer = name.split(".")[0]
        assert after[name]["rows"] == sum(r["n"] for r in counts[layer].values()), after[name]
    # The day's customer list came again unchanged: its history commits nothing (a replay is not a change).
    for name in ("landing.customers", "landing.merchants"):
        assert after[name]["snapshots"] == snapshots_before[name], (name, snapshots_before[name], after[name])
    metrics = "monitoring.data_quality_metrics"  # the log of every check's measurement: the re-run's are added
    assert after[metrics]["rows"] > before[metrics]["rows"], (before[metrics], after[metrics])

    # What the run reported, as the UI shows it (read from the instance the command wrote to): silver replaced the
    # day's rows instead of appending them; the reload overwrote a bronze day, so landing's history went through the
    # window over that day (and came out unchanged), saying why.
    silver, landing = latest_metadata(lake_env, "silver/bnpl_transactions_clean", "landing/customers")
    assert silver["records_removed"].value == silver["rows_written"].value == PER_DAY, silver
    assert landing["history_method"].value == "window", landing
    assert "reloaded day" in landing["history_reason"].value and landing["versions_inserted"].value == 0

    # The run's summary: for its day, what each asset holds (a history: its current versions), here what the run
    # before left; written, what the run's commits added: each day table's day again, no history version.
    from dagster import DagsterInstance

    from etr_assets.defs.run_summary import summarize_run

    with DagsterInstance.from_config(lake_env["DAGSTER_HOME"]) as instance:
        summary = summarize_run(instance)
    held, written = dict(summary.rows_by_table), dict(summary.written_by_table)
    line = f"{sum(held.values()):,} row(s) for its days, {sum(written.values()):,} written by this run"
    assert line in summary.lines()[1], summary.lines()
    day_tables = {"bronze": "bronze/bnpl_transactions_raw", "silver": "silver/bnpl_transactions_clean"}
    for layer, table in {**day_tables, "gold": "gold/bnpl_daily_summary"}.items():
        assert held[table] == counts[layer][DAYS[1]]["n"], (table, held, counts[layer])
    histories = {"landing/customers": landing, "landing/merchants": latest_metadata(lake_env, "landing/merchants")[0]}
    for key, figures in histories.items():
        assert (held.pop(key), written.pop(key)) == (figures["current_rows"].value, 0), key
    assert written == held and len(held) == 10, (written, held)  # the other assets wrote their day whole again


@pytest.mark.slow
def test_errors_are_one_line_without_a_java_stack(tmp_path: Path) -> None:
    env = isolated_env(tmp_path)
    missing = start(["etr", "sql", "SELECT * FROM silver.no_such_table"], env)  # known from metadata: no JVM
    garbled = start(["etr", "sql", "SELEC nonsense"], env)  # Spark's parser: a JVM
    # The wait is said at once, before the JVM is up (the issue's `etr sql` printed nothing for 23-72 s).
    assert garbled.stderr.readline() == f"{SPARK_STARTING}\n" and garbled.poll() is None
    missing_done, garbled_done = finish(missing, SQL_TIMEOUT_S), finish(garbled, SQL_TIMEOUT_S)

    assert_one_error_line(missing_done, "no_such_table")
    assert_one_error_line(garbled_done, "PARSE_SYNTAX_ERROR", "syntax error", "SELEC")  # the line after it

    bad_profile = run(["etr", "tables"], env | {"ETR_PROFILE": "nope"}, timeout=60)
    line = assert_one_error_line(bad_profile, "ETR_PROFILE")
    assert "nope" in line, line
