"""Spark schemas and column order derived from table specs."""

from __future__ import annotations

from collections.abc import Iterable

from etr_assets.lake.specs import _DECIMAL, Column, TableSpec


def spark_type(type_name: str):
    from pyspark.sql import types as T

    simple = {
        "string": T.StringType(),
        "bigint": T.LongType(),
        "int": T.IntegerType(),
        "float": T.FloatType(),
        "double": T.DoubleType(),
        "boolean": T.BooleanType(),
        "date": T.DateType(),
        "timestamp": T.TimestampType(),
    }
    if type_name in simple:
        return simple[type_name]
    match = _DECIMAL.match(type_name)
    if match:
        return T.DecimalType(int(match.group(1)), int(match.group(2)))
    raise ValueError(f"unsupported column type {type_name!r}")


def spark_schema(columns: Iterable[Column]):
    """A StructType for reading input with exactly these columns (all nullable: input may lack them)."""
    from pyspark.sql import types as T

    return T.StructType([T.StructField(c.name, spark_type(c.type), True) for c in columns])


def conform(df, spec: TableSpec):
    """Select the spec's columns in its order, cast to its types: what the table expects, nothing else."""
    from pyspark.sql import functions as F

    missing = [c.name for c in spec.columns if c.name not in df.columns]
    if missing:
        raise ValueError(f"cannot write {spec.identifier}: the data lacks columns {missing}")
    return df.select([F.col(c.name).cast(spark_type(c.type)).alias(c.name) for c in spec.columns])
