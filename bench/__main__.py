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
}


def run_benchmark(
    name: str, scale: float, repeats: int, out_dir: Path, command: str, keys: list[int] | None = None
) -> dict:
    """Run one benchmark in this process's Spark session (created if absent) and write its results. `keys`: the
    scd2 benchmark's table sizes instead of its defaults (e.g. one run at 3,000,000 keys)."""
    from bench import report

    if name not in BENCHMARKS:
        raise SystemExit(f"bench: unknown benchmark {name!r}; choose one of {', '.join(BENCHMARKS)} or all")
    if scale <= 0:
        raise SystemExit(f"bench: --scale must be positive, got {scale}")
    if keys is not None and (name != "scd2" or not keys or min(keys) < 100):
        raise SystemExit(f"bench: --keys sets the scd2 benchmark's table sizes (each >= 100), got {keys} for {name}")
    module = importlib.import_module(BENCHMARKS[name][0])
    start_machine, started = machine(), time.perf_counter()
    with open_lake(name) as lake:
        result = module.run(lake, scale, repeats, sizes=keys) if keys else module.run(lake, scale, repeats)
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
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="folder for <name>.json, .md and charts")
    args = parser.parse_args(argv)
    names = list(BENCHMARKS) if args.name == "all" else [args.name]
    command = "python -m bench " + shlex.join(argv if argv is not None else sys.argv[1:])
    for name in names:
        run_benchmark(name, args.scale, args.repeats, args.out, command.replace(" all", f" {name}"), args.keys)
    return 0


if __name__ == "__main__":
    sys.exit(main())
