"""SCD2 invariants over random batch sequences, against a plain-Python model of in-order application.

The source is simulated from a ground-truth timeline per key: values change (to and from NULL), are re-sent
with a newer timestamp but the same values, keys are deleted and come back. Batches are full snapshots or
incremental change lists, with several records per key in a batch. Whatever order the batches arrive in, and
however often they are replayed, the table must equal the model applied in order.
"""

from __future__ import annotations

import datetime as dt
import random

import pytest

from etr_assets.lake.evolve import ensure_table
from etr_assets.lake.feeds import FeedMode
from etr_assets.lake.frames import local_frame
from etr_assets.lake.scd2 import apply_observations
from etr_assets.lake.specs import HISTORY_PARTITIONS, SCD2_COLUMNS, Column, Scd2, TableSpec

SPEC = TableSpec(
    namespace="landing",
    name="things",
    description="test entity",
    columns=(
        Column("id", "bigint", required=True),
        Column("a", "string"),
        Column("b", "bigint"),
        Column("updated_at", "timestamp", required=True),
        *SCD2_COLUMNS,
    ),
    partition_by=HISTORY_PARTITIONS,  # as the landing histories: closing a version moves it out of NULL's partition
    scd2=Scd2(key="id", tracked=("a", "b"), sequence="updated_at"),
)
T0 = dt.datetime(2025, 1, 1)
RECORD_SCHEMA = (
    "id bigint, a string, b bigint, updated_at timestamp, _batch_id string, _source_file string, _snapshot_at timestamp"
)


def at(hour: int) -> dt.datetime:
    return T0 + dt.timedelta(hours=hour)


def timeline(rng: random.Random, keys: int, hours: int):
    """Per key, a list of (time, state or None for deleted), strictly increasing in time."""
    values_a, values_b = [None, "x", "y"], [None, 1, 2]
    truth = {}
    for key in range(1, keys + 1):
        events, alive, state = [], False, None
        for hour in sorted(rng.sample(range(1, hours), rng.randint(2, 7))):
            roll = rng.random()
            if not alive or roll < 0.55:  # create, or change (possibly to NULL and back)
                state = (rng.choice(values_a), rng.choice(values_b))
                alive = True
            elif roll < 0.75:  # re-sent with a newer timestamp, same values
                pass
            else:
                alive, state = False, None
            events.append((at(hour), state if alive else None))
        truth[key] = events
    return truth


def state_at(events, time):
    """(updated_at, state) of the last event at or before `time`, or None if absent then."""
    current = None
    for when, state in events:
        if when > time:
            break
        current = (when, state) if state is not None else None
    return current


def make_batches(rng, truth, snapshot_hours, mode):
    batches = []
    previous = T0
    for number, hour in enumerate(snapshot_hours):
        t_b = at(hour)
        records = []
        for key, events in truth.items():
            if mode == FeedMode.FULL:
                seen = state_at(events, t_b)
                if seen:
                    records.append((key, *seen))
                    older = state_at(events, seen[0] - dt.timedelta(seconds=1))
                    if older and rng.random() < 0.3:  # a stale duplicate in the same batch: latest must win
                        records.append((key, *older))
            else:
                records += [(key, when, s) for when, s in events if previous < when <= t_b and s is not None]
        rng.shuffle(records)
        batch_id = f"b{number:02d}"
        batches.append(
            {
                "id": batch_id,
                "t": t_b,
                "rows": [(k, s[0], s[1], when, batch_id, f"{batch_id}/part-1.jsonl", t_b) for k, when, s in records],
            }
        )
        previous = t_b
    return batches


def model(batches, mode):
    """Requirement R2's per-batch algorithm, applied in snapshot order, with NULL-safe comparison (Python ==)."""
    versions: dict[int, list[list]] = {}
    for batch in sorted(batches, key=lambda b: b["t"]):
        latest = {}
        for key, a, b, when, *_ in batch["rows"]:
            if key not in latest or when > latest[key][0]:
                latest[key] = (when, (a, b))
        for key, (when, state) in sorted(latest.items()):
            history = versions.setdefault(key, [])
            current = history[-1] if history and history[-1][3] is None else None
            if current and current[0] == state:
                continue
            if current:
                current[3] = when
            history.append([state, when, when, None])
        if mode == FeedMode.FULL:
            for key, history in versions.items():
                if key not in latest and history and history[-1][3] is None:
                    history[-1][3] = batch["t"]
    return {(key, v[0][0], v[0][1], v[1], v[3]) for key, history in versions.items() for v in history}


def table_rows(spark, catalog):
    rows = spark.table(SPEC.qualified(catalog)).collect()
    return rows, {(r["id"], r["a"], r["b"], r["_valid_from"], r["_valid_to"]) for r in rows}


def check_invariants(rows):
    by_key: dict[int, list] = {}
    for r in rows:
        by_key.setdefault(r["id"], []).append(r)
    for key, versions in by_key.items():
        versions.sort(key=lambda r: r["_valid_from"])
        assert sum(r["_is_current"] for r in versions) <= 1, f"key {key}: more than one current row"
        for earlier, later in zip(versions, versions[1:]):
            assert earlier["_valid_to"] is not None and earlier["_valid_to"] <= later["_valid_from"], (
                f"key {key}: overlap"
            )
            if earlier["_valid_to"] == later["_valid_from"]:
                assert (earlier["a"], earlier["b"]) != (later["a"], later["b"]), f"key {key}: duplicate version"
        for r in versions:
            assert r["_is_current"] == (r["_valid_to"] is None)
            assert r["_valid_to"] is None or r["_valid_to"] > r["_valid_from"]


def apply(spark, catalog, applied, batch, mode):
    records = local_frame(spark, [row for b in applied for row in b["rows"]], RECORD_SCHEMA)
    keys = None
    if mode == FeedMode.INCREMENTAL:  # as the pipeline does: recompute the keys this batch touched
        keys = local_frame(spark, [(row[0],) for row in batch["rows"]] or [(-1,)], "id bigint")
    return apply_observations(spark, catalog, SPEC, records, mode, keys)


@pytest.mark.slow
@pytest.mark.parametrize("mode", [FeedMode.FULL, FeedMode.INCREMENTAL])
@pytest.mark.parametrize("seed", [11, 23])
def test_any_order_and_replays_give_the_in_order_history(lake, settings, mode, seed):
    rng = random.Random(seed)
    truth = timeline(rng, keys=7, hours=60)
    batches = make_batches(rng, truth, [12, 24, 36, 48, 59], mode)
    expected = model(batches, mode)
    assert any(v[1] is None or v[2] is None for v in expected), "the scenario should include NULL values"

    ensure_table(lake, settings.catalog, SPEC)
    order = batches[:]
    rng.shuffle(order)
    if order == batches:
        order.reverse()
    applied = []
    for batch in order:
        applied.append(batch)
        apply(lake, settings.catalog, applied, batch, mode)
        rows, versions = table_rows(lake, settings.catalog)
        check_invariants(rows)
        # After every step the table is what in-order application of the batches so far gives.
        assert versions == model(applied, mode)
    assert table_rows(lake, settings.catalog)[1] == expected

    snapshots_before = lake.sql(f"SELECT count(*) FROM {SPEC.qualified(settings.catalog)}.snapshots").first()[0]
    replay = apply(lake, settings.catalog, applied + [order[1]], order[1], mode)  # the same batch again
    assert not replay.changed and replay.snapshot_id is None
    assert lake.sql(f"SELECT count(*) FROM {SPEC.qualified(settings.catalog)}.snapshots").first()[0] == snapshots_before


def test_null_transitions_are_changes_and_null_to_null_is_not(lake, settings):
    ensure_table(lake, settings.catalog, SPEC)
    rows = [
        (1, "x", 1, at(1), "b1", "f", at(10)),
        (1, None, 1, at(2), "b2", "f", at(10)),  # value -> NULL: a change
        (1, None, 1, at(3), "b3", "f", at(10)),  # NULL -> NULL: not a change
        (1, "x", 1, at(4), "b4", "f", at(10)),  # NULL -> value: a change
    ]
    records = local_frame(lake, rows, RECORD_SCHEMA)
    result = apply_observations(lake, settings.catalog, SPEC, records, FeedMode.INCREMENTAL)
    table = lake.table(SPEC.qualified(settings.catalog)).collect()
    got = sorted(((r["a"], r["_valid_from"], r["_valid_to"]) for r in table), key=lambda v: v[1])
    assert got == [("x", at(1), at(2)), (None, at(2), at(4)), ("x", at(4), None)]
    assert result.inserted == 3 and result.deleted == 0


def test_latest_record_in_a_batch_wins_and_ties_are_deterministic(lake, settings):
    ensure_table(lake, settings.catalog, SPEC)
    rows = [
        (7, "old", 1, at(1), "b1", "f1", at(10)),
        (7, "new", 2, at(5), "b1", "f1", at(10)),
        (7, "mid", 3, at(3), "b1", "f1", at(10)),
    ]
    apply_observations(lake, settings.catalog, SPEC, local_frame(lake, rows, RECORD_SCHEMA), FeedMode.FULL)
    (only,) = lake.table(SPEC.qualified(settings.catalog)).collect()
    assert (only["a"], only["_valid_from"], only["_is_current"], only["_batch_id"]) == ("new", at(5), True, "b1")
