"""Read raw JSON-lines with a spec's schema and split them into accepted rows and quarantined records, each with
the first reason it failed, so that every line is accounted for (docs/raw-zone.md#bad-input-and-quarantine)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
from collections import Counter
from typing import TYPE_CHECKING

from etr_assets.lake.frames import local_frame, parse_exactly
from etr_assets.lake.session import session_conf
from etr_assets.lake.specs import Check, Column

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import SparkSession


@dataclasses.dataclass
class Validated:
    accepted: object  # DataFrame: the declared columns, typed, plus _source_file
    quarantined: object  # DataFrame: source_file, line_number, raw_text, reason[, subject]
    received: int
    accepted_count: int
    quarantined_count: int
    unknown_fields: dict[str, int]
    first_reasons: list[str]
    suppressed_count: int = 0  # records of erased customers dropped (`lake/bronze.py`): received counts them too

    @property
    def reject_rate(self) -> float:
        return self.quarantined_count / self.received if self.received else 0.0

    def release(self) -> None:
        """Done with this day's lines: the persisted lines of its read go once every day of it is released."""
        if self._cached is not None:
            self._cached.release()
            self._cached = None

    _cached: _Shared | None = None


class _Shared:
    """The persisted lines of one read, shared by its days: dropped when the last of them is released."""

    def __init__(self, frame, days: int):
        self.frame, self.holders = frame, days

    def release(self) -> None:
        from py4j.protocol import Py4JError

        self.holders -= 1
        if self.holders == 0:  # a JVM that died (of the error being raised) must not replace that error
            with contextlib.suppress(Py4JError, ConnectionError):
                self.frame.unpersist()


# An unpaired UTF-16 surrogate escape: valid JSON, but no UTF-8 text, so the record is refused alone. Matched after
# each escaped backslash (ESCAPED_BACKSLASH) is made plain, so every backslash left starts an escape.
LONE_SURROGATE = (
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)
ESCAPED_BACKSLASH = r"\\\\"
# from_json reading a line as json_object_keys does: NaN and Infinity are no JSON (from_json's default takes them).
STRICT_JSON = {"allowNonNumericNumbers": "false"}


def _reasons(columns: tuple[Column, ...], checks: tuple[Check, ...], day_column: str | None):
    from pyspark.sql import functions as F

    rules = [
        F.when(F.col("_keys").isNull(), F.lit("not a JSON object")),
        F.when(
            # the regex only where an escape is: it is the costly part
            F.col("raw_text").contains("\\u")
            & F.regexp_replace("raw_text", ESCAPED_BACKSLASH, "_").rlike(LONE_SURROGATE),
            F.lit("text that cannot be encoded: a lone UTF-16 surrogate (\\uD800-\\uDFFF)"),
        ),
    ]
    for c in columns:
        text = F.col(f"_text_{c.name}")
        if c.required:
            rules.append(F.when(text.isNull(), F.lit(f"missing required field {'.'.join(c.path) or c.name}")))
        got = F.concat(F.lit(f"a value of the wrong type: {c.name} expects {c.type}, got "), F.substring(text, 1, 60))
        rules.append(F.when(text.isNotNull() & F.col(c.name).isNull(), got))
    for check in checks:
        broken = ~F.coalesce(F.expr(check.predicate), F.lit(True))
        rules.append(F.when(broken, F.lit(f"out of range: {check.description}")))
    if day_column:  # a line's batch day: none where the batch has no day
        found, day = F.col(day_column), F.col(BATCH_DAY)
        other_day = F.concat(
            F.lit(f"{day_column} "), found.cast("string"), F.lit(" is not the batch day "), day.cast("string")
        )
        rules.append(F.when(found != day, other_day))
    return F.coalesce(*rules)


PARALLEL_LISTING_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"
BATCH_DAY = "_batch_day"  # the day of the batch a line came from (null: a batch without a day)


def read_validated(
    spark: SparkSession,
    files: list[str],
    columns: tuple[Column, ...],
    checks: tuple[Check, ...] = (),
    *,
    day_column: str | None = None,
    day: dt.date | None = None,
    carry_columns: tuple[str, ...] = (),
) -> Validated:
    """Every line of `files` checked against `columns` and `checks`; a quarantined record keeps `carry_columns`."""
    from pyspark.sql import functions as F

    batch_day = lambda _: F.lit(day).cast("date")
    return read_validated_days(spark, files, [day], batch_day, columns, checks, day_column, carry_columns)[day]


def read_validated_days(
    spark: SparkSession,
    files: list[str],
    days: list[dt.date | None],
    batch_day: Callable,
    columns: tuple[Column, ...],
    checks: tuple[Check, ...] = (),
    day_column: str | None = None,
    carry_columns: tuple[str, ...] = (),
) -> dict[dt.date | None, Validated]:
    """The batches of several days validated in one read and one count (a range run's days cost a job, not one each),
    each line's day from `batch_day` of its file's URI; with `day_column`, a record of another day is refused."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if not files:
        lines = local_frame(spark, [], "raw_text string, source_file string, line_number bigint")
    else:  # read a file at a time, so numbering needs no shuffle; lines end as Hadoop's do, at \n, \r\n or \r
        # Local files listed by the driver: Spark lists more than 32 paths with a job of a task per path.
        local = not any("://" in path and not path.startswith("file:") for path in files)
        driver_lists = session_conf(spark, PARALLEL_LISTING_THRESHOLD, str(len(files) + 1))
        with driver_lists if local else contextlib.nullcontext():
            whole = spark.read.text(files, wholetext=True).select(F.input_file_name().alias("source_file"), "value")
        # Java splits at one plain character without a regex, much cheaper than the alternation
        text = F.col("value")
        ends = F.when(text.contains("\r"), F.split(text, "\\r\\n|\\r|\\n")).otherwise(F.split(text, "\n"))
        split = whole.select("source_file", F.posexplode(ends).alias("_index", "raw_text"))
        lines = split.select("raw_text", "source_file", (F.col("_index") + 1).cast("bigint").alias("line_number"))
    lines = lines.withColumn(BATCH_DAY, batch_day(F.col("source_file")))
    line = ("raw_text", "source_file", "line_number", BATCH_DAY)
    names = [c.name for c in columns]
    # The record's top-level fields the columns are read from (a nested column: the first field of its path).
    fields = list(dict.fromkeys(c.path[0] if c.path else c.name for c in columns))
    # One parse into a map of each key's text; a line the map cannot take as json_object_keys would (not strict JSON,
    # a key given twice: a map finds the first value, a JSON reader the last) is read by keys, then fields.
    whole_map = F.from_json("raw_text", T.MapType(T.StringType(), T.StringType()), STRICT_JSON)
    parsed = lines.where(F.trim("raw_text") != "").select(*line, whole_map.alias("_map"))
    map_keys = F.map_keys("_map")
    once = F.col("_map").isNotNull() & (F.size(F.array_distinct(map_keys)) == F.size(map_keys))
    parsed = parsed.select(*line, "_map", once.alias("_once"))
    text_schema = T.StructType([T.StructField(name, T.StringType(), True) for name in fields])
    reparsed = parsed.select(
        *line,
        "_map",
        "_once",
        F.when(F.col("_once"), map_keys).otherwise(F.json_object_keys("raw_text")).alias("_keys"),
        F.when(~F.col("_once"), F.from_json("raw_text", text_schema)).alias("_fields"),
    )

    def field_text(name: str):
        return F.when(F.col("_once"), F.col("_map")[name]).otherwise(F.col(f"_fields.`{name}`"))

    def column_text(column: Column):
        if len(column.path) < 2:
            return field_text(column.path[0] if column.path else column.name)
        return F.get_json_object(field_text(column.path[0]), "$." + ".".join(column.path[1:]))

    texts = reparsed.select(*line, "_keys", *[column_text(c).alias(f"_text_{c.name}") for c in columns])
    typed = texts.select(
        *line,
        "_keys",
        *[f"_text_{n}" for n in names],
        *[parse_exactly(F.col(f"_text_{c.name}"), c.type).alias(c.name) for c in columns],
    )
    known = F.array(*[F.lit(n) for n in fields])
    reason = _reasons(columns, checks, day_column).alias("_reason")
    checked = typed.select(*line, *names, reason, F.array_except("_keys", known).alias("_unknown"))
    # only a refused line's text is kept (what quarantine stores)
    undeclared = F.col("_unknown")
    checked = checked.select(
        F.when(F.col("_reason").isNotNull(), F.col("raw_text")).alias("raw_text"),
        *line[1:],
        *names,
        "_reason",
        F.when(F.size(undeclared) > 0, undeclared).alias("_unknown"),
    )
    # Counted, then written: kept on local disk in between (in the heap it competed with the writes), uncompressed
    # (cheaper than compressing); the setting is read where the cache is declared and where the count builds it.
    outcome = F.when(F.col("_reason").isNull(), "accepted").otherwise("quarantined")
    verdict = F.struct(F.lit(False).alias("unknown"), outcome.alias("name"))
    unknown_fields = F.transform(
        F.coalesce("_unknown", F.array().cast("array<string>")),
        lambda field: F.struct(F.lit(True).alias("unknown"), field.alias("name")),
    )
    with session_conf(spark, "spark.sql.inMemoryColumnarStorage.compressed", "false"):
        checked = checked.persist(StorageLevel.DISK_ONLY)
        # One job counts both, per batch day: each line's verdict, and each field of it the spec does not declare.
        entry = F.explode(F.concat(F.array(verdict), unknown_fields)).alias("entry")
        tally = checked.select(BATCH_DAY, entry).groupBy(BATCH_DAY, "entry").count().collect()
    counted = {day: Counter() for day in days}
    unknown = {day: Counter() for day in days}
    for row in tally:
        (unknown if row["entry"]["unknown"] else counted)[row[BATCH_DAY]][row["entry"]["name"]] = row["count"]
    refused = checked.where(F.col("_reason").isNotNull())
    first: dict[dt.date | None, list[str]] = {day: [] for day in days}
    if any(found["quarantined"] for found in counted.values()):  # each day's first 5 refused lines, in one job
        place = Window.partitionBy(BATCH_DAY).orderBy("source_file", "line_number")
        ranked = refused.select(
            BATCH_DAY, "source_file", "line_number", "_reason", F.row_number().over(place).alias("n")
        )
        for r in ranked.where("n <= 5").orderBy(BATCH_DAY, "n").collect():
            first[r[BATCH_DAY]].append(f"{r['source_file'].rsplit('/', 1)[-1]}:{r['line_number']}: {r['_reason']}")
    carried = [F.col(name) for name in dict.fromkeys(carry_columns)]
    shared = _Shared(checked, len(days))
    validated = {}
    for day, found in counted.items():
        of_day = checked.where(F.col(BATCH_DAY).eqNullSafe(F.lit(day).cast("date")))
        accepted = of_day.where(F.col("_reason").isNull()).select(*names, F.col("source_file").alias("_source_file"))
        quarantined = of_day.where(F.col("_reason").isNotNull()).select(
            "source_file", "line_number", "raw_text", F.col("_reason").alias("reason"), *carried
        )
        # limit 0: an empty relation to the optimizer, so writing an empty side does not scan the persisted lines
        validated[day] = Validated(
            accepted=accepted if found["accepted"] else accepted.limit(0),
            quarantined=quarantined if found["quarantined"] else quarantined.limit(0),
            received=found["accepted"] + found["quarantined"],
            accepted_count=found["accepted"],
            quarantined_count=found["quarantined"],
            unknown_fields=dict(unknown[day]),
            first_reasons=first[day],
            _cached=shared,
        )
    return validated
