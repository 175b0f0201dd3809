"""`etr`: the lake from a terminal (`etr --help` lists the commands). Errors are one line on stderr and a non-zero
exit, never a Java stack trace."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

from etr_assets.errors import EtrError
from etr_assets.lake import iam
from etr_assets.lake.exhaustion import human_size
from etr_assets.settings import Settings


def render_table(header: list[str], rows: list[list[object]]) -> str:
    cells = [[("NULL" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    rule = "  ".join("-" * w for w in widths)
    body = ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join([line, rule, *body])


def _json(value: dict) -> str:
    """One JSON line; dates in ISO 8601, decimals (and anything else JSON has no type for) as text."""
    return json.dumps(value, default=lambda v: v.isoformat() if isinstance(v, dt.date) else str(v))


def _spark_failed(command: str, exc: BaseException, doing: str, settings: Settings) -> int:
    """A Spark/Java error in one line on stderr: the setting to raise when the JVM ran out, else its first line."""
    from etr_assets.lake.exhaustion import exhaustion
    from etr_assets.lake.session import spark_conf

    text = str(getattr(exc, "desc", None) or exc)
    if (java := getattr(exc, "java_exception", None)) is not None:
        text = str(java.getMessage() or java.toString())
    line = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    print(f"etr {command}: {exhaustion(exc, doing, spark_conf(settings)) or line}", file=sys.stderr)
    return 1


SPARK_STARTING = "etr sql: starting Spark (a JVM: the one long wait)..."


def cmd_sql(settings: Settings, args: argparse.Namespace) -> int:
    from etr_assets.lake.metadata import unknown_tables

    if args.file is None and args.query is None:
        raise RuntimeError('give a query, "-" to read it from standard input, or --file FILE')
    query = args.file.read_text() if args.file else sys.stdin.read() if args.query == "-" else args.query
    if unknown := unknown_tables(settings, query):  # from the catalog's metadata: no JVM for a misspelt name
        for name, near in unknown:
            hint = f"; did you mean {' or '.join(near)}?" if near else "; `etr tables` lists the tables"
            print(f"etr sql: table {name} does not exist in catalog {settings.catalog}{hint}", file=sys.stderr)
        return 1
    from etr_assets.lake.session import get_spark

    print(SPARK_STARTING, file=sys.stderr, flush=True)  # at once: the JVM's start is the wait (stdout stays the result)
    spark = get_spark(settings)
    try:
        df = spark.sql(query)
        rows = df.limit(args.limit + 1).collect() if args.limit else df.collect()
    except Exception as exc:  # AnalysisException, ParseException, Py4JJavaError...
        return _spark_failed("sql", exc, "running the query", settings)
    truncated = bool(args.limit) and len(rows) > args.limit
    rows = rows[: args.limit] if args.limit else rows
    if args.json:
        for row in rows:
            print(_json(row.asDict(recursive=True)))
    else:
        print(render_table(df.columns, [list(r) for r in rows]))
        more = f" (first {args.limit}; use --limit 0 for all)" if truncated else ""
        print(f"({len(rows)} row{'s' if len(rows) != 1 else ''}{more})")
    return 0


def cmd_tables(settings: Settings, args: argparse.Namespace) -> int:
    from etr_assets.lake.metadata import all_table_stats
    from etr_assets.tables import ALL_SPECS

    stats = all_table_stats(settings, ALL_SPECS)
    if args.json:
        for s in stats:
            print(_json({**s.__dict__, "current_snapshot_id": str(s.current_snapshot_id or "")}))
    else:
        header = ["table", "rows", "snapshots", "files", "size", "stored", "last write"]
        print(render_table(header, [_table_row(s) for s in stats]))
        for s in stats:  # a count metadata cannot give is not guessed: the reason, under the table
            if s.exists and not s.problem and s.rows is None:
                print(f"{s.table}: rows unknown: {s.rows_unknown}")
    for s in stats:  # damaged tables are named on stderr too, so a script piping stdout still sees them
        if s.problem:
            print(f"etr tables: {s.table}: {s.problem}", file=sys.stderr)
    return 1 if any(s.problem for s in stats) else 0


def _table_row(s) -> list:
    name = s.table if s.has_spec else f"{s.table} (no spec)"
    if s.problem or not s.exists:
        return [name, "-", "-", "-", "-", "-", s.problem[:120] or "not created yet"]
    # The last write, not the metadata's last change (snapshot expiry or an ALTER writes no row).
    stamp = lambda t: f"{t:%Y-%m-%d %H:%M:%S}Z"
    when = stamp(s.last_write) if s.last_write else f"never written, made {stamp(s.last_updated)}"
    rows = "unknown" if s.rows is None else s.rows
    # Bytes kept per byte the current snapshot reads: what maintenance (expiry, orphans) would bring down.
    stored = human_size(s.stored_bytes) + (f" ({s.amplification:.2f}x)" if s.amplification else "")
    return [name, rows, s.snapshots, s.data_files, human_size(s.bytes), stored, when]


def cmd_api(settings: Settings, args: argparse.Namespace) -> int:
    from etr_assets.sources import synthetic_cli

    forwarded = ["--host", args.host, "--port", str(args.port), "--seed", str(settings.api_seed)]
    forwarded += ["--per-day", str(settings.api_transactions_per_day)]
    return synthetic_cli.main(forwarded)


def cmd_iam_policy(settings: Settings, args: argparse.Namespace) -> int:
    from etr_assets.tables import ALL_SPECS
    from etr_assets.tables.feeds import RAW_FEEDS

    policy = iam.iam_policy(ALL_SPECS, RAW_FEEDS, args.bucket, args.region, args.account, args.glue_job)
    print(iam.render(policy), end="")
    return 0


def cmd_prepare_instance(settings: Settings, args: argparse.Namespace) -> int:
    from etr_assets.instance import prepare_instance

    print("\n".join(prepare_instance(args.config)))
    return 0


def cmd_run(settings: Settings, args: argparse.Namespace) -> int:
    from etr_assets.run_request import run

    return run(args.days, settings.start_date, settings.home, args.verbose, args.job)


def cmd_run_summary(settings: Settings, args: argparse.Namespace) -> int:
    from dagster import DagsterInstance

    from etr_assets.defs.run_summary import summarize_run
    from etr_assets.run_request import dagster_home

    home = dagster_home(settings.home)  # one line when neither $DAGSTER_HOME nor ./dev's instance is there
    with DagsterInstance.from_config(str(home)) as instance:
        summary = summarize_run(instance, args.run_id)
    if summary is None:
        wanted = f"run {args.run_id}" if args.run_id else "finished run"  # not one still queued or running
        raise RuntimeError(f"no {wanted} in the Dagster instance at {home}")
    print("\n".join(summary.lines()))
    return 0 if summary.failed == 0 and summary.status == "SUCCESS" else 1


def read_ids(values: list[str]) -> list[str]:
    """The ids as given, or `-`: read from standard input (separated by spaces, commas or lines)."""
    return sys.stdin.read().replace(",", " ").split() if values == ["-"] else values


def cmd_erase(settings: Settings, args: argparse.Namespace) -> int:
    """Record the request where only the erasure reads it; the job is then launched with the reference only."""
    from etr_assets.lake.erasure import audit_key
    from etr_assets.lake.erasure.store import launch_hint, open_request_store

    audit_key(settings.profile)  # a missing key fails now, not in the job (an ErasureError: one line from main)
    store = open_request_store(settings.raw_root, s3_endpoint=settings.s3_endpoint, region=settings.region)
    recorded = store.record(args.reference, read_ids(args.ids))
    print(f"recorded erasure request {recorded.reference}: {recorded.customers} customer(s), in {recorded.uri}")
    hint = launch_hint(recorded.reference)
    print(f"{hint[0].upper()}{hint[1:]}")
    print("The ids stay in that file only until the erasure is proven; they never go into Dagster's storage.")
    return 0


def cmd_lift_suppression(settings: Settings, args: argparse.Namespace) -> int:
    """An erased customer signed up again and consented: one audited LIFT_SUPPRESSION row (keyed hash, reference,
    who, why, when) lets later loads store them again. No Dagster run: the id never reaches its storage."""
    import getpass
    import socket

    from etr_assets.errors import ErasureError
    from etr_assets.lake.bookkeeping import GDPR_ACTIONS
    from etr_assets.lake.erasure import audit_key, validate_customer_ids
    from etr_assets.lake.erasure.suppression import lift_suppression
    from etr_assets.lake.session import get_spark

    ids = validate_customer_ids(read_ids([args.id]), "id")  # an ErasureError: one line from main
    if len(ids) != 1:
        raise ErasureError(f"{len(ids)} ids given: lift one customer's suppression at a time")
    key = audit_key(settings.profile)  # the erasure's key: the same id hashes to the same entry
    by = args.by or f"{getpass.getuser()}@{socket.gethostname()}"  # the login name on this host
    try:
        row = lift_suppression(get_spark(settings), settings.catalog, key, ids[0], args.reference, args.reason, by=by)
    except EtrError:
        raise
    except Exception as exc:  # Py4JJavaError, AnalysisException: one line, never Java's stack
        return _spark_failed("lift-suppression", exc, "recording the lift", settings)
    print(
        f"lifted the suppression of 1 customer (keyed hash {row['subject_hash'][:12]}...) under {row['request_id']}: "
        f"{row['action']} recorded in {GDPR_ACTIONS.qualified(settings.catalog)} ({row['detail']}); the next loads "
        "store the customer again, and a new erasure suppresses them again"
    )
    return 0


def cmd_draft_source(settings: Settings, args: argparse.Namespace) -> int:
    """The drafted declaration on stdout; a sample it cannot use is one line naming the file, exit 2."""
    from etr_assets.errors import DraftError
    from etr_assets.sources.draft import draft_source

    try:
        text = draft_source(args.sample, args.name, args.resource, path=args.path)
    except DraftError as mistake:
        print(f"etr draft-source: {mistake}", file=sys.stderr)
        return 2
    print(text, end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="etr", description="Work with the eTR+ lakehouse (profile from ETR_PROFILE).")
    sub = parser.add_subparsers(dest="command", required=True)
    sql = sub.add_parser("sql", help="run Spark SQL on the profile's Iceberg catalog and print the result")
    sql.add_argument(
        "query", nargs="?", help='e.g. "SELECT * FROM silver.bnpl_transactions_clean LIMIT 5"; "-": read standard input'
    )
    sql.add_argument("-f", "--file", type=Path, help="read the query from this file")
    sql.add_argument("--json", action="store_true", help="one JSON object per row")
    sql.add_argument("--limit", type=int, default=100, help="rows to print at most (0: all; default 100)")
    tables = sub.add_parser("tables", help="list every table with rows, snapshots, files and size")
    tables.add_argument("--json", action="store_true", help="one JSON object per table")
    api = sub.add_parser("api", help="serve the synthetic BNPL API until Ctrl-C")
    api.add_argument("--host", default="127.0.0.1")
    api.add_argument("--port", type=int, default=8765)
    policy = sub.add_parser("iam-policy", help="print the pipeline's least-privilege IAM policy (JSON)")
    policy.add_argument("--bucket", default=iam.DEFAULT_BUCKET)
    policy.add_argument("--region", default=iam.DEFAULT_REGION)
    policy.add_argument("--account", default="*", help="the AWS account id (default: any account the role is in)")
    policy.add_argument("--glue-job", default=iam.DEFAULT_GLUE_JOB)
    prepare = sub.add_parser(
        "prepare-instance",
        help="make $DAGSTER_HOME ready for this code location: dagster.yaml (if missing), storage, table pools",
    )
    prepare.add_argument(
        "--config", type=Path, help="dagster.yaml to install when there is none (default: the laptop one)"
    )
    day = sub.add_parser(
        "run",
        help="run etr_pipeline for a day or a range as one run (what `dg launch --job etr_pipeline --partition` "
        "runs): one line a step, then its id and summary",
    )
    day.add_argument("days", nargs="?", metavar="DAY|FIRST..LAST", help="e.g. 2025-01-04, or 2025-01-05..2025-01-06")
    day.add_argument("--verbose", action="store_true", help="Dagster's whole log (DEBUG lines too) instead")
    day.add_argument(
        "--job", default="etr_pipeline", help="the job to run: etr_pipeline, or a declared source's <source>_ingest"
    )
    summary = sub.add_parser(
        "run-summary", help="a Dagster run in three lines: assets, rows (for its days; written), checks"
    )
    summary.add_argument(
        "run_id", nargs="?", help="the run (default: the newest finished run of $DAGSTER_HOME's instance)"
    )
    erase = sub.add_parser(
        "erase",
        help="record a GDPR erasure request (reference and customer ids) for the gdpr_erasure job, "
        "which is then launched with the reference only",
    )
    erase.add_argument("--reference", required=True, help="the request's reference, e.g. GDPR-2025-0042")
    erase.add_argument("ids", nargs="+", metavar="ID", help="customer ids to erase; `-`: read them from standard input")
    lift = sub.add_parser(
        "lift-suppression",
        help="let an erased customer be stored again (they signed up again and consented): an audited "
        "LIFT_SUPPRESSION row in audit.gdpr_actions, with the keyed hash only",
    )
    lift.add_argument("--reference", required=True, help="the new consent's or the ticket's reference, e.g. CONSENT-7")
    lift.add_argument("--reason", required=True, help="why this customer may be stored again (kept in the audit)")
    lift.add_argument("--by", help="who lifts it, for the audit (default: your login name @ this host)")
    lift.add_argument("id", metavar="ID", help="the customer id; `-`: read it from standard input")
    draft = sub.add_parser(
        "draft-source",
        help="print a first YAML declaration of an API's endpoint, drafted from a sample JSON response "
        "(docs/sources.md): columns, types, key and TODOs to settle",
    )
    draft.add_argument("name", metavar="NAME", help="the source's name, e.g. stores (its tables: bronze.NAME_RESOURCE)")
    draft.add_argument("resource", metavar="RESOURCE", help="the endpoint's resource name, e.g. stores")
    draft.add_argument("sample", metavar="SAMPLE.json", help="a response of the endpoint; `-`: read standard input")
    draft.add_argument("--path", help="the endpoint's path, e.g. /v1/stores (default: /RESOURCE, marked TODO)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run = globals()[f"cmd_{args.command.replace('-', '_')}"]  # `etr lift-suppression` runs cmd_lift_suppression
    try:
        return run(Settings.from_env(), args)
    except (EtrError, RuntimeError, OSError) as exc:  # EtrError: a project error, one line naming what and where
        print(f"etr {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
