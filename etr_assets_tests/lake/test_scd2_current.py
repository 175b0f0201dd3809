"""The SCD2 state hash (`TableSpec.state_hash_sql`) as the daily path uses it: stored on every version and compared
with the day's records, it opens a version exactly when a tracked value changed (NULL-safe), never for an untracked
one. (The path's history is checked against the in-order model and the recompute in test_scd2_log.)"""

from __future__ import annotations

import dataclasses

from pyspark.sql import functions as F

from etr_assets.lake.evolve import ensure_table
from etr_assets.lake.feeds import FeedMode
from etr_assets.lake.frames import local_frame
from etr_assets.lake.scd2 import ObservationLog, Scd2Method, apply_log
from etr_assets.lake.specs import SCD2_COLUMNS, Column, Scd2
from etr_assets_tests.lake.test_scd2 import SPEC, at

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
