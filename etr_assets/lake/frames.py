"""Spark schemas and column order derived from table specs."""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import json
import uuid
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from etr_assets.lake.specs import SIMPLE_TYPES, Column, TableSpec, decimal_type

if TYPE_CHECKING:  # for annotations only: pyspark is imported inside the functions that use it
    from pyspark.sql import Column as SqlColumn
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType


def spark_type(type_name: str) -> DataType:
    from pyspark.sql import types as T

    if type_name in SIMPLE_TYPES:
        return getattr(T, SIMPLE_TYPES[type_name][0])()
    if decimal := decimal_type(type_name):
        return T.DecimalType(*decimal)
    raise ValueError(f"unsupported column type {type_name!r}")


# The text a JSON value must have to be read as each type: Spark's casts are lenient (1.5 into an integer truncates,
# "NaN" is a double, a date takes trailing text), so input not exactly of the type is refused instead of changed.
_EXACT_TEXT = {
    "bigint": r"^-?[0-9]{1,19}$",
    "int": r"^-?[0-9]{1,10}$",
    "double": r"^-?[0-9]+([.][0-9]+)?([eE][-+]?[0-9]+)?$",
    "float": r"^-?[0-9]+([.][0-9]+)?([eE][-+]?[0-9]+)?$",
    "boolean": r"^(true|false)$",
    "date": r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
    "timestamp": r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T "
    "][0-9]{2}:[0-9]{2}(:[0-9]{2}([.][0-9]{1,9})?)?(Z|[-+][0-9]{2}(:?[0-9]{2})?)?$",
}


def parse_exactly(text: SqlColumn, type_name: str) -> SqlColumn:
    """`text` (a string column) as `type_name`, or NULL when the text is not exactly a value of that type: the
    integer, decimal (within its precision and scale), finite number, boolean, date or ISO-8601 timestamp."""
    from pyspark.sql import functions as F

    if type_name == "string":
        return text
    if decimal := decimal_type(type_name):
        whole, fraction = decimal[0] - decimal[1], decimal[1]
        pattern = rf"^-?[0-9]{{1,{max(whole, 1)}}}" + (rf"([.][0-9]{{1,{fraction}}})?$" if fraction else "$")
    else:
        pattern = _EXACT_TEXT[type_name]
    value = text.cast(spark_type(type_name))
    if type_name in ("double", "float"):
        value = F.when(~F.isnan(value) & (F.abs(value) != F.lit(float("inf"))), value)
    return F.when(text.rlike(pattern), value)


def spark_schema(columns: Iterable[Column]) -> StructType:
    """A StructType for reading input with exactly these columns (all nullable: input may lack them)."""
    from pyspark.sql import types as T

    return T.StructType([T.StructField(c.name, spark_type(c.type), True) for c in columns])


def _json_value(value):
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()  # a naive timestamp is read in the session's time zone (UTC)
    if isinstance(value, decimal.Decimal):
        return str(value)  # exactly: Spark reads a decimal from a JSON string
    raise TypeError(f"cannot put {type(value).__name__} {value!r} in a local frame")


def local_frame(spark: SparkSession, rows: Iterable[dict | tuple], schema: StructType | str) -> DataFrame:
    """Rows made in this process (bookkeeping records, ids) as a one-partition DataFrame of `schema`: the JVM parses
    one JSON literal, where `createDataFrame` pickles through a Python worker per core (and writes a file each)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if isinstance(schema, str):
        schema = T._parse_datatype_string(schema)  # noqa: SLF001 (what createDataFrame does with a DDL string)
    names = schema.fieldNames()
    records = [row if isinstance(row, dict) else dict(zip(names, row, strict=True)) for row in rows]
    payload = json.dumps(records, default=_json_value, allow_nan=False)
    parsed = F.from_json(F.lit(payload), T.ArrayType(schema))
    return spark.range(1, numPartitions=1).select(F.inline(parsed)).select(*names)


def conform(df: DataFrame, spec: TableSpec) -> DataFrame:
    """Select the spec's columns in its order, cast to its types: what the table expects, nothing else."""
    present = set(df.columns)  # each `df.columns` asks the JVM for the schema
    if missing := [c.name for c in spec.columns if c.name not in present]:
        raise ValueError(f"cannot write {spec.identifier}: the data lacks columns {missing}")
    # SQL text, not Column objects: each Column costs py4j round trips, and every write conforms its frame.
    return df.selectExpr(
        *[f"CAST({quoted(c.name)} AS {spark_type(c.type).simpleString()}) AS {quoted(c.name)}" for c in spec.columns]
    )


@contextlib.contextmanager
def temp_view(spark: SparkSession, frame: DataFrame, prefix: str) -> Iterator[str]:
    """A temporary view of `frame` (made in `frame`'s session), named `prefix` and 12 random hex digits, dropped
    from `spark`'s catalog on leaving: how a MERGE or a DELETE statement reads rows made in Python."""
    view = f"{prefix}_{uuid.uuid4().hex[:12]}"
    frame.createOrReplaceTempView(view)
    try:
        yield view
    finally:
        spark.catalog.dropTempView(view)


def quoted(name: str) -> str:
    """`name` as a SQL identifier (backticks, a backtick inside doubled)."""
    return "`" + name.replace("`", "``") + "`"


def count_by_day(df: DataFrame, days: list[dt.date], column: str) -> dict[str, int]:
    """Rows of `df` per day of `column`, for each of `days` (0 for a day without rows)."""
    found = {row[0].isoformat(): row[1] for row in df.groupBy(column).count().collect()}
    return {day.isoformat(): found.get(day.isoformat(), 0) for day in sorted(days)}
