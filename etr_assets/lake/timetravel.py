"""Reading a table as it was, comparing with the past, and rolling back with a recorded reason."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import TYPE_CHECKING

from etr_assets.errors import NoSuchSnapshot, NotAnAncestor
from etr_assets.lake.bookkeeping import TABLE_CHANGES, record_rows
from etr_assets.lake.writes import current_snapshot_id

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def naive_utc(when: dt.datetime) -> dt.datetime:
    """Spark's session clock is UTC without a zone: compare like with like."""
    return when.astimezone(dt.UTC).replace(tzinfo=None) if when.tzinfo else when


def snapshot_as_of(spark: SparkSession, qualified: str, when: dt.datetime) -> int:
    """The id of the snapshot that was current at `when` (UTC if naive)."""
    from pyspark.sql import functions as F

    row = (
        spark.table(f"{qualified}.history")
        .where(F.col("made_current_at") <= F.lit(naive_utc(when)))
        .orderBy(F.col("made_current_at").desc())
        .select("snapshot_id")
        .first()
    )
    if row is None:
        raise NoSuchSnapshot(f"table {qualified} has no snapshot at or before {when.isoformat()}")
    return row[0]


def read_as_of(
    spark: SparkSession, qualified: str, *, snapshot_id: int | None = None, when: dt.datetime | None = None
) -> DataFrame:
    """The table as of a snapshot id or a point in time (exactly one of them)."""
    if (snapshot_id is None) == (when is None):
        raise ValueError("give exactly one of snapshot_id or when")
    if when is not None:
        snapshot_id = snapshot_as_of(spark, qualified, when)  # a clear error, where Iceberg's is not
    elif snapshot_id not in {r[0] for r in spark.sql(f"SELECT snapshot_id FROM {qualified}.snapshots").collect()}:
        raise NoSuchSnapshot(f"table {qualified} has no snapshot {snapshot_id} (it may have expired)")
    return spark.read.format("iceberg").option("snapshot-id", snapshot_id).load(qualified)


@dataclasses.dataclass(frozen=True)
class Growth:
    table: str
    rows_now: int
    rows_before: int
    since: dt.datetime

    @property
    def added(self) -> int:
        return self.rows_now - self.rows_before

    @property
    def ratio(self) -> float | None:
        return self.rows_now / self.rows_before if self.rows_before else None


def daily_growth(
    spark: SparkSession, qualified: str, now: dt.datetime | None = None, window: dt.timedelta = dt.timedelta(days=1)
) -> Growth:
    """Rows now against rows a day earlier, through time travel (requirement R1's validate_data_quality)."""
    since = (now or dt.datetime.now(dt.UTC)) - window
    rows_now = spark.table(qualified).count()
    try:
        rows_before = read_as_of(spark, qualified, when=since).count()
    except NoSuchSnapshot:
        rows_before = 0  # the table did not exist yet
    return Growth(qualified, rows_now, rows_before, since)


def rollback(
    spark: SparkSession, catalog: str, qualified: str, snapshot_id: int, reason: str, run_id: str = ""
) -> dict:
    """Make `snapshot_id` current again and record who asked and why in audit.table_changes."""
    if not reason.strip():
        raise ValueError(f"rolling back {qualified} needs a reason")
    read_as_of(spark, qualified, snapshot_id=snapshot_id)  # validates the id
    before = current_snapshot_id(spark, qualified)
    # the current snapshot and its ancestors (what `rollback_to_snapshot` accepts)
    parents = {r[0]: r[1] for r in spark.sql(f"SELECT snapshot_id, parent_id FROM {qualified}.snapshots").collect()}
    ancestors, snapshot = [], before
    while snapshot is not None and snapshot not in ancestors:
        ancestors.append(snapshot)
        snapshot = parents.get(snapshot)
    if snapshot_id not in ancestors:
        raise NotAnAncestor(
            f"cannot roll {qualified} back to snapshot {snapshot_id}: it is not an ancestor of the current snapshot "
            f"{before} (it belongs to another branch or to history a rollback left behind); pick one of "
            f"`SELECT snapshot_id, made_current_at FROM {qualified}.history WHERE is_current_ancestor`"
        )
    identifier = qualified.split(".", 1)[1]
    spark.sql(f"CALL {catalog}.system.rollback_to_snapshot(table => '{identifier}', snapshot_id => {int(snapshot_id)})")
    before = None if before is None else str(before)
    return record_change(spark, catalog, qualified, "ROLLBACK", before, str(snapshot_id), reason, run_id)


def record_change(spark: SparkSession, catalog: str, table: str, action: str, before, after, reason: str, run_id: str):
    """Who made which snapshot of `table` current, and why, as a row of audit.table_changes."""
    record = {
        "table_name": table,
        "action": action,
        "from_snapshot_id": before,
        "to_snapshot_id": after,
        "reason": reason,
        "run_id": run_id,
        "executed_at": dt.datetime.now(dt.UTC).replace(tzinfo=None),
    }
    record_rows(spark, catalog, TABLE_CHANGES, [record])
    return record
