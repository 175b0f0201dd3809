"""How long the code location takes to load with many declared endpoints: `python -m bench.definitions_load
[ENDPOINTS] [ROUNDS]` (default 50 endpoints, 5 rounds).

Generates ENDPOINTS resources in sources of ten (half events, half entities without an update time, five columns each,
one nested) in a temp folder, then times `import etr_assets.definitions` (every source's assets, checks, jobs and
schedules built) in fresh processes: with the shipped sources only (ETR_SOURCE_DIRS empty) and with the generated
folder too, in turns, each first in every other round; `import dagster` is timed apart and not counted. Prints JSON:
every run's seconds, the medians, their ratio, and the load average at start and end."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import machine, ratio

REPO = Path(__file__).resolve().parent.parent
PROBE = (
    "import time, json; t = time.perf_counter(); import dagster; d = time.perf_counter(); "
    "import etr_assets.definitions as m; e = time.perf_counter(); "
    "print(json.dumps({'dagster': d - t, 'definitions': e - d, 'assets': len(m.defs.assets)}))"
)


def source_yaml(index: int, resources: int) -> str:
    lines = [
        "type: etr_assets.defs.api_source.ApiSource",
        "attributes:",
        f"  name: gen{index}",
        "  client:",
        f"    base_url: {{env: GEN{index}_URL}}",
        "    auth: {type: api_key, name: X-Key, location: header, api_key: {env: GEN_KEY}}",
        "    paginator: {type: offset, limit_param: limit}",
        "    data_selector: result.items",
        "    page_size: {param: limit, value: 100}",
        "  resources:",
    ]
    for r in range(resources):
        events = r % 2 == 0
        lines += [
            f"    - name: r{r}",
            f"      endpoint: {{path: /r{r}, day: {{param: day}}}}",
            f"      kind: {'events' if events else 'entities'}",
            "      key: id",
            *(["      day_column: day"] if events else []),
            "      columns:",
            "        - {name: id, type: bigint, required: true}",
            "        - {name: day, type: date, required: true}",
            "        - {name: name, type: string}",
            "        - {name: city, type: string, path: address.city}",
            "        - {name: amount, type: 'decimal(12,2)'}",
            "      checks: [{description: name is short, sql: length(name) < 100}]",
        ]
    return "\n".join(lines) + "\n"


def generate(folder: Path, endpoints: int) -> None:
    for index in range(0, endpoints, 10):
        path = folder / f"gen{index // 10}" / "defs.yaml"
        path.parent.mkdir(parents=True)
        path.write_text(source_yaml(index // 10, min(10, endpoints - index)))


def load(source_dirs: str) -> dict:
    env = {**os.environ, "ETR_SOURCE_DIRS": source_dirs, "PYTHONWARNINGS": "ignore"}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=REPO, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(endpoints: int = 50, rounds: int = 5) -> dict:
    start = machine()
    with tempfile.TemporaryDirectory(prefix="etr-bench-defs-") as scratch:
        folder = Path(scratch)
        generate(folder, endpoints)
        load(str(folder))  # untimed: compiled bytecode, warm file cache, for both sides
        runs = {"shipped": [], "declared": []}
        for round_ in range(rounds):
            sides = [("shipped", ""), ("declared", str(folder))]
            for side, dirs in sides if round_ % 2 == 0 else reversed(sides):
                runs[side].append(load(dirs))
    medians = {side: statistics.median(r["definitions"] for r in results) for side, results in runs.items()}
    return {
        "endpoints": endpoints,
        "assets": {side: results[0]["assets"] for side, results in runs.items()},
        "definitions_seconds": {side: [round(r["definitions"], 3) for r in results] for side, results in runs.items()},
        "import_dagster_seconds": round(statistics.median(r["dagster"] for rs in runs.values() for r in rs), 3),
        "median_seconds": {side: round(m, 3) for side, m in medians.items()},
        "ratio_declared_to_shipped": ratio(medians["declared"], medians["shipped"]),
        "load_average": {"start": start.get("load_average"), "end": machine().get("load_average")},
    }


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    print(json.dumps(main(*args), indent=2))
