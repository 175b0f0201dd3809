"""Data-quality checks of a table's days (docs/quality-and-health.md): each `CheckOutcome` has a figure per day, so
one outcome is both a Dagster check result and a metric row per day in monitoring.data_quality_metrics."""

from __future__ import annotations

import dataclasses
import datetime as dt
import statistics
from collections import Counter
from enum import StrEnum
from typing import TYPE_CHECKING

from etr_assets.lake.bookkeeping import DATA_QUALITY_METRICS, record_rows
from etr_assets.lake.metadata import MainChange
from etr_assets.lake.session import java_class
from etr_assets.lake.specs import CURRENT_VERSIONS, Reference, TableSpec
from etr_assets.lake.writes import EPOCH, day_field_positions, files_of_days, iceberg_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Keys a reference check looks up by value outside `most_keys`; beyond that the check reads the whole table.
LOOKUP_KEYS = 1_000


class Severity(StrEnum):
    """How bad a finding is: a check that fails with ERROR blocks, WARN only warns; OK is a health verdict's best."""

    OK = "OK"
    WARN = "WARN"
    ERROR = "ERROR"


@dataclasses.dataclass(frozen=True)
class Metric:
    table_name: str
    metric: str
    value: float | None
    passed: bool | None = None
    partition_key: str | None = None


@dataclasses.dataclass(frozen=True)
class CheckOutcome:
    name: str
    description: str
    passed: bool
    violations: int  # rows breaking the rule (or 1 for a table-level verdict such as an anomaly)
    examples: str = ""
    severity: Severity = Severity.ERROR
    by_day: dict[str, float] = dataclasses.field(default_factory=dict)  # the measured figure per partition day
    figures: dict[str, float] = dataclasses.field(default_factory=dict)  # further numbers for the UI
    # Days the check judged failed; None: a day fails when its figure (a count of violations) is not 0.
    days_failed: tuple[str, ...] | None = None

    def day_verdicts(self) -> dict[str, bool]:
        """Passed or not, per day of `by_day`. A check that failed without any day to blame (a key repeated on
        days outside the run's) fails on every day, so no day reads as passed while the check failed."""
        failed = self.days_failed
        verdicts = {day: day not in failed if failed is not None else value == 0 for day, value in self.by_day.items()}
        return dict.fromkeys(verdicts, False) if not self.passed and all(verdicts.values()) else verdicts


def record_metrics(spark: SparkSession, catalog: str, metrics: list[Metric], run_id: str = "") -> None:
    extra = {"measured_at": dt.datetime.now(dt.UTC).replace(tzinfo=None), "run_id": run_id}
    rows = [{**dataclasses.asdict(m), "value": None if m.value is None else float(m.value), **extra} for m in metrics]
    record_rows(spark, catalog, DATA_QUALITY_METRICS, rows)


def metrics_of(spec: TableSpec, outcomes: list[CheckOutcome]) -> list[Metric]:
    """One row per check and day (or one per check when it has no days)."""
    metrics = []
    for o in outcomes:
        if o.by_day:
            verdicts = o.day_verdicts()
            for day, value in sorted(o.by_day.items()):
                metrics.append(Metric(spec.identifier, o.name, value, verdicts[day], day))
        else:
            metrics.append(Metric(spec.identifier, o.name, float(o.violations), o.passed))
    return metrics


def _every_day(found: dict[dt.date | None, int], days: list[dt.date]) -> dict[str, float]:
    """A figure for each of `days` (0 where none was found), keyed by ISO date."""
    return {d.isoformat(): float(found.get(d, 0)) for d in sorted(days)}


def _per_day(df: DataFrame | None, day_column: str | None, days: list[dt.date]) -> dict[str, float]:
    """Rows of `df` (None: no rows) on each of `days`; none without a day column."""
    if day_column is None:
        return {}
    return _every_day(dict(df.groupBy(day_column).count().collect()) if df is not None else {}, days)


def split_by_record_rules(df: DataFrame, spec: TableSpec) -> tuple[DataFrame, DataFrame | None]:
    """(rows keeping every per-record expectation of `spec`, the others with the first broken as `reason`)."""
    from pyspark.sql import functions as F

    if not (rules := [c for c in spec.expectations if c.per_record]):
        return df, None
    reason = F.coalesce(*[F.when(~F.coalesce(F.expr(c.predicate), F.lit(True)), F.lit(c.description)) for c in rules])
    marked = df.withColumn("_broken", reason)
    kept = marked.where(F.col("_broken").isNull()).drop("_broken")
    held = marked.where(F.col("_broken").isNotNull()).withColumnRenamed("_broken", "reason")
    return kept, held.withColumn("quarantined_at", F.current_timestamp())


def record_quarantine_outcome(quarantine_df, day_column: str, days: list[dt.date], table: str) -> CheckOutcome:
    """Rows of `days` held back in a record quarantine (WARN): the rest of each day was published."""
    from pyspark.sql import functions as F

    rows = quarantine_df.where(F.col(day_column).isin(sorted(days)))
    by_day = _per_day(rows, day_column, days)
    count = int(sum(by_day.values()))
    reasons = rows.groupBy("reason").count().orderBy("reason").collect() if count else []
    description = f"no row of the day breaks a per-record expectation (broken rows wait in {table})"
    examples = "; ".join(f"{r['reason']} ({r['count']})" for r in reasons)[:400]
    return CheckOutcome("records_quarantined", description, count == 0, count, examples, Severity.WARN, by_day)


def expectation_outcomes(df: DataFrame, spec: TableSpec, days: list[dt.date]) -> list[CheckOutcome]:
    """Each of the spec's expectations over the rows of `days` (all rows when the table has no day column): one
    Spark job counts every rule's broken rows per day; only a rule that found some reads its examples."""
    from pyspark.sql import functions as F

    checks, day_column = spec.expectations, spec.day_column
    if not checks:
        return []
    rows = df.where(F.col(day_column).isin(sorted(days))) if day_column else df
    broken = [~F.coalesce(F.expr(check.predicate), F.lit(True)) for check in checks]
    counts = [F.count_if(rule).alias(f"_broken_{i}") for i, rule in enumerate(broken)]
    per_group = (rows.groupBy(day_column).agg(*counts) if day_column else rows.agg(*counts)).collect()
    outcomes = []
    for i, check in enumerate(checks):
        if day_column:
            by_day = _every_day({r[0]: r[i + 1] for r in per_group}, days)
            count = sum(r[i + 1] for r in per_group)
        else:
            by_day, count = {}, per_group[0][i] if per_group else 0
        sample = ", ".join(str(r.asDict()) for r in rows.where(broken[i]).limit(2).collect()) if count else ""
        outcomes.append(CheckOutcome(check.name, check.description, count == 0, count, sample[:400], by_day=by_day))
    return outcomes


def uniqueness_outcome(df: DataFrame, spec: TableSpec, days: list[dt.date]) -> CheckOutcome:
    """Keys of `days` held by more than one row anywhere in the table; per day, the repeated rows on that day. Only
    keys between the days' least and greatest are read: a literal range Iceberg prunes files by, planned once."""
    from pyspark.sql import functions as F

    key, day_column = spec.unique_key, spec.day_column
    scope = in_days = df.where(F.col(day_column).isin(sorted(days))) if day_column else df
    if day_column:
        least, greatest = in_days.agg(F.min(key), F.max(key)).first()
        if least is not None:
            near = df.where(F.col(key).between(F.lit(least), F.lit(greatest)))
            scope = near.join(in_days.select(key), key, "left_semi")
    repeated = scope.groupBy(key).count().where("count > 1")
    found = [r[0] for r in repeated.select(key).limit(LOOKUP_KEYS + 1).collect()]
    if len(found) <= LOOKUP_KEYS:
        count, sample = len(found), ", ".join(str(k) for k in found[:5])
        repeated_rows = in_days.where(F.col(key).isin(found)) if found else None
    else:  # too many to carry: counted and joined where they are
        count = repeated.count()
        sample = ", ".join(str(r[key]) for r in repeated.limit(5).collect())
        repeated_rows = in_days.join(repeated.select(key), key, "left_semi")
    by_day = _per_day(repeated_rows, day_column, days)
    return CheckOutcome(f"{key}_is_unique", f"{key} is unique", count == 0, count, sample, by_day=by_day)


def reference_outcome(
    df, spec: TableSpec, reference: Reference, referenced_df, days: list[dt.date], most_keys: str | None = None
) -> CheckOutcome:
    """Rows of `days` whose `reference.column` names no `reference.key` of the referenced table (WARN). `most_keys`:
    a filter holding almost every key; the rest are looked up by value, so a day does not read a whole history."""
    from pyspark.sql import functions as F

    column, day_column = reference.column, spec.day_column
    rows = df.where(F.col(day_column).isin(sorted(days))) if day_column else df
    rows = rows.where(F.col(column).isNotNull())
    known = lambda table: table.select(F.col(reference.key).alias(column)).distinct()
    if most_keys is not None:
        rows = rows.join(known(referenced_df.where(most_keys)), column, "left_anti")
        groups = [column, day_column] if day_column else [column]
        left = rows.groupBy(*groups).count().limit(LOOKUP_KEYS * max(1, len(days)) + 1).collect()
        keys = {r[0] for r in left}
        if len(keys) <= LOOKUP_KEYS and len(left) <= LOOKUP_KEYS * max(1, len(days)):
            looked_up = referenced_df.where(F.col(reference.key).isin(sorted(keys))) if keys else None
            found = {r[0] for r in known(looked_up).collect()} if looked_up is not None else set()
            unknown_rows = [r for r in left if r[0] not in found]
            per_day: Counter = Counter()
            for r in unknown_rows:
                per_day[r[1]] += r["count"]
            by_day = _every_day(per_day, days) if day_column else {}
            count = sum(r["count"] for r in unknown_rows)
            values = [str(v) for v in sorted({r[0] for r in unknown_rows})[:5]]
            return _reference_result(reference, count, values, by_day)
    unknown = rows.join(known(referenced_df), column, "left_anti")
    by_day = _per_day(unknown, day_column, days)
    count = int(sum(by_day.values())) if day_column else unknown.count()
    values = [str(r[0]) for r in unknown.select(column).distinct().limit(5).collect()] if count else []
    return _reference_result(reference, count, values, by_day)


def _reference_result(reference: Reference, count: int, values: list[str], by_day: dict[str, float]) -> CheckOutcome:
    description = f"every {reference.column} is a {reference.key} of {reference.table}"
    return CheckOutcome(reference.name, description, count == 0, count, ", ".join(values), Severity.WARN, by_day)


def rows_per_day(spark: SparkSession, qualified: str, column: str, first: dt.date, last: dt.date):
    """Rows per day of `column` (the table's days() partition) from `first` to `last`, from the record counts in the
    manifests. None when a file there has deletes to apply (its count includes the deleted rows) or another
    partitioning: its rows must be read then."""
    anything, table = java_class(spark, "java.lang.Object")._java_lang_class, iceberg_table(spark, qualified)
    positions, counts = day_field_positions(table, column), Counter()
    for task in files_of_days(spark, table, column, first, last):
        file = task.file()
        if (at := positions.get(int(file.specId()))) is None or not task.deletes().isEmpty():
            return None
        counts[EPOCH + dt.timedelta(days=file.partition().get(at, anything))] += file.recordCount()
    return dict(counts)


def row_count_outcome(df: DataFrame, spec: TableSpec, days: list[dt.date], qualified: str | None = None):
    """Each day's rows against the median of up to `row_count_window_days` earlier days that hold rows (WARN).
    `qualified`: the table `df` reads, counted from its manifests (`rows_per_day`) where they can tell."""
    from pyspark.sql import functions as F

    rules, day_column = spec.quality, spec.day_column
    window = rules.row_count_window_days
    first = min(days) - dt.timedelta(days=window)
    counts = rows_per_day(df.sparkSession, qualified, day_column, first, max(days)) if qualified else None
    if counts is None:
        counts = dict(df.where(F.col(day_column).between(first, max(days))).groupBy(day_column).count().collect())
    by_day, anomalies, notes, days_failed = {}, [], [], []
    for day in sorted(days):
        rows = counts.get(day, 0)
        by_day[day.isoformat()] = float(rows)
        history = [n for d, n in counts.items() if day - dt.timedelta(days=window) <= d < day]
        if len(history) < rules.row_count_min_history_days:
            notes.append(f"{day}: {len(history)} earlier day(s), no verdict")
            continue
        median = statistics.median(history)
        if abs(rows - median) > rules.row_count_tolerance * median:
            anomalies.append(f"{day}: {rows} rows against a median of {median:g}")
            days_failed.append(day.isoformat())
    return CheckOutcome(
        "row_count_anomaly",
        f"each day's rows within {rules.row_count_tolerance:.0%} of the median of the {window} days before",
        not anomalies,
        len(anomalies),
        "; ".join(anomalies or notes)[:400],
        severity=Severity.WARN,
        by_day=by_day,
        days_failed=tuple(days_failed),
    )


def outside_commits_outcome(
    outside: list[MainChange], since: str, judged: int, note: str = "", shown: int = 10
) -> CheckOutcome:
    """The moves of main since `since` that Dagster recorded no event of (another tool committed, or rolled back),
    each named (WARN). `judged`: the moves judged; `note`: e.g. why later moves wait."""
    listed = "; ".join(change.describe() for change in outside[:shown])
    if len(outside) > shown:
        listed += f"; and {len(outside) - shown} more"
    later = f" ({note})" if note else ""
    if outside:
        count = f"{len(outside)} commit{'s' if len(outside) > 1 else ''}"
        description = f"{count} outside Dagster since {since}: {listed}{later}"
    else:
        description = f"no commit outside Dagster since {since}: {judged} change(s) of main, all Dagster's{later}"
    figures = {"changes_judged": float(judged)}
    return CheckOutcome(
        "commits_outside_dagster", description, not outside, len(outside), listed, Severity.WARN, figures=figures
    )


def post_write_outcomes(
    spark: SparkSession,
    catalog: str,
    spec: TableSpec,
    days: list[dt.date],
    expectations: bool,
    written_rows: str | None = None,
) -> list[CheckOutcome]:
    """Expectations (unless already run on an audit branch), references and the row-count anomaly over what main
    now holds. `written_rows`: a filter of what the write changed in a table without days."""
    table = spark.table(spec.qualified(catalog))
    written = table.where(written_rows) if written_rows and not spec.day_column else table
    outcomes = expectation_outcomes(written, spec, days) if expectations else []
    for reference in spec.quality.references:
        referenced = f"{catalog}.{reference.table}"
        if spark.catalog.tableExists(referenced):
            target = spark.table(referenced)
            most_keys = CURRENT_VERSIONS if "_valid_to" in target.columns else None  # an SCD2 history
            outcomes.append(reference_outcome(table, spec, reference, target, days, most_keys))
        else:
            missing = f"{reference.table} was never written: nothing to check against"
            outcomes.append(CheckOutcome(reference.name, f"{reference.table} exists", False, 0, missing, Severity.WARN))
    if spec.day_column:
        outcomes.append(row_count_outcome(table, spec, days, spec.qualified(catalog)))
    return outcomes
