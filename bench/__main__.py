"""`python -m bench <name> [--scale N]`: run one benchmark (or `all`), write bench/results/<name>.{json,md,png}."""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
import time
from pathlib import Path

from bench.common import RESULTS_DIR, machine, open_lake

# name -> (module, what it measures)
BENCHMARKS = {
    "formats": (
        "bench.formats",
        "requirement R1's table: Iceberg silver against plain Parquet (scans, updates, deletes)",
    ),
    "scd2": ("bench.scd2", "single-MERGE SCD2 against requirement R2's four statements and plain Parquet"),
    "small_files": ("bench.small_files", "hundreds of tiny appends: scans and planning before/after maintenance"),
    "health": ("bench.health", "metadata-only health check against Spark metadata tables as tables grow"),
    "orchestration": ("bench.orchestration", "one partition through Dagster against calling the library"),
    "history": (
        "bench.history",
        "the pipeline over time (day N+1 against day 1 after 30 and 365 days) and at volume (999,999 transactions)",
    ),
}
# The options only some benchmarks take (refused by the others): the size of their data.
SIZE_OPTIONS = {"history": ("days", "per_day", "volume"), "formats": ("days", "per_day")}


def check_sizes(name: str, scale: float, options: dict) -> dict:
    """`options` (days, per_day, volume: those given) as `name`'s run() takes them, or SystemExit saying why not."""
    allowed = SIZE_OPTIONS.get(name, ())
    if refused := [k for k in options if k not in allowed]:
        flags = ", ".join("--" + k.replace("_", "-") for k in refused)
        takers = " and ".join(n for n, keys in SIZE_OPTIONS.items() if set(refused) <= set(keys))
        raise SystemExit(f"bench: {flags}: an option of {takers} only, not {name}")
    days, per_day = options.get("days"), options.get("per_day", 1)
    if min(days or [0]) < 0 or per_day < 1:
        raise SystemExit(f"bench: --days must be >= 0 and --per-day >= 1, got {options}")
    if not 0 <= options.get("volume", 0) <= 999_999:
        raise SystemExit(f"bench: --volume is 0..999999 (the synthetic API's most a day), got {options['volume']}")
    if name == "formats" and options:
        if days is not None and (len(days) != 1 or days[0] < 1):
            raise SystemExit(f"bench: formats takes one --days value, the days of data (>= 1), got {days}")
        if scale != 1.0:
            raise SystemExit("bench: formats takes --scale or --days/--per-day, not both")
        return {**options, "days": days[0]} if days else options
    return options


def run_benchmark(
    name: str,
    scale: float,
    repeats: int,
    out_dir: Path,
    command: str,
    keys: list[int] | None = None,
    options: dict | None = None,
) -> dict:
    """Run one benchmark in this process's Spark session (created if absent) and write its results. `keys`: the
    scd2 benchmark's table sizes instead of its defaults (e.g. one run at 3,000,000 keys). `options`: the history
    benchmark's days, per_day and volume, or the formats benchmark's days and per_day, instead of their defaults."""
    from bench import report

    if name not in BENCHMARKS:
        raise SystemExit(f"bench: unknown benchmark {name!r}; choose one of {', '.join(BENCHMARKS)} or all")
    if scale <= 0:
        raise SystemExit(f"bench: --scale must be positive, got {scale}")
    if keys is not None and (name != "scd2" or not keys or min(keys) < 100):
        raise SystemExit(f"bench: --keys sets the scd2 benchmark's table sizes (each >= 100), got {keys} for {name}")
    options = check_sizes(name, scale, options or {})
    module = importlib.import_module(BENCHMARKS[name][0])
    start_machine, started = machine(), time.perf_counter()
    with open_lake(name) as lake:
        if keys:
            result = module.run(lake, scale, repeats, sizes=keys)
        else:
            result = module.run(lake, scale, repeats, **options)
    end_machine = machine()
    result = {
        "benchmark": name,
        "command": command,
        "scale": scale,
        "repeats": repeats,
        "seconds": round(time.perf_counter() - started, 1),
        "machine": {
            **start_machine,
            "load_average_start": start_machine.pop("load_average"),
            "load_average_end": end_machine["load_average"],
        },
        **result,
    }
    written = report.write(result, out_dir)
    print(f"bench {name}: {result['seconds']:.0f} s -> " + ", ".join(str(p) for p in written), file=sys.stderr)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmarks: " + "; ".join(f"{k}: {v[1]}" for k, v in BENCHMARKS.items()),
    )
    parser.add_argument("name", choices=[*BENCHMARKS, "all"])
    parser.add_argument("--scale", type=float, default=1.0, help="data size relative to the default (1.0)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per timed operation; the best one counts")
    parser.add_argument(
        "--keys",
        type=lambda text: [int(k) for k in text.split(",")],
        help="scd2 only: comma-separated table sizes in keys, instead of 100000,1000000 (e.g. --keys 3000000)",
    )
    parser.add_argument(
        "--days",
        type=lambda text: [int(d) for d in text.split(",") if d.strip()],
        help="history: comma-separated history lengths in days, instead of 30,365 (0 skips the history part); "
        "formats: the days of data (one value, instead of 365)",
    )
    parser.add_argument(
        "--per-day",
        type=int,
        help="history: transactions a day, seeded and timed (default 10000, times --scale); formats: rows a day "
        "(default 10000; formats takes --scale or --days/--per-day)",
    )
    parser.add_argument(
        "--volume", type=int, help="history only: transactions in the big day (default 999999, times --scale; 0 skips)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="folder for <name>.json, .md and charts")
    args = parser.parse_args(argv)
    names = list(BENCHMARKS) if args.name == "all" else [args.name]
    given = {k: getattr(args, k) for k in ("days", "per_day", "volume") if getattr(args, k) is not None}
    command = "python -m bench " + shlex.join(argv if argv is not None else sys.argv[1:])
    for name in names:
        options = given if name == "history" or args.name != "all" else None  # `all`: the size options to history
        run_benchmark(name, args.scale, args.repeats, args.out, command.replace(" all", f" {name}"), args.keys, options)
    return 0


if __name__ == "__main__":
    sys.exit(main())
