"""A long-lived Spark writer on the `s3` profile, driven by test_concurrent_writers.py over stdin/stdout.

Starting a JVM costs most of a concurrency test (three of them share two cores), so each writer process starts
once per test module and runs the tests' tasks one after the other:

    python concurrent_job.py '{"bucket": ..., "endpoint": ..., "jdbc_url": ..., "home": ..., "writer": 0}'

It prints ``READY {json}`` once its session is warm, then reads one JSON task per stdin line and answers each with
``RESULT {json}`` (or ``FAILED {json}`` with the traceback; the process keeps serving). ``{"task": "stop"}`` or
end of input stops Spark and exits. AWS credentials are the environment's dummy keys set by the test.

Two synchronisation points, both plain files in a folder the test chose:

- the *barrier*: each writer touches ``ready-<writer>`` once its table work is set up, and waits for all;
- the *gate*: a Python UDF inside the source of a MERGE. Spark pins the table snapshot a MERGE reads while
  planning, and evaluates the UDF while executing, so when every writer's UDF waits for every other writer's,
  all of them have read the same snapshot before any of them can commit: their race is certain, not likely.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

T0_EPOCH = 1_735_689_600  # 2025-01-01T00:00:00Z: observation times are whole hours after it
RECORD_COLUMNS = "id bigint, a string, b bigint, hour int"
BARRIER_TIMEOUT = 120.0
GATE_TIMEOUT = 60.0

# Every run_with_retries call apply_observations makes, and the conflicts each retried (filled by _count_retries).
RETRIES: list[dict] = []


def settings_from(args: dict):
    from etr_assets.settings import Settings

    return Settings(
        profile="s3",
        bucket=args["bucket"],
        s3_endpoint=args["endpoint"],
        jdbc_url=args["jdbc_url"],
        jdbc_user="postgres",
        home=Path(args["home"]),
        driver_memory=args.get("driver_memory", "512m"),
        shuffle_partitions=1,  # a few hundred rows: one task per stage instead of four, on one task thread
    )


def scd2_spec(name: str):
    """A small SCD2 entity like test_scd2's SPEC, clustered like LANDING_MERCHANTS."""
    from etr_assets.lake.specs import SCD2_COLUMNS, Column, Scd2, TableSpec

    return TableSpec(
        namespace="conc",
        name=name,
        description="concurrent SCD2 writers",
        columns=(
            Column("id", "bigint", required=True),
            Column("a", "string"),
            Column("b", "bigint"),
            Column("updated_at", "timestamp", required=True),
            *SCD2_COLUMNS,
        ),
        write_order=("id", "_valid_from"),
        scd2=Scd2(key="id", tracked=("a", "b"), sequence="updated_at"),
    )


def plain_spec(name: str):
    from etr_assets.lake.specs import Column, TableSpec

    return TableSpec(
        namespace="conc",
        name=name,
        description="concurrent plain MERGEs",
        columns=(Column("id", "bigint", required=True), Column("v", "string")),
    )


# --- synchronisation ----------------------------------------------------------------------------------------
def wait_for_all(folder: str, prefix: str, writer: int, writers: int, timeout: float = BARRIER_TIMEOUT) -> None:
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    (path / f"{prefix}-{writer}").touch()
    deadline = time.monotonic() + timeout
    while len(list(path.glob(f"{prefix}-*"))) < writers:
        if time.monotonic() > deadline:
            raise TimeoutError(f"writer {writer}: the other writers never reached {path.name}/{prefix}")
        time.sleep(0.05)


def gate(folder: str, writer: int, writers: int):
    """A Python UDF returning its argument, once every writer's query has reached it (see the module doc)."""
    from pyspark.sql.functions import udf

    def through(value):
        import pathlib
        import time as clock

        path = pathlib.Path(folder)
        (path / f"in-{writer}").touch()
        deadline = clock.monotonic() + GATE_TIMEOUT
        while len(list(path.glob("in-*"))) < writers:
            if clock.monotonic() > deadline:  # never hang a test: go on, and say so
                (path / f"late-{writer}").touch()
                break
            clock.sleep(0.02)
        return value

    return udf(through, "bigint")


def describe(error: BaseException | None) -> str | None:
    """The Java exception behind a py4j error (its Python text is only "An error occurred while calling ...")."""
    if error is None:
        return None
    java = getattr(error, "java_exception", None)
    text = java.toString() if java is not None else f"{type(error).__name__}: {error}"
    return text.splitlines()[0][:400]


def gate_was_late(folder: str | None) -> bool:
    return bool(folder) and any(Path(folder).glob("late-*"))


# --- tasks ------------------------------------------------------------------------------------------------
def records_frame(spark, rows: list[list]):
    """Observations (id, a, b, hour) as the records apply_observations takes: one batch per hour."""
    from pyspark.sql import functions as F

    from etr_assets.lake.frames import local_frame

    df = local_frame(spark, [tuple(r) for r in rows], RECORD_COLUMNS)
    updated = F.timestamp_seconds(F.lit(T0_EPOCH) + F.col("hour").cast("bigint") * 3600)
    return df.select(
        "id",
        "a",
        "b",
        updated.alias("updated_at"),
        F.format_string("h%03d", F.col("hour")).alias("_batch_id"),
        F.format_string("obs/h%03d.jsonl", F.col("hour")).alias("_source_file"),
        updated.alias("_snapshot_at"),
    )


def run_scd2_rounds(spark, settings, writer: int, args: dict) -> dict:
    """Create (writer 0) the SCD2 table, meet the others, then apply each round's observations."""
    from pyspark.sql import functions as F

    from etr_assets.errors import CommitConflictError
    from etr_assets.lake.evolve import ensure_table
    from etr_assets.lake.feeds import FeedMode
    from etr_assets.lake.frames import local_frame
    from etr_assets.lake.scd2 import apply_observations

    spec = scd2_spec(args["table"])
    if args.get("create"):
        ensure_table(spark, settings.catalog, spec)
    wait_for_all(args["barrier"], "ready", writer, args["writers"])
    started = time.monotonic()
    rounds = []
    for number, rows in enumerate(args["rounds"]):
        records = records_frame(spark, rows)
        if args.get("gate") and number == 0:
            # The first round's source waits inside the query for every writer: all read the same snapshot.
            records = records.withColumn("id", gate(args["gate"], writer, args["writers"])(F.col("id")))
        keys = local_frame(spark, sorted({(r[0],) for r in rows}), "id bigint")
        before = len(RETRIES)
        entry = {"round": number, "observations": len(rows)}
        try:
            result = apply_observations(spark, settings.catalog, spec, records, FeedMode.INCREMENTAL, keys=keys)
            entry |= {
                "inserted": result.inserted,
                "updated": result.updated,
                "deleted": result.deleted,
                "changed": result.changed,
                "snapshot_id": None if result.snapshot_id is None else str(result.snapshot_id),
            }
        except CommitConflictError as error:  # every attempt lost: reported, the test decides
            entry |= {"gave_up": str(error), "cause": describe(error.__cause__)}
        entry["retries"] = RETRIES[before:]
        entry["seconds"] = round(time.monotonic() - started, 2)
        rounds.append(entry)
    return {"writer": writer, "rounds": rounds, "gate_late": gate_was_late(args.get("gate"))}


def run_insert_only_merge(spark, settings, writer: int, args: dict) -> dict:
    """`MERGE ... WHEN NOT MATCHED THEN INSERT *` of the same source rows as the other writers."""
    from pyspark.sql import functions as F

    from etr_assets.lake.evolve import ensure_table
    from etr_assets.lake.frames import local_frame

    spec = plain_spec(args["table"])
    target = spec.qualified(settings.catalog)
    if args.get("create"):
        ensure_table(spark, settings.catalog, spec)
        seed = local_frame(spark, [(i, "seed") for i in args["seed_ids"]], "id bigint, v string")
        seed.writeTo(target).append()
    wait_for_all(args["barrier"], "ready", writer, args["writers"])
    source = local_frame(spark, [(i, f"w{writer}") for i in args["source_ids"]], "id bigint, v string")
    source = source.withColumn("id", gate(args["gate"], writer, args["writers"])(F.col("id")))
    view = f"insert_only_src_{writer}"
    source.createOrReplaceTempView(view)
    spark.sql(f"MERGE INTO {target} t USING {view} s ON t.id = s.id WHEN NOT MATCHED THEN INSERT *")
    spark.catalog.dropTempView(view)
    latest = spark.sql(
        f"SELECT snapshot_id, operation FROM {target}.snapshots ORDER BY committed_at DESC LIMIT 1"
    ).first()
    return {"writer": writer, "operation": latest["operation"], "gate_late": gate_was_late(args["gate"])}


def run_merge_with_retries(spark, settings, writer: int, args: dict) -> dict:
    """An upsert MERGE on rows every writer touches, through run_with_retries with `attempts` attempts."""
    from pyspark.sql import functions as F

    from etr_assets.errors import CommitConflictError
    from etr_assets.lake.evolve import ensure_table
    from etr_assets.lake.frames import local_frame
    from etr_assets.lake.retry import run_with_retries

    spec = plain_spec(args["table"])
    target = spec.qualified(settings.catalog)
    if args.get("create"):
        ensure_table(spark, settings.catalog, spec)
        local_frame(spark, [(i, "seed") for i in args["ids"]], "id bigint, v string").writeTo(target).append()
    wait_for_all(args["barrier"], "ready", writer, args["writers"])
    source = local_frame(spark, [(i, args["value"]) for i in args["ids"]], "id bigint, v string")
    source = source.withColumn("id", gate(args["gate"], writer, args["writers"])(F.col("id")))
    view = f"upsert_src_{writer}"
    source.createOrReplaceTempView(view)
    retried: list[str] = []

    def merge() -> None:
        spark.sql(
            f"MERGE INTO {target} t USING {view} s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET t.v = s.v WHEN NOT MATCHED THEN INSERT *"
        )

    def refresh(attempt: int, error: BaseException) -> None:
        retried.append(describe(error))
        spark.sql(f"REFRESH TABLE {target}")

    outcome: dict = {"writer": writer, "value": args["value"]}
    try:
        run_with_retries(merge, args["what"], attempts=args["attempts"], base_delay=0.2, on_retry=refresh)
        outcome["ok"] = True
    except CommitConflictError as error:
        cause = error.__cause__
        outcome |= {"ok": False, "error_type": type(error).__name__, "message": str(error), "cause": describe(cause)}
    finally:
        spark.catalog.dropTempView(view)
    outcome |= {"retries": retried, "gate_late": gate_was_late(args["gate"])}
    return outcome


TASKS = {
    "scd2_rounds": run_scd2_rounds,
    "insert_only_merge": run_insert_only_merge,
    "merge_with_retries": run_merge_with_retries,
}


# --- the process --------------------------------------------------------------------------------------------
def _count_retries() -> None:
    """Record every conflict apply_observations retries, keeping its own on_retry (REFRESH TABLE)."""
    from etr_assets.lake import retry, scd2

    original = retry.run_with_retries

    def counting(operation, what, *args, **kwargs):
        inner = kwargs.get("on_retry")

        def on_retry(attempt, error):
            RETRIES.append({"what": what, "attempt": attempt, "error": describe(error)})
            if inner:
                inner(attempt, error)

        kwargs["on_retry"] = on_retry
        return original(operation, what, *args, **kwargs)

    scd2.run_with_retries = counting  # scd2 imported the name: patch it where it is looked up


def start_session(args: dict):
    from etr_assets.lake.session import get_spark, spark_conf

    # UDF workers must be this interpreter (the venv with pyspark), not whatever `python3` PATH finds.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    settings = settings_from(args)
    conf = spark_conf(settings)
    # Short-lived JVMs sharing two cores (as spark_job.py's writers): C1-only JIT and one task thread start
    # faster; the profile's configuration (jars, S3A, JDBC catalog) stays as it is.
    spark = get_spark(
        settings,
        {
            "spark.master": "local[1]",
            "spark.driver.extraJavaOptions": conf["spark.driver.extraJavaOptions"] + " -XX:TieredStopAtLevel=1",
        },
    )
    spark.sql(f"SHOW NAMESPACES IN {settings.catalog}").collect()  # warm up: the JDBC catalog and the planner
    return spark, settings


def main(argv: list[str]) -> int:
    args = json.loads(argv[1])
    writer = int(args["writer"])
    started = time.monotonic()
    spark, settings = start_session(args)
    _count_retries()
    print("READY " + json.dumps({"writer": writer, "seconds": round(time.monotonic() - started, 2)}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        task = json.loads(line)
        if task["task"] == "stop":
            break
        try:
            result = TASKS[task["task"]](spark, settings, writer, task)
            print("RESULT " + json.dumps(result), flush=True)
        except Exception:  # noqa: BLE001 - reported to the test, which fails; the writer serves the next task
            print("FAILED " + json.dumps({"writer": writer, "traceback": traceback.format_exc()}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
