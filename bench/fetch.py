"""The raw fetch of one day against a git revision's: `python -m bench.fetch [TRANSACTIONS] [ROUNDS] [REVISION]`
(default 999999 transactions, 3 rounds, and the last revision fetching with `sources/api_client.py`'s ApiClient).

One synthetic BNPL API (this tree's, in this process) serves a day of TRANSACTIONS transactions; each side fetches
the whole day into a raw zone under a temp dir with page size 1000: "now", this tree's `fetch_day` through the
declared BNPL source (etr_assets/defs/sources/bnpl/defs.yaml, dlt's REST client), and "then", the revision's
`fetch_day` with its own client, run from a `git worktree` of the revision. Each fetch runs in a process of its own
(started fresh, its imports timed apart from the fetch), so the server never shares a GIL with a client. An untimed
request first has the server build the day; then the sides alternate, each first in every other round. Both sides
must store the same bytes (every part file hashed in order). Prints JSON: every run's seconds, the best and median of
each side, the ratios now/then, the CPU seconds of each client (its process, writers included) and of the server
(this process) during each run, and the load average at start, end and around each run.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.common import machine, ratio

REPO = Path(__file__).resolve().parent.parent
DAY = dt.date(2025, 3, 3)
PAGE_SIZE = 1000

# Each side's fetch, run as `python -c` in a fresh process: argv is URL TOKEN DAY ROOT PAGE_SIZE.
CHILD_COMMON = """
import datetime as dt, hashlib, json, sys, time
started = time.perf_counter()
{imports}
from etr_assets.sources.fetch import fetch_day
from etr_assets.sources.raw_zone import local_raw_zone
imported = time.perf_counter() - started
url, token, day, root, size = sys.argv[1:6]
client = {client}
raw = local_raw_zone(root)
started, cpu = time.perf_counter(), time.process_time()
batch, manifest = fetch_day(client, raw, "transactions", dt.date.fromisoformat(day))
seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
digest = hashlib.sha256()
for name in manifest.files:
    digest.update(raw.storage.read_bytes(f"{{batch.key}}/{{name}}"))
import etr_assets
print(json.dumps({{"seconds": seconds, "cpu_seconds": cpu, "import_seconds": imported, "records": manifest.records,
                  "files": len(manifest.files), "sha256": digest.hexdigest(), "package": etr_assets.__path__[0]}}))
"""
CHILDREN = {
    "now": CHILD_COMMON.format(
        imports=(
            "from pathlib import Path\n"
            "import etr_assets\n"
            "import dlt.sources.helpers.rest_client, dlt.sources.helpers.requests  # imported lazily on first use\n"
            "from etr_assets.sources.declaration import load_declaration\n"
            "from etr_assets.sources.http_fetch import SourceClient"
        ),
        client=(
            'SourceClient(load_declaration(Path(etr_assets.__file__).parent / "defs/sources/bnpl/defs.yaml"), url, '
            '{"token": token}, page_size=int(size))'
        ),
    ),
    "then": CHILD_COMMON.format(
        imports="from etr_assets.sources.api_client import ApiClient",
        client="ApiClient(url, token, page_size=int(size))",
    ),
}


OLD_IMPORT = "from etr_assets.sources.api_client import ApiClient"


def last_api_client_revision() -> str:
    """The last commit whose fetch.py fetched with ApiClient (the parent of the one that stopped)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    changed = git("log", "-1", "--format=%H", f"-S{OLD_IMPORT}", "--", "etr_assets/sources/fetch.py")
    if not changed:
        raise SystemExit("bench.fetch: no revision fetches with ApiClient; name one")
    return changed if OLD_IMPORT in git("show", f"{changed}:etr_assets/sources/fetch.py") else f"{changed}^"


def worktree(revision: str, into: Path) -> Path:
    """A checkout of `revision` under `into` (`git worktree add --detach`)."""
    folder = into / "then"
    done = subprocess.run(
        ["git", "worktree", "add", "--detach", str(folder), revision], cwd=REPO, capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(f"bench.fetch: no worktree of {revision!r}: {done.stderr.strip()}")
    return folder


def fetch(side: str, tree: Path, url: str, token: str, root: Path) -> dict:
    """One fetch of the day by `side`'s code (the package in `tree`), in a fresh process."""
    shutil.rmtree(root, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, "-c", CHILDREN[side], url, token, DAY.isoformat(), str(root), str(PAGE_SIZE)]
    load_before, server_cpu = os.getloadavg()[0], time.process_time()  # this process: the server's threads
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    server_cpu = time.process_time() - server_cpu
    if done.returncode:
        raise SystemExit(f"bench.fetch: the {side} fetch failed:\n{done.stderr[-3000:]}")
    shutil.rmtree(root, ignore_errors=True)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        **found,
        "server_cpu_seconds": server_cpu,
        "load_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def compare(transactions: int, rounds: int, revision: str) -> dict:
    from etr_assets.sources.synthetic_api import ApiConfig, serve

    with tempfile.TemporaryDirectory(prefix="etr-bench-fetch-") as folder:
        then_tree = worktree(revision, Path(folder))
        try:
            with serve(ApiConfig(seed=7, transactions_per_day=transactions)) as api:
                started = time.perf_counter()
                request = urllib.request.Request(
                    f"{api.url}/v1/transactions?date={DAY}&page_size=1",
                    headers={"Authorization": f"Bearer {api.config.token}"},
                )
                with urllib.request.urlopen(request, timeout=600) as response:  # the server builds the day
                    response.read()
                build = time.perf_counter() - started
                trees = {"now": REPO, "then": then_tree}
                runs: dict[str, list[dict]] = {"now": [], "then": []}
                for number in range(rounds):
                    order = ("now", "then") if number % 2 else ("then", "now")
                    for side in order:
                        run = fetch(side, trees[side], api.url, api.config.token, Path(folder) / "raw")
                        runs[side].append(run)
                        cpu = f"cpu: client {run['cpu_seconds']:.2f} s, server {run['server_cpu_seconds']:.2f} s"
                        print(
                            f"round {number + 1} {side}: {run['seconds']:.2f} s ({cpu}), load {run['load_1min']}",
                            file=sys.stderr,
                        )
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(then_tree)], cwd=REPO, capture_output=True)
            subprocess.run(["git", "worktree", "prune"], cwd=REPO, capture_output=True)
    every = [run for side in runs.values() for run in side]
    for side, tree in trees.items():
        if {r["package"] for r in runs[side]} != {str(tree / "etr_assets")}:
            raise SystemExit(f"bench.fetch: the {side} side ran another tree's package: {runs[side]}")
    if {(r["records"], r["sha256"]) for r in every} != {(every[0]["records"], every[0]["sha256"])}:
        raise SystemExit(f"bench.fetch: the sides stored different records: {runs}")
    seconds = {side: [round(r["seconds"], 2) for r in found] for side, found in runs.items()}
    cpu = {side: [round(r["cpu_seconds"], 2) for r in found] for side, found in runs.items()}
    server_cpu = {side: [round(r["server_cpu_seconds"], 2) for r in found] for side, found in runs.items()}
    best = {side: min(values) for side, values in seconds.items()}
    median = {side: statistics.median(values) for side, values in seconds.items()}
    return {
        "transactions": transactions,
        "records": every[0]["records"],
        "files": every[0]["files"],
        "page_size": PAGE_SIZE,
        "server_build_seconds": round(build, 1),
        "seconds": seconds,
        "client_cpu_seconds": cpu,
        "server_cpu_seconds": server_cpu,
        "import_seconds": {side: [round(r["import_seconds"], 2) for r in found] for side, found in runs.items()},
        "load_1min_around_each_run": {side: [r["load_1min"] for r in found] for side, found in runs.items()},
        "best": best,
        "median": median,
        "now / then (best)": ratio(best["now"], best["then"]),
        "now / then (median)": ratio(median["now"], median["then"]),
        "client cpu now / then (median)": ratio(statistics.median(cpu["now"]), statistics.median(cpu["then"])),
        "same bytes stored": True,
    }


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        raise SystemExit(__doc__)
    transactions = int(args[0]) if args else 999_999
    rounds = int(args[1]) if len(args) > 1 else 3
    revision = args[2] if len(args) > 2 else last_api_client_revision()
    revision = (
        subprocess.run(
            ["git", "rev-parse", "--short=12", revision], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
        or revision
    )
    start = machine()
    found = compare(transactions, rounds, revision)
    found |= {"revision": revision, "rounds": rounds, "machine": start}
    found |= {"load_start": start["load_average"], "load_end": [round(x, 2) for x in os.getloadavg()]}
    print(json.dumps(found, indent=1, default=str))


if __name__ == "__main__":
    main()
