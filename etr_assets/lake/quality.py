"""Data-quality figures, kept in monitoring.data_quality_metrics so trends can be queried."""

from __future__ import annotations

import dataclasses
import datetime as dt

from etr_assets.lake.evolve import ensure_table
from etr_assets.lake.frames import spark_schema
from etr_assets.lake.writes import append
from etr_assets.tables.operations import DATA_QUALITY_METRICS


@dataclasses.dataclass(frozen=True)
class Metric:
    table_name: str
    metric: str
    value: float | None
    passed: bool | None = None
    partition_key: str | None = None


def record_metrics(spark, catalog: str, metrics: list[Metric], run_id: str = "") -> None:
    measured_at = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    rows = [
        {**dataclasses.asdict(m), "value": None if m.value is None else float(m.value), "measured_at": measured_at, "run_id": run_id}
        for m in metrics
    ]
    ensure_table(spark, catalog, DATA_QUALITY_METRICS)
    append(spark, DATA_QUALITY_METRICS.qualified(catalog), spark.createDataFrame(rows, spark_schema(DATA_QUALITY_METRICS.columns)))
