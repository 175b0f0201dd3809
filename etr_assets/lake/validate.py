"""Read raw JSON-lines with a spec's schema and split them into accepted rows and quarantined records.

Every line is accounted for: received = accepted + quarantined (+ suppressed, once bronze drops the records of
erased customers: `lake/bronze.py`). A refused record keeps its raw text, file, line
and the first reason it failed: not a JSON object, text that cannot be encoded, a missing required field, a value
of the wrong type (the text must be exactly a value of the column's type: `frames.parse_exactly`), a rule of the
spec (`Check`), or a business day other than the batch's. Fields the spec does not know are counted (they stay
in the raw zone; bronze keeps the declared columns).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt

from etr_assets.lake.frames import local_frame, parse_exactly
from etr_assets.lake.specs import Check, Column


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
        """Drop the persisted lines. Called in cleanup: a JVM that died (of the error being raised) took them with it,
        and its refused connection must not replace that error."""
        from py4j.protocol import Py4JError

        if self._cached is not None:
            with contextlib.suppress(Py4JError, ConnectionError):
                self._cached.unpersist()

    _cached: object = None


# A \uD800-\uDBFF escape not followed by a \uDC00-\uDFFF one, or one of those not preceded by the first: JSON
# allows it, but the text it stands for cannot be encoded (UTF-8, Parquet), so the record is refused alone. Matched on
# the text with each escaped backslash (ESCAPED_BACKSLASH) made a plain character, so every backslash left starts an
# escape, as a JSON parser reads it: `\\\uD800` is a backslash and a lone surrogate, `\\uD800` six plain characters,
# and `\uD800\\\uDC00` no pair.
LONE_SURROGATE = (
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)
ESCAPED_BACKSLASH = r"\\\\"
# from_json reading a line as json_object_keys does: NaN and Infinity are no JSON (from_json's default takes them).
STRICT_JSON = {"allowNonNumericNumbers": "false"}


def _reasons(columns: tuple[Column, ...], checks: tuple[Check, ...], day_column: str | None, day: dt.date | None):
    from pyspark.sql import functions as F

    rules = [
        F.when(F.col("_keys").isNull(), F.lit("not a JSON object")),
        F.when(
            # The regex only where an escape is: run on every line it took most of the validation's time.
            F.col("raw_text").contains("\\u")
            & F.regexp_replace("raw_text", ESCAPED_BACKSLASH, "_").rlike(LONE_SURROGATE),
            F.lit("text that cannot be encoded: a lone UTF-16 surrogate (\\uD800-\\uDFFF)"),
        ),
    ]
    for c in columns:
        text = F.col(f"_text_{c.name}")
        if c.required:
            rules.append(F.when(text.isNull(), F.lit(f"missing required field {c.name}")))
        rules.append(
            F.when(
                text.isNotNull() & F.col(c.name).isNull(),
                F.concat(
                    F.lit(f"a value of the wrong type: {c.name} expects {c.type}, got "), F.substring(text, 1, 60)
                ),
            )
        )
    for check in checks:
        rules.append(
            F.when(~F.coalesce(F.expr(check.predicate), F.lit(True)), F.lit(f"out of range: {check.description}"))
        )
    if day_column and day:
        rules.append(
            F.when(
                F.col(day_column) != F.lit(day),
                F.concat(
                    F.lit(f"{day_column} "), F.col(day_column).cast("string"), F.lit(f" is not the batch day {day}")
                ),
            )
        )
    return F.coalesce(*rules)


PARALLEL_LISTING_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"
CACHE_COMPRESSED = "spark.sql.inMemoryColumnarStorage.compressed"


@contextlib.contextmanager
def _session_conf(spark, key: str, value: str):
    """The session's `key` set to `value` while the block runs, then as it was."""
    previous = spark.conf.get(key)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        spark.conf.set(key, previous)


@contextlib.contextmanager
def _listed_by_the_driver(spark, files: list[str]):
    """Spark lists more than 32 paths with a job of one task per path (1,030 for a day of a million transactions);
    files on this machine the driver lists itself in a fraction of that. Object stores keep Spark's way."""
    if any("://" in path and not path.startswith("file:") for path in files):
        yield
        return
    with _session_conf(spark, PARALLEL_LISTING_THRESHOLD, str(len(files) + 1)):
        yield


def _numbered_lines(spark, files: list[str]):
    """Each line of `files` with its file and its number in it, read a file at a time (a raw file is one API page):
    numbering lines as they are split needs no shuffle, where numbering rows read line by line needs a window over
    each file. Lines end as Hadoop's text reader ends them: at \\n, \\r\\n or \\r."""
    from pyspark.sql import functions as F

    with _listed_by_the_driver(spark, files):
        whole = spark.read.text(files, wholetext=True).select(F.input_file_name().alias("source_file"), "value")
    # A file without a carriage return splits at the newline character itself: Java splits at one plain character
    # without a regex, which took five times that CPU on a day of a million lines.
    text = F.col("value")
    lines = F.when(text.contains("\r"), F.split(text, "\\r\\n|\\r|\\n")).otherwise(F.split(text, "\n"))
    split = whole.select("source_file", F.posexplode(lines).alias("_index", "raw_text"))
    return split.select("raw_text", "source_file", (F.col("_index") + 1).cast("bigint").alias("line_number"))


def read_validated(
    spark,
    files: list[str],
    columns: tuple[Column, ...],
    checks: tuple[Check, ...] = (),
    *,
    day_column: str | None = None,
    day: dt.date | None = None,
    carry_columns: tuple[str, ...] = (),
) -> Validated:
    """Every line of `files`, checked against `columns` and `checks`; a quarantined record keeps `carry_columns`
    (its subject, its key) when they could be read."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if files:
        lines = _numbered_lines(spark, files)
    else:
        lines = local_frame(spark, [], "raw_text string, source_file string, line_number bigint")
    # One parse of each line where it suffices: every key with its value's text (a string's content, any other value
    # as its JSON text). A line it cannot read as json_object_keys would (NaN and Infinity are no JSON numbers; not an
    # object; malformed), or whose key is given twice (a map keeps both and a lookup finds the first value, where a
    # JSON reader keeps the last), is read as before: its keys, then its fields. Such lines are rare.
    whole_map = F.from_json("raw_text", T.MapType(T.StringType(), T.StringType()), STRICT_JSON)
    parsed = lines.where(F.trim("raw_text") != "").select(
        "raw_text", "source_file", "line_number", whole_map.alias("_map")
    )
    map_keys = F.map_keys("_map")
    once = F.col("_map").isNotNull() & (F.size(F.array_distinct(map_keys)) == F.size(map_keys))
    parsed = parsed.select("raw_text", "source_file", "line_number", "_map", once.alias("_once"))
    text_schema = T.StructType([T.StructField(c.name, T.StringType(), True) for c in columns])
    reparsed = parsed.select(
        "raw_text",
        "source_file",
        "line_number",
        "_map",
        "_once",
        F.when(F.col("_once"), map_keys).otherwise(F.json_object_keys("raw_text")).alias("_keys"),
        F.when(~F.col("_once"), F.from_json("raw_text", text_schema)).alias("_fields"),
    )
    texts = reparsed.select(
        "raw_text",
        "source_file",
        "line_number",
        "_keys",
        *[
            F.when(F.col("_once"), F.col("_map")[c.name]).otherwise(F.col(f"_fields.{c.name}")).alias(f"_text_{c.name}")
            for c in columns
        ],
    )
    typed = texts.select(
        "raw_text",
        "source_file",
        "line_number",
        "_keys",
        *[f"_text_{c.name}" for c in columns],
        *[parse_exactly(F.col(f"_text_{c.name}"), c.type).alias(c.name) for c in columns],
    )
    known = F.array(*[F.lit(c.name) for c in columns])
    checked = typed.select(
        "raw_text",
        "source_file",
        "line_number",
        *[c.name for c in columns],
        _reasons(columns, checks, day_column, day).alias("_reason"),
        F.array_except("_keys", known).alias("_unknown"),
    )
    # Kept for the count and the writes: a refused line's text (what quarantine stores), not an accepted one's.
    undeclared = F.col("_unknown")
    checked = checked.select(
        F.when(F.col("_reason").isNotNull(), F.col("raw_text")).alias("raw_text"),
        "source_file",
        "line_number",
        *[c.name for c in columns],
        "_reason",
        F.when(F.size(undeclared) > 0, undeclared).alias("_unknown"),
    )
    # Counted first, then written (accepted and quarantined rows): parsed once, and kept on local disk in between
    # rather than in the heap, where a day of a million records competed with the writes (and ran out at 1 GB).
    # Uncompressed: Spark's columnar compression weighs every encoding value by value (a third of the validation's
    # CPU) to shrink what is read back once or twice. Spark reads the setting where the cache is declared (in a
    # copy of the session, with adaptive execution) or else where the count builds it: both happen inside.
    outcome = F.when(F.col("_reason").isNull(), "accepted").otherwise("quarantined")
    verdict = F.struct(F.lit(False).alias("unknown"), outcome.alias("name"))
    unknown_fields = F.transform(
        F.coalesce("_unknown", F.array().cast("array<string>")),
        lambda field: F.struct(F.lit(True).alias("unknown"), field.alias("name")),
    )
    with _session_conf(spark, CACHE_COMPRESSED, "false"):
        checked = checked.persist(StorageLevel.DISK_ONLY)
        # One job counts both: each line's verdict, and each field of it the spec does not declare.
        tally = checked.select(F.explode(F.concat(F.array(verdict), unknown_fields)).alias("entry")).groupBy("entry")
        counted = [(row["entry"]["unknown"], row["entry"]["name"], row["count"]) for row in tally.count().collect()]
    unknown = {name: count for is_field, name, count in counted if is_field}
    verdicts = {name: count for is_field, name, count in counted if not is_field}
    accepted_count, quarantined_count = verdicts.get("accepted", 0), verdicts.get("quarantined", 0)
    first = (
        checked.where(F.col("_reason").isNotNull())
        .orderBy("source_file", "line_number")
        .select("source_file", "line_number", "_reason")
        .limit(5)
        .collect()
        if quarantined_count
        else []
    )
    carried = [F.col(name) for name in dict.fromkeys(carry_columns)]
    accepted = checked.where(F.col("_reason").isNull()).select(
        *[c.name for c in columns], F.col("source_file").alias("_source_file")
    )
    quarantined = checked.where(F.col("_reason").isNotNull()).select(
        "source_file", "line_number", "raw_text", F.col("_reason").alias("reason"), *carried
    )
    # A frame the count found empty is never read: limit 0 is an empty relation to Spark's optimizer, so writing it
    # (a day's quarantine replaced by nothing) does not scan the persisted lines again.
    result = Validated(
        accepted=accepted if accepted_count else accepted.limit(0),
        quarantined=quarantined if quarantined_count else quarantined.limit(0),
        received=accepted_count + quarantined_count,
        accepted_count=accepted_count,
        quarantined_count=quarantined_count,
        unknown_fields=unknown,
        first_reasons=[f"{r['source_file'].rsplit('/', 1)[-1]}:{r['line_number']}: {r['_reason']}" for r in first],
    )
    result._cached = checked
    return result
