"""The SCD2 apply path (`lake/scd2.py`): extending history from an observation log's new rows gives exactly the full
recompute, and falls back to the recompute, naming why, whenever it could not; and the state hash the daily path
stores and compares opens a version exactly when a tracked value changed (NULL-safe), never for an untracked one.

The log is a real Iceberg table that batches are appended to (as bronze is). The random source timelines, batches
and the in-order model are test_scd2_recompute's.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import random
import re
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from etr_assets.lake import scd2, scd2_recompute
from etr_assets.lake.evolve import ensure_table
from etr_assets.lake.feeds import FeedMode
from etr_assets.lake.frames import local_frame
from etr_assets.lake.scd2 import (
    CURSOR_PROPERTY,
    Gained,
    ObservationLog,
    Scd2Cursor,
    Scd2Method,
    apply_incremental,
    apply_log,
    read_cursor,
)
from etr_assets.lake.session import java_elements
from etr_assets.lake.specs import MERGE_ON_READ, SCD2_COLUMNS, STATE_HASH_PROPERTY, Column, Scd2
from etr_assets.lake.writes import current_snapshot_id, iceberg_table, replace_days
from etr_assets_tests.lake.test_scd2_recompute import (
    RECORD_SCHEMA,
    SPEC,
    T0,
    at,
    check_invariants,
    make_batches,
    model,
    table_rows,
    timeline,
)

REFERENCE = dataclasses.replace(SPEC, name="things_recomputed")


def make_log(spark, catalog: str) -> str:
    log = f"{catalog}.bronze.things_log"
    spark.sql(f"CREATE TABLE {log} ({RECORD_SCHEMA}) USING iceberg")
    return log


def append(spark, log: str, batch: dict) -> None:
    local_frame(spark, batch["rows"], RECORD_SCHEMA).writeTo(log).append()


def rows_without_ingest_time(spark, qualified: str) -> set[tuple]:
    df = spark.table(qualified).drop("_ingested_at")
    return {tuple(r) for r in df.collect()}


WRONG_STATE_HASH = f"_state_hash IS NULL OR _state_hash <> {SPEC.state_hash_sql}"


def wrong_state_hashes(spark, qualified: str) -> int:
    """Versions whose stored `_state_hash` is missing or not the hash of their tracked columns."""
    return spark.table(qualified).where(WRONG_STATE_HASH).count()


@dataclasses.dataclass(frozen=True)
class Read:
    """SPEC's table read once, for every check of one step: a model test checks after each apply, and each of its
    checks used to read the table again (a Spark job each)."""

    rows: list
    columns: list[str]

    @property
    def versions(self) -> set[tuple]:
        """As `table_rows` gives them."""
        return {(r["id"], r["a"], r["b"], r["_valid_from"], r["_valid_to"]) for r in self.rows}

    def without(self, *dropped: str) -> set[tuple]:
        """As `rows_without_ingest_time` and `versions_of` give them."""
        return {tuple(r[c] for c in self.columns if c not in dropped) for r in self.rows}

    @property
    def wrong_state_hashes(self) -> int:
        """As `wrong_state_hashes` counts them."""
        return sum(bool(r["_wrong_state_hash"]) for r in self.rows)


def read(spark, catalog: str) -> Read:
    frame = spark.table(SPEC.qualified(catalog))
    rows = frame.withColumn("_wrong_state_hash", F.expr(WRONG_STATE_HASH)).collect()
    return Read(rows, frame.columns)


def snapshot_count(spark, qualified: str) -> int:
    """The rows of the table's `snapshots` metadata table, from its metadata without a Spark job."""
    return sum(1 for _ in java_elements(iceberg_table(spark, qualified).snapshots()))


def scenario(seed: int, mode: str, snapshot_hours=(12, 24, 36, 48, 59)):
    rng = random.Random(seed)
    truth = timeline(rng, keys=7, hours=60)
    return make_batches(rng, truth, list(snapshot_hours), mode)


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "seed"), [(FeedMode.FULL, 11), (FeedMode.INCREMENTAL, 23)])
def test_in_order_batches_extend_history_and_equal_the_full_recompute(lake, settings, mode, seed):
    catalog = settings.catalog
    batches = scenario(seed, mode, (12, 30, 45, 59))
    for spec in (SPEC, REFERENCE):
        ensure_table(lake, catalog, spec)
    log = make_log(lake, catalog)

    for number, batch in enumerate(batches):
        append(lake, log, batch)
        result = apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, mode))
        # After the first build each day is one new batch after the watermark: compared with current rows only.
        assert result.method == (Scd2Method.RECOMPUTE if number == 0 else Scd2Method.CURRENT), result.reason
        history = read(lake, catalog)
        check_invariants(history.rows)
        assert history.versions == model(batches[: number + 1], mode)
        assert history.wrong_state_hashes == 0
    # Every column, lineage included, is what recomputing from every observation gives.
    apply_log(lake, catalog, REFERENCE, ObservationLog(log, lambda rows: rows, mode), full_refresh=True)
    assert history.without("_ingested_at") == rows_without_ingest_time(lake, REFERENCE.qualified(catalog))

    snapshots = snapshot_count(lake, SPEC.qualified(catalog))
    again = apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, mode))
    assert (again.method, again.changed) == (Scd2Method.UNCHANGED, False)
    # The last batch downloaded again: in a full snapshot its time is not after the watermark (a record would beat
    # an absence at the same time), so the versions it changes are looked for; either way it changes nothing and
    # nothing is committed.
    append(lake, log, dict(batches[-1], rows=[r[:4] + ("replay",) + r[5:] for r in batches[-1]["rows"]]))
    replay = apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, mode))
    assert replay.method in (Scd2Method.CURRENT, Scd2Method.WINDOW) and not replay.changed, replay.reason
    assert snapshot_count(lake, SPEC.qualified(catalog)) == snapshots


@pytest.mark.slow
def test_several_new_batches_at_once_extend_from_each_keys_last_version(lake, settings):
    """A range run appends several days before the SCD2 step: the current-rows path takes one batch, so the keys
    they change are rewritten from the new rows alone, and history is still the in-order one."""
    catalog = settings.catalog
    batches = scenario(11, FeedMode.FULL)
    ensure_table(lake, catalog, SPEC)
    log = make_log(lake, catalog)
    append(lake, log, batches[0])
    apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL))
    for batch in batches[1:3]:
        append(lake, log, batch)
    result = apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL))
    assert result.method == Scd2Method.WINDOW and "2 new batch(es)" in result.reason, result.reason
    assert "read the new rows only" in result.reason, result.reason
    rows, versions = table_rows(lake, catalog)
    check_invariants(rows)
    assert versions == model(batches[:3], FeedMode.FULL)


@pytest.mark.slow
def test_a_late_batch_rewrites_the_keys_it_changes_and_gives_the_in_order_history(lake, settings):
    catalog = settings.catalog
    batches = scenario(11, FeedMode.FULL)
    ensure_table(lake, catalog, SPEC)
    log = make_log(lake, catalog)
    for batch in (batches[0], batches[2]):
        append(lake, log, batch)
        apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL))
    append(lake, log, batches[1])  # a backfill of a day older than the watermark
    result = apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL))
    assert result.method == Scd2Method.WINDOW and "the log since" in result.reason, result.reason
    assert table_rows(lake, catalog)[1] == model(batches[:3], FeedMode.FULL)


@pytest.mark.slow
def test_the_daily_path_reads_only_the_current_versions_partition(lake, settings):
    """Closed versions sit in their month's partition and the daily path never opens them: here they are gone
    from disk, and a day in order still applies, giving the in-order current versions."""
    import os

    catalog = settings.catalog
    batches = scenario(11, FeedMode.FULL)
    ensure_table(lake, catalog, SPEC)
    log = make_log(lake, catalog)
    for batch in batches[:3]:
        append(lake, log, batch)
        apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL))
    table = SPEC.qualified(catalog)
    # Compacted as maintenance does: files are rewritten within their partition, so closed versions stay apart.
    lake.sql(
        f"CALL {catalog}.system.rewrite_data_files(table => '{table.split('.', 1)[1]}', "
        "options => map('rewrite-all', 'true'))"
    )
    closed = lake.sql(f"SELECT file_path FROM {table}.files WHERE partition._valid_to_month IS NOT NULL").collect()
    assert closed, "the first days closed no version: nothing to prove"
    for (path,) in closed:
        os.remove(path.removeprefix("file:"))

    append(lake, log, batches[3])
    result = apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL))
    assert result.method == Scd2Method.CURRENT, result.reason
    current = lake.table(table).where("_valid_to IS NULL").collect()
    expected = {v for v in model(batches[:4], FeedMode.FULL) if v[4] is None}
    assert {(r["id"], r["a"], r["b"], r["_valid_from"], r["_valid_to"]) for r in current} == expected
    with pytest.raises(Exception, match="(?i)not.*exist|FileNotFound|No such file"):
        lake.table(table).collect()  # the test can fail: a read of every version needs the removed files


@pytest.mark.slow
def test_the_daily_path_moves_its_cursor_in_the_commit_that_publishes_it(lake, settings):
    """No version of the table's metadata shows main at an apply's snapshot with the cursor still before it: a
    failure between two commits would leave the table looking written by someone else, and the next build would
    recompute everything."""
    catalog, table = settings.catalog, SPEC.qualified(settings.catalog)
    ensure_table(lake, catalog, SPEC)
    log = make_log(lake, catalog)
    for batch in scenario(11, FeedMode.FULL):
        append(lake, log, batch)
        result = apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL))
        if result.method == Scd2Method.CURRENT and result.changed:
            break
    else:
        pytest.fail("no day took the daily path and changed the table: nothing to prove")
    entries = lake.sql(f"SELECT file, latest_snapshot_id FROM {table}.metadata_log_entries ORDER BY timestamp")
    published = next(e.file for e in entries.collect() if e.latest_snapshot_id == result.snapshot_id)
    properties = json.loads(Path(published.removeprefix("file:")).read_text())["properties"]
    cursor = Scd2Cursor.from_json(properties.get(CURSOR_PROPERTY))
    assert cursor == read_cursor(lake, table), "the cursor moved after main did"
    assert (cursor.table_snapshot_id, cursor.log_snapshot_id) == (result.snapshot_id, current_snapshot_id(lake, log))


@pytest.mark.slow
def test_a_history_built_unpartitioned_evolves_to_the_partitioned_layout_and_goes_on(lake, settings):
    """A table made before histories were partitioned: the next write adds the partition field, old files keep
    their layout, and the daily path closes their current versions into the new partitions."""
    catalog = settings.catalog
    batches = scenario(11, FeedMode.FULL)
    ensure_table(lake, catalog, dataclasses.replace(SPEC, partition_by=()))
    log = make_log(lake, catalog)
    for batch in batches[:2]:
        append(lake, log, batch)
        apply_log(
            lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL)
        )  # ensure_table decides the layout
    changes = ensure_table(lake, catalog, SPEC)
    assert changes.added_partition_fields == ("months(_valid_to)",)
    for batch in batches[2:]:
        append(lake, log, batch)
        result = apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL))
        assert result.method == Scd2Method.CURRENT, result.reason
    rows, versions = table_rows(lake, catalog)
    check_invariants(rows)
    assert versions == model(batches, FeedMode.FULL)
    layouts = lake.sql(f"SELECT DISTINCT spec_id FROM {SPEC.qualified(catalog)}.all_files").collect()
    assert {r[0] for r in layouts} == {0, 1}  # written in both layouts (the old files since rewritten)


@pytest.mark.slow
def test_a_key_first_sent_after_a_snapshot_that_lacked_it_stays_current(lake, settings):
    """A suppression lifted, a source catching up: a key's first record is older than an earlier snapshot that did
    not send it. In order, that snapshot had no version of it to close, so the key is current: through the window
    (its record is older than the watermark) and the recompute alike."""
    catalog = settings.catalog

    def snapshot(number: int, hour: int, keys: list[int]) -> dict:
        t, batch_id = at(hour), f"b{number:02d}"
        return {"id": batch_id, "t": t, "rows": [(k, "x", 1, at(1), batch_id, f"{batch_id}/p.jsonl", t) for k in keys]}

    batches = [snapshot(0, 12, [1]), snapshot(1, 24, [1, 2]), snapshot(2, 36, [1, 2])]
    expected = model(batches, FeedMode.FULL)
    assert (2, "x", 1, at(1), None) in expected  # the in-order history keeps key 2 current
    ensure_table(lake, catalog, SPEC)
    log = make_log(lake, catalog)
    for batch in batches:
        append(lake, log, batch)
        result = apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL))
    assert table_rows(lake, catalog)[1] == expected, result.reason
    recomputed = apply_log(
        lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL), full_refresh=True
    )
    assert not recomputed.changed and table_rows(lake, catalog)[1] == expected


@pytest.mark.slow
def test_a_rewritten_log_or_a_table_written_by_someone_else_is_recomputed(lake, settings):
    catalog = settings.catalog
    batches = scenario(23, FeedMode.FULL)
    ensure_table(lake, catalog, SPEC)
    log = make_log(lake, catalog)
    for batch in batches[:2]:
        append(lake, log, batch)
        apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL))

    # Compaction of either table changes no rows: history is still extended.
    for table in (log, SPEC.qualified(catalog)):
        lake.sql(
            f"CALL {catalog}.system.rewrite_data_files(table => '{table.split('.', 1)[1]}', "
            f"options => map('rewrite-all', 'true'))"
        )
    append(lake, log, batches[2])
    result = apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL))
    assert result.method == Scd2Method.CURRENT, result.reason

    # A reloaded batch (bronze overwrites a day it loads again): the append scan would not see it.
    lake.sql(f"DELETE FROM {log} WHERE _batch_id = '{batches[1]['id']}'")
    append(lake, log, batches[1])
    result = apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL))
    assert result.method == Scd2Method.RECOMPUTE and "changed rows in place" in result.reason, result.reason

    # Someone else changed the history table (here: deleted a version): the cursor no longer describes it.
    lake.sql(f"DELETE FROM {SPEC.qualified(catalog)} WHERE id = 1 AND _is_current")
    append(lake, log, batches[3])
    result = apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL))
    assert result.method == Scd2Method.RECOMPUTE and "written since" in result.reason, result.reason
    assert table_rows(lake, catalog)[1] == model(batches[:4], FeedMode.FULL)

    forced = apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL), full_refresh=True)
    assert (forced.method, forced.reason, forced.changed) == (Scd2Method.RECOMPUTE, "full refresh requested", False)


@pytest.mark.slow
def test_a_compaction_committed_while_the_daily_path_writes_makes_it_retry_on_the_compacted_table(
    lake, settings, monkeypatch
):
    """The daily path closes and opens versions on a branch and publishes both with one fast-forward of main; a
    commit to main meanwhile (here maintenance's compaction) makes the publish fail as a commit conflict, and the
    rerun applies the batch onto the compacted table. No branch is left behind."""
    catalog = settings.catalog
    table = SPEC.qualified(catalog)
    batches = scenario(11, FeedMode.FULL, (12, 30, 45, 59))
    ensure_table(lake, catalog, SPEC)
    log = make_log(lake, catalog)
    compactions = []
    close_on_branch = scd2._delete_closed

    def close_while_compacting(spark, spec, target, *args):
        close_on_branch(spark, spec, target, *args)
        if ".branch_" in target and not compactions:
            compactions.append(
                spark.sql(
                    f"CALL {catalog}.system.rewrite_data_files(table => '{table.split('.', 1)[1]}', "
                    f"options => map('rewrite-all', 'true'))"
                ).first()
            )

    monkeypatch.setattr(scd2, "_delete_closed", close_while_compacting)
    for number, batch in enumerate(batches):
        append(lake, log, batch)
        result = apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL))
        assert result.method == (Scd2Method.RECOMPUTE if number == 0 else Scd2Method.CURRENT), result.reason
        rows, versions = table_rows(lake, catalog)
        check_invariants(rows)
        assert versions == model(batches[: number + 1], FeedMode.FULL)
    assert compactions and compactions[0]["rewritten_data_files_count"] > 0  # it ran, and on main
    operations = [r[0] for r in lake.sql(f"SELECT operation FROM {table}.snapshots ORDER BY committed_at").collect()]
    assert "replace" in operations
    assert [r[0] for r in lake.sql(f"SELECT name FROM {table}.refs").collect()] == ["main"]


@pytest.mark.slow
def test_a_record_sent_twice_in_the_daily_batch_opens_one_version(lake, settings):
    """The daily path picks each key's record by narrow columns, then fetches the records picked: a record sent
    twice (same key, time, file and state) is picked twice, and must still open one version."""
    catalog = settings.catalog
    ensure_table(lake, catalog, SPEC)
    log = make_log(lake, catalog)
    append(lake, log, {"rows": [(1, "x", 1, at(1), "b1", "f1", at(2))]})
    apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.INCREMENTAL))
    twice = [(1, "y", 1, at(3), "b2", "f2", at(4)), (2, "z", None, at(3), "b2", "f2", at(4))]
    append(lake, log, {"rows": twice + twice})
    result = apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.INCREMENTAL))
    assert (result.method, result.inserted, result.updated) == (Scd2Method.CURRENT, 2, 1), result.reason
    rows, versions = table_rows(lake, catalog)
    check_invariants(rows)
    assert len(rows) == 3
    assert versions == {(1, "x", 1, at(1), at(3)), (1, "y", 1, at(3), None), (2, "z", None, at(3), None)}


@pytest.mark.slow
def test_records_of_one_time_in_several_files_are_picked_by_file_path_as_the_recompute_picks_them(lake, settings):
    """The daily path orders a key's records by a number per file, not by the path itself: the numbers must keep the
    paths' order (bytewise, non-ASCII too) so the record it keeps is the one recomputing from the log keeps."""
    catalog = settings.catalog
    for spec in (SPEC, REFERENCE):
        ensure_table(lake, catalog, spec)
    log = make_log(lake, catalog)
    append(
        lake, log, {"rows": [(1, "x", 1, at(1), "b1", "s3://raw/b1/0", at(2)), (2, "x", 1, at(1), "b1", "0", at(2))]}
    )
    apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.INCREMENTAL))
    same_time = [
        (1, "p", 1, at(3), "b2", "s3://raw/b2/part-10", at(4)),
        (1, "q", 1, at(3), "b2", "s3://raw/b2/part-9", at(4)),  # "9" > "1": this path is the greater
        (1, "r", 1, at(3), "b2", "s3://raw/b2/part-09", at(4)),
        (2, "p", 2, at(3), "b2", "s3://raw/b2/ü", at(4)),  # beyond ASCII: after every path above
        (2, "q", 2, at(3), "b2", "s3://raw/b2/z", at(4)),
    ]
    append(lake, log, {"rows": same_time})
    result = apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.INCREMENTAL))
    assert (result.method, result.inserted, result.updated) == (Scd2Method.CURRENT, 2, 2), result.reason
    _, versions = table_rows(lake, catalog)
    assert {v for v in versions if v[4] is None} == {(1, "q", 1, at(3), None), (2, "p", 2, at(3), None)}
    apply_log(lake, catalog, REFERENCE, ObservationLog(log, lambda rows: rows, FeedMode.INCREMENTAL), full_refresh=True)
    assert rows_without_ingest_time(lake, SPEC.qualified(catalog)) == rows_without_ingest_time(
        lake, REFERENCE.qualified(catalog)
    )


@pytest.mark.parametrize("path", ["one new batch", "two new batches", "recompute"])
def test_a_record_without_a_key_stops_every_path_naming_its_file_and_writes_nothing(lake, settings, path):
    """Every path matches keys by plain equality, which never matches NULL: a record without a key must stop the
    apply, whichever path the log's new rows take (the daily one, the window's, a recompute), not vanish."""
    catalog = settings.catalog
    ensure_table(lake, catalog, SPEC)
    log, table = make_log(lake, catalog), SPEC.qualified(catalog)
    append(lake, log, {"rows": [(1, "x", 1, at(1), "b1", "f", at(2))]})
    apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.INCREMENTAL))
    before = (current_snapshot_id(lake, table), read_cursor(lake, table))
    rows = [(1, "y", 1, at(3), "b2", "f", at(4)), (None, "z", 1, at(3), "b2", "s3://raw/b2/part-7", at(4))]
    if path == "two new batches":
        rows.append((2, "w", 1, at(5), "b3", "g", at(6)))
    append(lake, log, {"rows": rows})
    with pytest.raises(ValueError, match=r"^1 record\(s\) new in the log have no id \(from s3://raw/b2/part-7\)"):
        apply_log(
            lake,
            catalog,
            SPEC,
            ObservationLog(log, lambda rows: rows, FeedMode.INCREMENTAL),
            full_refresh=path == "recompute",
        )
    assert (current_snapshot_id(lake, table), read_cursor(lake, table)) == before


@pytest.mark.slow
def test_an_older_record_inside_a_new_batch_rewrites_its_key_not_appended(lake, settings):
    catalog = settings.catalog
    ensure_table(lake, catalog, SPEC)
    log = make_log(lake, catalog)
    first = [(1, "x", 1, at(1), "b1", "f", at(6)), (1, "y", 1, at(5), "b2", "f", at(10))]
    append(lake, log, {"rows": first})
    apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.INCREMENTAL))
    cursor = read_cursor(lake, SPEC.qualified(catalog))
    assert cursor.log_snapshot_id and cursor.watermark_micros is not None

    # A change list re-sending key 1 at hour 3 with a NULL in `a`: it falls inside history, before the watermark.
    append(lake, log, {"rows": [(1, None, 1, at(3), "b3", "f", at(11)), (2, "z", 2, at(12), "b3", "f", at(11))]})
    result = apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.INCREMENTAL))
    # Key 2 is new (settled by the current versions); key 1 is rewritten from hour 3 on (its version from hour 1 is
    # the anchor).
    assert result.method == Scd2Method.WINDOW and "1 new key(s)" in result.reason, result.reason
    assert "1 they cannot settle" in result.reason and "change 1 key(s)" in result.reason, result.reason
    got = sorted(
        ((r["id"], r["a"], r["_valid_from"], r["_valid_to"]) for r in lake.table(SPEC.qualified(catalog)).collect()),
        key=lambda version: (version[0], version[2]),
    )
    assert got == [(1, "x", at(1), at(3)), (1, None, at(3), at(5)), (1, "y", at(5), None), (2, "z", at(12), None)]


def first_batch_applied(lake, catalog: str) -> tuple[list[dict], str]:
    """Scenario 11's batches, and its log with the first batch applied to SPEC's table (a recompute)."""
    batches = scenario(11, FeedMode.FULL)
    ensure_table(lake, catalog, SPEC)
    log = make_log(lake, catalog)
    append(lake, log, batches[0])
    apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL))
    return batches, log


@pytest.mark.slow
def test_a_table_built_before_state_hashes_gets_them_filled_by_evolution_then_takes_the_daily_path(lake, settings):
    """A table from before `_state_hash`: evolution adds the column and fills every version before it sets the
    property that lets the daily path trust the stored hashes; the fill is a write, so the next apply recomputes."""
    catalog, table = settings.catalog, SPEC.qualified(catalog=settings.catalog)
    batches, log = first_batch_applied(lake, catalog)
    lake.sql(f"ALTER TABLE {table} DROP COLUMN _state_hash")
    lake.sql(f"ALTER TABLE {table} UNSET TBLPROPERTIES ('{STATE_HASH_PROPERTY}')")

    changes = ensure_table(lake, catalog, SPEC)
    assert changes.added_columns == ("_state_hash",) and STATE_HASH_PROPERTY in changes.changed_properties
    assert lake.table(table).count() > 0 and wrong_state_hashes(lake, table) == 0

    append(lake, log, batches[1])
    result = apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL))
    assert result.method == Scd2Method.RECOMPUTE and "written since" in result.reason, result.reason
    append(lake, log, batches[2])
    result = apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL))
    assert result.method == Scd2Method.CURRENT, result.reason
    history = read(lake, catalog)
    assert history.versions == model(batches[:3], FeedMode.FULL)
    assert history.wrong_state_hashes == 0


def apply_directly(lake, catalog: str, log: str, batch: dict):
    """`batch` applied by the incremental path itself, past apply_log's check that nobody else wrote the table."""
    table = SPEC.qualified(catalog)
    append(lake, log, batch)
    records = local_frame(lake, batch["rows"], RECORD_SCHEMA)
    base, watermark = current_snapshot_id(lake, table), read_cursor(lake, table).watermark_micros
    gained = Gained(records, current_snapshot_id(lake, log), base, watermark)
    return apply_incremental(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL), gained).result


@pytest.mark.slow
def test_a_current_version_without_a_stored_state_hash_is_rewritten_with_one(lake, settings):
    """A version some other writer left without a hash cannot be compared: the current versions do not settle its
    key, the window rewrites it (hash included), and history is the model's."""
    catalog, table = settings.catalog, SPEC.qualified(catalog=settings.catalog)
    batches, log = first_batch_applied(lake, catalog)
    unhashed = lake.table(table).where("_is_current").count()
    lake.sql(f"UPDATE {table} SET _state_hash = NULL WHERE _is_current")
    result = apply_directly(lake, catalog, log, batches[1])
    assert result.method == Scd2Method.WINDOW and f"{unhashed} they cannot settle" in result.reason, result.reason
    history = read(lake, catalog)
    assert history.versions == model(batches[:2], FeedMode.FULL)
    assert history.wrong_state_hashes == 0


@pytest.mark.slow
def test_a_current_version_starting_after_the_watermark_is_not_closed_before_it_starts(lake, settings):
    """A current version some other writer started after everything applied: a record before its start would close
    it before it began, so its key goes to the window, and every interval stays ordered."""
    catalog, table = settings.catalog, SPEC.qualified(catalog=settings.catalog)
    batches, log = first_batch_applied(lake, catalog)
    key = lake.sql(f"SELECT min(id) FROM {table} WHERE _is_current").first()[0]
    lake.sql(f"UPDATE {table} SET _valid_from = TIMESTAMP'2999-01-01 00:00:00' WHERE _is_current AND id = {key}")
    result = apply_directly(lake, catalog, log, batches[1])
    assert result.method == Scd2Method.WINDOW and "1 they cannot settle" in result.reason, result.reason
    rows, versions = table_rows(lake, catalog)
    check_invariants(rows)
    others = {v for v in model(batches[:2], FeedMode.FULL) if v[0] != key}
    assert {v for v in versions if v[0] != key} == others


def queries_since(spark, first_execution: int) -> list[str]:
    """Physical plans of the queries Spark ran since `first_execution`."""
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    return [str(executions.apply(i).physicalPlanDescription()) for i in range(first_execution, executions.size())]


def merge_plans_since(spark, first_execution: int) -> list[str]:
    """Physical plans of the row-level writes (MERGE) Spark ran since `first_execution`."""
    return [plan for plan in queries_since(spark, first_execution) if "WriteDelta" in plan or "ReplaceData" in plan]


@pytest.mark.slow
def test_the_daily_paths_merge_broadcasts_its_closes_whatever_the_sessions_join_threshold(lake, settings):
    """MERGE ignores broadcast hints; the daily path raises the join threshold for its one statement so the table is
    read once without a shuffle, and gives the session its own setting back."""
    catalog = settings.catalog
    batches, log = first_batch_applied(lake, catalog)
    append(lake, log, batches[1])
    lake.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")  # a session that never broadcasts by size
    try:
        first = lake._jsparkSession.sharedState().statusStore().executionsList().size()
        result = apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL))
        assert result.method == Scd2Method.CURRENT and result.updated, result.reason
        (plan,) = merge_plans_since(lake, first)
        # The MERGE's own join is the plan's topmost (the classification's joins show below, in the cached input).
        assert re.search(r"\w+Join", plan).group(0) == "BroadcastHashJoin", plan
        assert lake.conf.get("spark.sql.autoBroadcastJoinThreshold") == "-1"
    finally:
        lake.conf.unset("spark.sql.autoBroadcastJoinThreshold")


@pytest.mark.slow
def test_past_the_heaps_broadcast_limit_every_join_shuffles_and_history_is_the_same(lake, settings, monkeypatch):
    """Closes, picks and affected keys are broadcast up to a number of rows per GiB of heap (`broadcast_rows`);
    past it they are shuffled with the rows they join. With no broadcast at all (nor by the session's threshold),
    the daily path and a late day's window give the in-order history."""
    catalog = settings.catalog
    monkeypatch.setattr(scd2_recompute, "BROADCAST_ROWS_PER_GIB", 0)
    assert scd2_recompute.broadcast_rows(lake) == 0
    batches, log = first_batch_applied(lake, catalog)
    lake.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        first = lake._jsparkSession.sharedState().statusStore().executionsList().size()
        for batch in (batches[2], batches[1]):  # the daily path, then a late day through the window
            append(lake, log, batch)
            result = apply_log(lake, catalog, SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL))
        assert result.method == Scd2Method.WINDOW and "the log since" in result.reason, result.reason
        plans = "\n".join(queries_since(lake, first))
    finally:
        lake.conf.unset("spark.sql.autoBroadcastJoinThreshold")
    # Joins by the table's key, as (join, type): shuffled, the picks' and the closed copies' among them. (Files'
    # ranks are still broadcast: one row a file.)
    by_key = {
        (join, kind)
        for join, column, kind in re.findall(r"(\w+Join) \[(\w+)#[^]]*\], \[[^]]*\], (\w+)", plans)
        if column == "id"
    }
    assert {join for join, _ in by_key} == {"SortMergeJoin"}, by_key
    assert {("SortMergeJoin", "LeftSemi"), ("SortMergeJoin", "Inner")} <= by_key, by_key
    rows, versions = table_rows(lake, catalog)
    check_invariants(rows)
    assert versions == model(batches[:3], FeedMode.FULL)


MERGE_ON_READ_SPEC = dataclasses.replace(SPEC, name="things_mor", properties={**SPEC.properties, **MERGE_ON_READ})


@pytest.mark.slow
def test_the_daily_path_on_a_merge_on_read_table_gives_the_models_history(lake, settings):
    """Landing tables are merge-on-read: the closes' MERGE writes deletes there, and the append follows it on the
    apply's branch; history stays the model's and the recompute's, and no branch is left."""
    catalog, table = settings.catalog, MERGE_ON_READ_SPEC.qualified(settings.catalog)
    reference = dataclasses.replace(REFERENCE, properties=MERGE_ON_READ_SPEC.properties)
    for spec in (MERGE_ON_READ_SPEC, reference):
        ensure_table(lake, catalog, spec)
    log = make_log(lake, catalog)
    batches = scenario(11, FeedMode.FULL, (12, 30, 45, 59))
    for number, batch in enumerate(batches):
        append(lake, log, batch)
        result = apply_log(lake, catalog, MERGE_ON_READ_SPEC, ObservationLog(log, lambda rows: rows, FeedMode.FULL))
        assert result.method == (Scd2Method.RECOMPUTE if number == 0 else Scd2Method.CURRENT), result.reason
        rows = [r.asDict() for r in lake.table(table).collect()]
        check_invariants(rows)
        got = {(r["id"], r["a"], r["b"], r["_valid_from"], r["_valid_to"]) for r in rows}
        assert got == model(batches[: number + 1], FeedMode.FULL)
    apply_log(lake, catalog, reference, ObservationLog(log, lambda rows: rows, FeedMode.FULL), full_refresh=True)
    assert rows_without_ingest_time(lake, table) == rows_without_ingest_time(lake, reference.qualified(catalog))
    assert [r[0] for r in lake.sql(f"SELECT name FROM {table}.refs").collect()] == ["main"]


LINEAGE = ("_ingested_at", "_batch_id", "_source_file")


def versions_of(spark, qualified: str) -> set[tuple]:
    """Every column a recompute decides (lineage, and when a row was written, aside)."""
    return {tuple(r) for r in spark.table(qualified).drop(*LINEAGE).collect()}


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "seed"), [(FeedMode.FULL, 11), (FeedMode.FULL, 23), (FeedMode.INCREMENTAL, 23)])
def test_late_and_redelivered_batches_rewrite_what_they_change_and_equal_the_model_and_the_recompute(
    lake, settings, mode, seed
):
    """The order model with the log: batches arrive shuffled, and some are delivered again under a new batch id.
    After the first build, nothing is recomputed: a batch after everything applied takes the daily path or the
    window, a late or repeated one the window; after every step the versions are the in-order model's, and at the
    end every column the recompute decides is the recompute's."""
    rng = random.Random(seed)
    batches = make_batches(rng, timeline(rng, keys=7, hours=60), [12, 24, 36, 48, 59], mode)
    order = batches[:]
    rng.shuffle(order)
    if order == batches:
        order.reverse()
    for again in rng.sample(range(1, len(order)), 2):  # a day delivered again, later on, under a new batch id
        batch = order[again - 1]
        copy_id = f"{batch['id']}-again"
        order.insert(again + 1, dict(batch, id=copy_id, rows=[r[:4] + (copy_id,) + r[5:] for r in batch["rows"]]))
    for spec in (SPEC, REFERENCE):
        ensure_table(lake, settings.catalog, spec)
    log = make_log(lake, settings.catalog)
    applied, late = [], 0
    for number, batch in enumerate(order):
        append(lake, log, batch)
        result = apply_log(lake, settings.catalog, SPEC, ObservationLog(log, lambda rows: rows, mode))
        is_late = bool(applied) and batch["t"] <= max(b["t"] for b in applied)
        applied.append(batch)
        if number == 0:
            assert result.method == Scd2Method.RECOMPUTE, result.reason
        elif is_late:
            late += 1
            assert result.method != Scd2Method.RECOMPUTE, result.reason
        else:
            assert result.method in (Scd2Method.CURRENT, Scd2Method.WINDOW), result.reason
        history = read(lake, settings.catalog)
        check_invariants(history.rows)
        assert history.versions == model(applied, mode), f"after {batch['id']} ({result.method}: {result.reason})"
        assert history.wrong_state_hashes == 0
    assert late >= 3
    apply_log(lake, settings.catalog, REFERENCE, ObservationLog(log, lambda rows: rows, mode), full_refresh=True)
    assert history.without(*LINEAGE) == versions_of(lake, REFERENCE.qualified(settings.catalog))


DAY_LOG_SCHEMA = f"{RECORD_SCHEMA}, _as_of date"


def snapshot_of_day(day: int, records: list[tuple], batch_id: str | None = None) -> list[tuple]:
    """Day `day`'s full snapshot (taken at the end of the day) of (id, a, updated_at hour) records, b always 1."""
    batch_id = batch_id or f"d{day}"
    as_of = (T0 + dt.timedelta(days=day - 1)).date()
    taken = at(24 * day)
    return [(key, a, 1, at(hour), batch_id, f"{batch_id}/part-1", taken, as_of) for key, a, hour in records]


def day_partitioned_log(spark, catalog: str) -> str:
    """The history tables, and an empty observation log partitioned by snapshot day as bronze is (its name)."""
    for spec in (SPEC, REFERENCE):
        ensure_table(spark, catalog, spec)
    log = f"{catalog}.bronze.things_by_day"
    spark.sql(f"CREATE TABLE {log} ({DAY_LOG_SCHEMA}) USING iceberg PARTITIONED BY (days(_as_of))")
    return log


@pytest.mark.slow
def test_a_late_day_splits_versions_resumes_re_sent_records_closes_absent_keys_and_keeps_held_ones(lake, settings):
    """Days 1, 3 and 4 are applied, then day 2 arrives late. Key 1's record of day 2 splits its long version; key 2
    changed on day 2 and its old state was re-sent with a newer time on day 3 (a record only the log holds: its
    versions had collapsed it); key 3 is missing from day 2 only (a snapshot's absence: deleted from then on, since
    later days re-send its older record); key 4 is missing from day 2 too, but day 2 held it (quarantined). Only the
    log's days since the change are read, the versions are the recompute's, and day 2 delivered again commits
    nothing."""
    catalog, table = settings.catalog, SPEC.qualified(settings.catalog)
    log = day_partitioned_log(lake, catalog)
    without_day = lambda rows: rows.drop("_as_of")  # noqa: E731
    held = local_frame(lake, [(4, "d2"), (4, "d2-again")], "id bigint, _batch_id string")
    steady = [(3, "x", 1), (4, "x", 1), (5, "x", 1)]
    days = {
        1: [(1, "x", 1), (2, "x", 1), *steady],
        2: [(1, "y", 27), (2, "y", 28), (5, "x", 1)],
        3: [(1, "x", 1), (2, "x", 60), *steady],
        4: [(1, "z", 80), (2, "x", 60), *steady],
    }

    def deliver(day: int, batch_id: str | None = None):
        local_frame(lake, snapshot_of_day(day, days[day], batch_id), DAY_LOG_SCHEMA).writeTo(log).append()
        return apply_log(lake, catalog, SPEC, ObservationLog(log, without_day, FeedMode.FULL, held, "_as_of"))

    for day in (1, 3, 4):
        deliver(day)
    before = {r for r in table_rows(lake, catalog)[1] if r[0] in (1, 2)}
    assert before == {(1, "x", 1, at(1), at(80)), (1, "z", 1, at(80), None), (2, "x", 1, at(1), None)}
    late = deliver(2)
    assert late.method == Scd2Method.WINDOW, late.reason
    # Keys 1 and 2 from hour 27/28, key 3 from the end of day 2; read: days 2 to 4 (their 3 snapshots), not day 1.
    assert "change 3 key(s) from 2025-01-02 03:00:00" in late.reason and "(3 snapshot(s))" in late.reason, late.reason
    history = read(lake, catalog)
    rows = history.rows
    check_invariants(rows)
    assert history.versions == {
        (1, "x", 1, at(1), at(27)),
        (1, "y", 1, at(27), at(80)),
        (1, "z", 1, at(80), None),
        (2, "x", 1, at(1), at(28)),
        (2, "y", 1, at(28), at(60)),
        (2, "x", 1, at(60), None),  # the state re-sent on day 3, from its own time
        (3, "x", 1, at(1), at(48)),  # deleted at the end of day 2
        (4, "x", 1, at(1), None),
        (5, "x", 1, at(1), None),
    }
    resumed = next(r for r in rows if r["id"] == 2 and r["_valid_from"] == at(60))
    assert (resumed["updated_at"], resumed["_batch_id"]) == (at(60), "d3")
    apply_log(lake, catalog, REFERENCE, ObservationLog(log, without_day, FeedMode.FULL, held), full_refresh=True)
    assert history.without("_ingested_at") == rows_without_ingest_time(lake, REFERENCE.qualified(catalog))

    snapshots = snapshot_count(lake, table)
    again = deliver(2, "d2-again")
    assert (again.method, again.changed, again.snapshot_id) == (Scd2Method.CURRENT, False, None), again.reason
    assert snapshot_count(lake, table) == snapshots


def as_of_day(batch: dict) -> dt.date:
    """The day whose end a batch's snapshot was taken at (the bronze partition it is loaded into)."""
    return (batch["t"] - dt.timedelta(microseconds=1)).date()


def delivered(batch: dict, batch_id: str, rows: list[tuple] | None = None) -> dict:
    """`batch` (or `rows` in its place) delivered under `batch_id`, each row with its `_as_of` day."""
    rows = batch["rows"] if rows is None else rows
    day = as_of_day(batch)
    return dict(batch, id=batch_id, rows=[(*r[:4], batch_id, f"{batch_id}/part-1", r[6], day) for r in rows])


def garbled(rng: random.Random, batch: dict) -> list[tuple]:
    """Another content for a batch's day: some keys left out, some with another state sent minutes before the
    snapshot (a time no other record of the key has), and key 99, which no other day sends."""
    taken, rows = batch["t"], []
    for row in batch["rows"]:
        roll = rng.random()
        if roll < 0.3:
            continue
        if roll < 0.6:
            row = (row[0], "w", row[2], taken - dt.timedelta(minutes=row[0]), *row[4:])
        rows.append(row)
    return [*rows, (99, "w", 1, taken - dt.timedelta(minutes=30), *batch["rows"][0][4:])]


@pytest.mark.slow
# Two cases, not three: each reloads every day four times (80 s a case on two busy cores).
@pytest.mark.parametrize(("mode", "seed"), [(FeedMode.FULL, 11), (FeedMode.INCREMENTAL, 23)])
def test_reloaded_days_rewrite_what_they_change_and_equal_the_model_and_the_recompute(lake, settings, mode, seed):
    """Bronze replaces a day it loads again (an overwrite of its partition). After the first build every reload
    takes the window, never the recompute: a day reloaded with other content (keys left out, other states, a key
    no other day has), then with its true content again, each under a new batch id; the versions are the
    recompute's after every step and the in-order model's once the days are true again. A reload with the same
    content changes nothing and commits nothing. A delete snapshot of the log (an erasure) recomputes."""
    catalog, table = settings.catalog, SPEC.qualified(settings.catalog)
    rng = random.Random(seed)
    batches = make_batches(rng, timeline(rng, keys=7, hours=120), [24, 48, 72, 96, 120], mode)
    log = day_partitioned_log(lake, catalog)
    without_day = lambda rows: rows.drop("_as_of")  # noqa: E731

    def build(spec=SPEC, full_refresh=False):
        return apply_log(
            lake, catalog, spec, ObservationLog(log, without_day, mode, snapshot_day="_as_of"), full_refresh
        )

    def reload(batch: dict):
        frame = local_frame(lake, batch["rows"], DAY_LOG_SCHEMA)
        replace_days(lake, log, frame, "_as_of", [as_of_day(batch)])
        return build()

    def assert_recomputed(step: str, result) -> Read:
        history = read(lake, catalog)
        check_invariants(history.rows)
        build(REFERENCE, full_refresh=True)
        assert history.without(*LINEAGE) == versions_of(lake, REFERENCE.qualified(catalog)), (
            f"after {step} ({result.method}: {result.reason})"
        )
        assert history.wrong_state_hashes == 0
        return history  # the table as the step left it

    local_frame(lake, [r for b in batches for r in delivered(b, b["id"])["rows"]], DAY_LOG_SCHEMA).writeTo(log).append()
    assert build().method == Scd2Method.RECOMPUTE
    for day in rng.sample(range(len(batches)), 2):
        batch = batches[day]
        for step, content in (("other content", garbled(rng, batch)), ("true content", None)):
            result = reload(delivered(batch, f"{batch['id']}-{step[:5]}", content))
            assert result.method == Scd2Method.WINDOW and "reloaded day(s)" in result.reason, result.reason
            history = assert_recomputed(f"{batch['id']} reloaded with {step}", result)
        assert history.versions == model(batches, mode)

        snapshots = snapshot_count(lake, table)
        for batch_id in (f"{batch['id']}-again", f"{batch['id']}-again"):  # a new batch id, then the same rows
            same = reload(delivered(batch, batch_id))
            assert (same.method, same.changed) == (Scd2Method.WINDOW, False), same.reason
        assert snapshot_count(lake, table) == snapshots

    lake.sql(f"DELETE FROM {log} WHERE _as_of = DATE'{as_of_day(batches[0])}'")  # whole files: a delete snapshot
    erased = build()
    assert erased.method == Scd2Method.RECOMPUTE and "(delete)" in erased.reason, erased.reason
    assert table_rows(lake, catalog)[1] == model(batches[1:], mode)


@pytest.mark.slow
def test_a_reloaded_day_keeps_held_keys_closes_left_out_ones_and_an_expired_cursor_snapshot_recomputes(lake, settings):
    """Day 2 reloaded without key 4 (held: quarantined in the reload) and without key 5: key 5 is deleted at the end
    of day 2 (day 3 re-sends its older record), key 4 keeps its version. Reloaded again with key 5, the removed
    absence takes its deletion back. Both take the window and equal the recompute. Once the log's snapshot the
    cursor names has expired, the replaced rows cannot be read: the next reload recomputes, saying why."""
    catalog, table = settings.catalog, SPEC.qualified(settings.catalog)
    log = day_partitioned_log(lake, catalog)
    without_day = lambda rows: rows.drop("_as_of")  # noqa: E731
    held = local_frame(lake, [(4, "d2-r1")], "id bigint, _batch_id string")
    steady = [(3, "x", 1), (4, "x", 1), (5, "x", 1)]
    days = {1: [(1, "x", 1), *steady], 2: [(1, "y", 27), *steady], 3: [(1, "y", 27), *steady]}

    def build(spec=SPEC, full_refresh=False):
        return apply_log(
            lake, catalog, spec, ObservationLog(log, without_day, FeedMode.FULL, held, "_as_of"), full_refresh
        )

    def reload(day: int, records: list[tuple], batch_id: str):
        frame = local_frame(lake, snapshot_of_day(day, records, batch_id), DAY_LOG_SCHEMA)
        replace_days(lake, log, frame, "_as_of", [(T0 + dt.timedelta(days=day - 1)).date()])
        return build()

    for day in (1, 2, 3):
        local_frame(lake, snapshot_of_day(day, days[day]), DAY_LOG_SCHEMA).writeTo(log).append()
        build()
    left_out = reload(2, [(1, "y", 27), (3, "x", 1)], "d2-r1")
    assert left_out.method == Scd2Method.WINDOW and "change 1 key(s) from 2025-01-03" in left_out.reason, (
        left_out.reason
    )
    assert {v for v in table_rows(lake, catalog)[1] if v[0] in (4, 5)} == {
        (4, "x", 1, at(1), None),
        (5, "x", 1, at(1), at(48)),
    }
    back = reload(2, days[2], "d2-r2")
    assert back.method == Scd2Method.WINDOW and "change 1 key(s) from 2025-01-03" in back.reason, back.reason
    assert (5, "x", 1, at(1), None) in table_rows(lake, catalog)[1]
    build(REFERENCE, full_refresh=True)
    assert versions_of(lake, table) == versions_of(lake, REFERENCE.qualified(catalog))

    frame = local_frame(lake, snapshot_of_day(3, days[3], "d3-r"), DAY_LOG_SCHEMA)
    replace_days(lake, log, frame, "_as_of", [(T0 + dt.timedelta(days=2)).date()])
    lake.sql(
        f"CALL {catalog}.system.expire_snapshots(table => 'bronze.things_by_day', "
        "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)"
    )
    expired = build()
    assert expired.method == Scd2Method.RECOMPUTE and "expired" in expired.reason, expired.reason


# Two tracked columns of one type, so a NULL that moves from one to the other is a real test; `note` untracked.
TRACKED_SPEC = dataclasses.replace(
    SPEC,
    name="things_hashed",
    columns=(
        Column("id", "bigint", required=True),
        Column("a", "string"),
        Column("b", "string"),
        Column("note", "string"),
        Column("updated_at", "timestamp", required=True),
        *SCD2_COLUMNS,
    ),
    scd2=Scd2(key="id", tracked=("a", "b"), sequence="updated_at"),
)
LOG_SCHEMA = (
    "id bigint, a string, b string, note string, updated_at timestamp, _batch_id string, _source_file string, "
    "_snapshot_at timestamp"
)
# key: (day 1's a, b, note), (day 2's a, b, note), whether day 2 opens a version.
CASES = {
    1: (("x", "y", "n"), (None, "y", "n"), True),  # value -> NULL
    2: ((None, "y", "n"), ("x", "y", "n"), True),  # NULL -> value
    3: ((None, None, "n"), (None, None, "n"), False),  # NULL -> NULL
    4: (("x", None, "n"), (None, "x", "n"), True),  # the NULL moved to the other column
    5: (("x", "y", "n"), ("z", "y", "n"), True),  # a changed
    6: (("x", "y", "n"), ("x", "z", "n"), True),  # b changed
    7: (("x", "y", "n"), ("x", "y", "m"), False),  # only the untracked note changed
}


@pytest.mark.slow
def test_the_daily_path_opens_a_version_exactly_when_a_tracked_value_changes(lake, settings):
    catalog, table = settings.catalog, TRACKED_SPEC.qualified(settings.catalog)
    ensure_table(lake, catalog, TRACKED_SPEC)
    log = f"{catalog}.bronze.things_hashed_log"
    lake.sql(f"CREATE TABLE {log} ({LOG_SCHEMA}) USING iceberg")
    for day, (seen, sent) in enumerate(((at(1), at(2)), (at(3), at(4)))):
        rows = [(key, *case[day], seen, f"b{day}", f"f{day}", sent) for key, case in CASES.items()]
        local_frame(lake, rows, LOG_SCHEMA).writeTo(log).append()
        result = apply_log(lake, catalog, TRACKED_SPEC, ObservationLog(log, lambda rows: rows, FeedMode.INCREMENTAL))
    assert result.method == Scd2Method.CURRENT, result.reason  # day 2 compared the stored hashes

    opened = {key for key, (_, _, changes) in CASES.items() if changes}
    assert result.inserted == len(opened)
    current = {r["id"]: r for r in lake.table(table).where("_is_current").collect()}
    assert {key for key, r in current.items() if r["_valid_from"] == at(3)} == opened
    assert {key: (r["a"], r["b"]) for key, r in current.items()} == {k: case[1][:2] for k, case in CASES.items()}
    # The stored hashes of day 1: a NULL in another place is another state.
    first = dict(lake.table(table).where(F.col("_valid_from") == at(1)).select("id", "_state_hash").collect())
    assert len({first[k] for k in (1, 2, 3, 4)}) == 4 and None not in first.values()


def test_a_batch_typed_differently_from_the_table_gives_the_tables_fingerprint(spark):
    # The column is cast to the spec's type first: an int 7 from a batch equals the table's bigint 7.
    def fingerprints(schema):
        return local_frame(spark, [("x", 7)], schema).select(F.expr(SPEC.state_hash_sql)).collect()

    assert fingerprints("a string, b int") == fingerprints("a string, b bigint")
