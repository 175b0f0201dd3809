"""The command line of the synthetic BNPL API (``etr api`` or ``python -m etr_assets.sources.synthetic_cli``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import threading

from etr_assets.sources.synthetic_api import serve
from etr_assets.sources.synthetic_data import ApiConfig
from etr_assets.sources.synthetic_faults import ApiFaults


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m etr_assets.sources.synthetic_cli",
        description="Serve deterministic synthetic BNPL data over HTTP.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port (printed)")
    parser.add_argument("--seed", type=int, default=ApiConfig.seed)
    parser.add_argument("--per-day", type=int, default=ApiConfig.transactions_per_day)
    parser.add_argument("--token", default=ApiConfig.token)
    faults = parser.add_argument_group("faults (also switchable at run time: POST /admin/faults)")
    parser.set_defaults(**ApiFaults().to_json())  # before the arguments below, which take them as their defaults
    faults.add_argument("--fail-requests", type=int, metavar="N", help="fail the next N data requests")
    faults.add_argument("--fail-status", type=int, metavar="S")
    faults.add_argument(
        "--retry-after",
        type=float,
        metavar="S",
        dest="retry_after_seconds",
        help="Retry-After seconds sent with --fail-status 429",
    )
    faults.add_argument("--fail-path-prefix", metavar="PATH", help="fail only paths starting so")
    faults.add_argument("--delay", type=float, metavar="S", dest="delay_seconds", help="sleep before each data answer")
    faults.add_argument("--malformed-rate", type=float, metavar="R", help="fraction of bad records")
    faults.add_argument("--drift", action="store_true", help="add unknown fields to every record")
    faults.add_argument("--truncate-after-pages", type=int, metavar="N", help="cut off pages after N")
    args = parser.parse_args(argv)
    try:
        config = ApiConfig(seed=args.seed, transactions_per_day=args.per_day, token=args.token)
        initial = ApiFaults(**{field.name: getattr(args, field.name) for field in dataclasses.fields(ApiFaults)})
    except ValueError as exc:
        parser.error(str(exc))
    stopping = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stopping.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with serve(config, args.host, args.port, initial) as api:
            print(f"Synthetic BNPL API on {api.url} (token: {config.token}). Ctrl-C stops it.", flush=True)
            if initial != ApiFaults():
                print(f"Faults: {json.dumps(initial.to_json())}", flush=True)
            while not stopping.wait(0.2):  # a timed wait lets the signal handler run promptly
                pass
    except OSError as exc:
        print(f"cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
