"""Time travel, daily growth and rollback on a real Iceberg table."""

from __future__ import annotations

import datetime as dt

import pytest

from etr_assets.errors import NoSuchSnapshot, NotAnAncestor
from etr_assets.lake.evolve import ensure_table
from etr_assets.lake.specs import Column, TableSpec
from etr_assets.lake.timetravel import daily_growth, read_as_of, rollback, snapshot_as_of

SPEC = TableSpec(
    namespace="silver",
    name="ledger",
    description="t",
    columns=(Column("id", "bigint"), Column("day", "date")),
    partition_by=("days(day)",),
)


EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def snapshots(lake, table):
    return [r[0] for r in lake.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at").collect()]


@pytest.fixture
def ledger_of_three_commits(lake, settings):
    ensure_table(lake, settings.catalog, SPEC)
    table = SPEC.qualified(settings.catalog)
    for batch in range(3):
        lake.sql(f"INSERT INTO {table} SELECT id, DATE'2025-01-01' FROM range({batch * 10}, {batch * 10 + 10})")
    # Each commit's own time, as the table's metadata keeps it (milliseconds): no wall clock, no sleep.
    query = f"SELECT unix_millis(committed_at) FROM {table}.snapshots ORDER BY committed_at"
    millis = [r[0] for r in lake.sql(query).collect()]
    assert len(set(millis)) == 3, millis
    return table, [EPOCH + dt.timedelta(milliseconds=ms) for ms in millis]


def test_read_as_of_a_snapshot_or_a_time(lake, ledger_of_three_commits):
    table, moments = ledger_of_three_commits
    first, second, third = snapshots(lake, table)
    assert read_as_of(lake, table, snapshot_id=first).count() == 10
    # As of a commit's own time: that commit (at or before); a millisecond earlier: the one before it.
    assert read_as_of(lake, table, when=moments[1]).count() == 20
    assert snapshot_as_of(lake, table, moments[1]) == second
    just_before = moments[1] - dt.timedelta(milliseconds=1)
    assert snapshot_as_of(lake, table, just_before) == first and read_as_of(lake, table, when=just_before).count() == 10
    assert lake.sql(f"SELECT count(*) FROM {table} VERSION AS OF {first}").first()[0] == 10  # plain Iceberg SQL
    with pytest.raises(NoSuchSnapshot, match="has no snapshot 42"):
        read_as_of(lake, table, snapshot_id=42)
    with pytest.raises(NoSuchSnapshot, match="no snapshot at or before 2000-01-01"):
        read_as_of(lake, table, when=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))


def test_daily_growth_compares_now_with_the_past_through_time_travel(lake, ledger_of_three_commits):
    table, moments = ledger_of_three_commits
    growth = daily_growth(lake, table, now=moments[2], window=moments[2] - moments[0])
    assert (growth.rows_now, growth.rows_before, growth.added) == (30, 10, 20)
    assert growth.ratio == 3.0
    assert daily_growth(lake, table).rows_before == 0  # a day ago the table did not exist


def test_rollback_restores_a_snapshot_and_records_why(lake, settings, ledger_of_three_commits):
    table, _ = ledger_of_three_commits
    first, _, third = snapshots(lake, table)
    record = rollback(lake, settings.catalog, table, first, reason="bad load of batch 2 and 3", run_id="r1")
    assert lake.table(table).count() == 10
    assert record["from_snapshot_id"] == str(third)
    audit = lake.sql(f"SELECT * FROM {settings.catalog}.audit.table_changes").collect()
    assert [(r["action"], r["to_snapshot_id"], r["reason"]) for r in audit] == [
        ("ROLLBACK", str(first), "bad load of batch 2 and 3")
    ]
    with pytest.raises(ValueError, match="needs a reason"):
        rollback(lake, settings.catalog, table, first, reason=" ")


def test_a_second_rollback_records_the_current_snapshot_and_a_non_ancestor_is_refused_in_one_line(
    lake, settings, ledger_of_three_commits
):
    table, _ = ledger_of_three_commits
    first, second, third = snapshots(lake, table)
    rollback(lake, settings.catalog, table, second, reason="drop batch 3")
    # The newest commit is still `third`; the current snapshot is `second`.
    record = rollback(lake, settings.catalog, table, first, reason="drop batch 2 too")
    assert record["from_snapshot_id"] == str(second)
    assert lake.table(table).count() == 10

    with pytest.raises(NotAnAncestor) as refused:  # `third` was left behind by the rollbacks
        rollback(lake, settings.catalog, table, third, reason="undo")
    message = str(refused.value)
    assert "\n" not in message and str(third) in message and f"current snapshot {first}" in message
    assert lake.table(table).count() == 10
    audit = lake.sql(
        f"SELECT from_snapshot_id, to_snapshot_id FROM {settings.catalog}.audit.table_changes ORDER BY executed_at"
    ).collect()
    assert [tuple(r) for r in audit] == [(str(third), str(second)), (str(second), str(first))]
