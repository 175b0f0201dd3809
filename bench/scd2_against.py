"""The SCD2 apply of this tree against a git revision's, side by side in one process: `python -m bench.scd2_against
REV [KEYS] [REPEATS] [DAILY_SHARE]`.

The revision's `etr_assets/lake/scd2*.py` are copied into a temporary package (their imports of each other
renamed; the rest of the library is this tree's), so both applies run in one Spark session on the same tables; a
revision from before the apply path was one module (issue 54) is called through its `scd2_log.apply_log`. From
the late-day benchmark's state (bench/scd2_late.py: two days of an unchanged list in a day-partitioned log, one
version per key) each is timed on the same two cases, in turns, from the same starting snapshots and cursor: the
daily apply (day 3, DAILY_SHARE % of keys changed) and the late day (day 2 arriving after day 3, 1 % changed),
each side first in every other round. The first round is untimed; the best of REPEATS counts. Beside each time,
the CPU the JVM spent on it (driver and executors: local mode; from /proc), which a busy machine inflates far less
than the time. After the last round each table is summed column by column (xxhash64 of every column but
`_ingested_at`): the two must hold the same versions. Prints JSON with the load.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import scd2_late as late_bench
from bench.common import measure, open_lake, ratio
from bench.scd2_lists import BUSINESS, batch
from etr_assets.lake import scd2
from etr_assets.tables.entities import LANDING_CUSTOMERS

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "etr_scd2_then"
WARM_UP = True  # a first round not counted: each side's first apply of each case compiles its plans


def load_revision(revision: str, into: Path):
    """`apply(spark, catalog, spec, log)` of the revision's SCD2 modules, copied under `into`, on the late-day log."""
    listed = subprocess.run(
        ["git", "ls-tree", "--name-only", revision, "etr_assets/lake/"], cwd=REPO, capture_output=True, text=True
    )
    if listed.returncode:
        raise SystemExit(f"bench.scd2_against: no revision {revision!r}: {listed.stderr.strip()}")
    names = [Path(p).stem for p in listed.stdout.split() if re.fullmatch(r"etr_assets/lake/scd2\w*\.py", p)]
    package = into / PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    own = re.compile(r"etr_assets\.lake\.(" + "|".join(names) + r")\b")
    for name in names:
        text = subprocess.run(
            ["git", "show", f"{revision}:etr_assets/lake/{name}.py"], cwd=REPO, capture_output=True, text=True
        ).stdout
        (package / f"{name}.py").write_text(own.sub(rf"{PACKAGE}.\1", text))
    sys.path.insert(0, str(into))
    if "scd2_log" in names:  # its apply_log took the log's options one by one
        then = importlib.import_module(f"{PACKAGE}.scd2_log").apply_log
        return lambda spark, catalog, spec, log: then(
            spark, catalog, spec, log, late_bench._records, "full", snapshot_day="_as_of"
        )
    then = importlib.import_module(f"{PACKAGE}.scd2")
    return lambda spark, catalog, spec, log: then.apply_log(
        spark, catalog, spec, then.ObservationLog(log, late_bench._records, "full", snapshot_day="_as_of")
    )


def apply_now(spark, catalog: str, spec, log: str):
    return scd2.apply_log(spark, catalog, spec, late_bench.day_log(log))


def compare(lake, apply_then, keys: int, repeats: int, daily_share: int) -> dict:
    spark, business = lake.spark, BUSINESS
    spec = dataclasses.replace(LANDING_CUSTOMERS, name="customers_against")
    log, target = f"{lake.catalog}.landing.customers_against_log", spec.qualified(lake.catalog)
    unchanged = late_bench._write(lake, batch(spark, keys, 0, 0), "against_list0")
    late_bench._seed(lake, spec, log, unchanged, 2, business, None)
    daily = late_bench._write(lake, batch(spark, keys, daily_share, 1, late_bench._noon(3), "moved"), "d")
    late = late_bench._write(lake, batch(spark, keys, 1, 1, late_bench._noon(2), "late"), "l")
    start = (late_bench._current(spark, target), scd2.read_cursor(spark, target))
    late_bench.load_days(late_bench._day_rows(spark, daily, business, 3), log)
    daily_log = late_bench._current(spark, log)
    apply_now(spark, lake.catalog, spec, log)
    after_daily = (late_bench._current(spark, target), scd2.read_cursor(spark, target))
    late_bench.load_days(late_bench._day_rows(spark, late, business, 2), log)
    cases = {"daily": (start, daily_log), "late": (after_daily, late_bench._current(spark, log))}
    runs, sums = {}, {}
    sides = (("then", apply_then), ("now", apply_now))
    for attempt in range(0 if WARM_UP else 1, repeats + 1):
        for case, ((table_at, cursor), log_at) in cases.items():
            # Each side first in every other round: the same code applied twice in a row ran its second apply up to
            # 13% faster (docs/benchmarks.md), so a fixed order would credit that to whichever side runs second.
            for name, apply in sides if attempt % 2 else sides[::-1]:
                late_bench._set_current(lake, target, table_at)
                late_bench._set_current(lake, log, log_at)
                scd2.write_cursor(spark, target, cursor)
                cpu = _jvm_cpu_seconds(spark)
                seconds, _, result = measure(spark, lambda apply=apply: apply(spark, lake.catalog, spec, log))
                if attempt:
                    runs.setdefault(f"{case} {name}", []).append(round(seconds, 2))
                    runs.setdefault(f"{case} {name} cpu", []).append(round(_jvm_cpu_seconds(spark) - cpu, 2))
                if attempt == repeats:
                    sums[f"{case} {name}"] = _checksum(spark, target)
                    runs[f"{case} {name} reason"] = result.reason
    best = {k: min(v) for k, v in runs.items() if isinstance(v, list)}
    found = {"runs": runs, "best": best}
    for case in cases:
        found[f"{case}: now / then"] = ratio(best[f"{case} now"], best[f"{case} then"])
        found[f"{case}: now / then, JVM CPU"] = ratio(best[f"{case} now cpu"], best[f"{case} then cpu"])
        found[f"{case}: same versions"] = sums[f"{case} now"] == sums[f"{case} then"]
    found["late / daily (now)"] = ratio(best["late now"], best["daily now"])
    found["late / daily (then)"] = ratio(best["late then"], best["daily then"])
    return found


def _jvm_cpu_seconds(spark) -> float:
    """CPU time the JVM has used so far, user and system (Linux: /proc/PID/stat, in clock ticks)."""
    pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _checksum(spark, table: str) -> list:
    from pyspark.sql import functions as F

    columns = [c for c in spark.table(table).columns if c != "_ingested_at"]
    return list(spark.table(table).select(F.sum(F.xxhash64(*columns)), F.count("*")).first())


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        raise SystemExit(__doc__)
    revision = args[0]
    defaults = [1_000_000, 3, 10]
    keys, repeats, share = ([int(a) for a in args[1:4]] + defaults[len(args) - 1 :])[:3]
    with tempfile.TemporaryDirectory(prefix="etr-scd2-then-") as folder:
        apply_then = load_revision(revision, Path(folder))
        load_start = os.getloadavg()
        with open_lake("scd2_against") as lake:
            found = compare(lake, apply_then, keys, repeats, share)
    found |= {"revision": revision, "keys": keys, "repeats": repeats, "daily_share": share}
    found |= {"load_start": load_start, "load_end": os.getloadavg()}
    print(json.dumps(found, indent=1, default=str))


if __name__ == "__main__":
    main()
