"""Schema and partition evolution driven by the spec, on real Iceberg tables."""

from __future__ import annotations

import dataclasses

import pytest

from etr_assets.errors import UnsafeEvolution
from etr_assets.lake import evolve as evolve_module
from etr_assets.lake.evolve import ensure_table, plan
from etr_assets.lake.specs import CURSOR_PROPERTY, Column, TableSpec

V1 = TableSpec(
    namespace="silver",
    name="evolving",
    description="a table whose spec changes",
    columns=(
        Column("id", "int", required=True),
        Column("customer_id", "bigint"),
        Column("amount", "decimal(10,2)"),
        Column("score", "float"),
        Column("day", "date", required=True),
    ),
    partition_by=("days(day)",),
)


def evolve(spec: TableSpec, **changes) -> TableSpec:
    return dataclasses.replace(spec, **changes)


def test_a_spec_change_between_two_writes_evolves_the_table_and_old_rows_stay_readable(lake, settings):
    assert ensure_table(lake, settings.catalog, V1).created
    table = V1.qualified(settings.catalog)
    lake.sql(f"INSERT INTO {table} VALUES (1, 7, 10.50, 0.5, DATE'2025-01-01'), (2, 8, 3.25, 1.5, DATE'2025-01-02')")

    v2 = evolve(
        V1,
        columns=(
            Column("id", "bigint", required=True),  # widen int -> bigint
            Column("customer_id", "bigint"),
            Column("amount_myr", "decimal(12,2)", renamed_from="amount"),  # rename + widen precision
            Column("score", "double"),  # float -> double
            Column("day", "date", required=True),
            Column("channel", "string"),  # new
        ),
        partition_by=("days(day)", "bucket(4, customer_id)"),
    )
    changes = ensure_table(lake, settings.catalog, v2)
    assert changes.added_columns == ("channel",)
    assert changes.renamed_columns == ("amount -> amount_myr",)
    assert set(changes.widened_columns) == {
        "id: int -> bigint",
        "amount_myr: decimal(10,2) -> decimal(12,2)",
        "score: float -> double",
    }
    assert changes.added_partition_fields == ("bucket(4, customer_id)",) and changes.schema_id > 0
    assert "renamed amount -> amount_myr" in changes.describe()

    lake.sql(f"INSERT INTO {table} VALUES (3, 9, 99999999.99, 2.5, DATE'2025-01-02', 'APP')")
    rows = {r["id"]: r for r in lake.table(table).collect()}
    assert str(rows[1]["amount_myr"]) == "10.50" and rows[1]["channel"] is None  # old rows under the new schema
    assert str(rows[3]["amount_myr"]) == "99999999.99"
    schema = {f.name: f.dataType.simpleString() for f in lake.table(table).schema}
    assert schema == {
        "id": "bigint",
        "customer_id": "bigint",
        "amount_myr": "decimal(12,2)",
        "score": "double",
        "day": "date",
        "channel": "string",
    }
    # Old files keep days() only, new ones days() + bucket(): queries over both see every row.
    specs = {r[0] for r in lake.sql(f"SELECT spec_id FROM {table}.files").collect()}
    assert len(specs) == 2
    assert lake.sql(f"SELECT count(*) FROM {table} WHERE day = DATE'2025-01-02'").first()[0] == 2
    assert lake.sql(f"SELECT count(*) FROM {table} WHERE customer_id = 9").first()[0] == 1
    assert not ensure_table(lake, settings.catalog, v2).any  # idempotent


@pytest.mark.parametrize(
    "columns, message",
    [
        (
            (
                Column("id", "int", required=True),
                Column("customer_id", "int"),
                Column("amount", "decimal(10,2)"),
                Column("score", "float"),
                Column("day", "date", required=True),
            ),
            "column customer_id: bigint -> int is not a safe widening",
        ),
        (
            (
                Column("id", "int", required=True),
                Column("customer_id", "bigint"),
                Column("amount", "decimal(10,3)"),
                Column("score", "float"),
                Column("day", "date", required=True),
            ),
            "column amount: decimal(10,2) -> decimal(10,3) is not a safe widening",
        ),
        (
            (
                Column("id", "int", required=True),
                Column("customer_id", "bigint"),
                Column("amount", "decimal(10,2)"),
                Column("day", "date", required=True),
            ),
            "column score: dropping a column may break readers downstream",
        ),
        (
            (
                Column("id", "int", required=True),
                Column("customer_id", "bigint", required=True),
                Column("amount", "decimal(10,2)"),
                Column("score", "float"),
                Column("day", "date", required=True),
            ),
            "column customer_id: making an existing column NOT NULL",
        ),
    ],
)
def test_unsafe_changes_are_refused_naming_table_column_and_remedy(columns, message):
    live = {
        "id": ("int", False),
        "customer_id": ("bigint", True),
        "amount": ("decimal(10,2)", True),
        "score": ("float", True),
        "day": ("date", False),
    }
    with pytest.raises(UnsafeEvolution) as failure:
        plan(evolve(V1, columns=columns), live, ["days(day)"])
    assert "table silver.evolving: refused before any change" in str(failure.value)
    assert message in str(failure.value)


def test_a_refused_change_alters_nothing(lake, settings):
    ensure_table(lake, settings.catalog, V1)
    bad = evolve(V1, columns=(Column("id", "string", required=True), *V1.columns[1:], Column("extra", "string")))
    with pytest.raises(UnsafeEvolution):
        ensure_table(lake, settings.catalog, bad)
    assert [f.name for f in lake.table(V1.qualified(settings.catalog)).schema] == V1.column_names


def test_a_table_altered_by_someone_else_since_this_process_matched_it_is_checked_again(lake, settings, monkeypatch):
    """A repeated ensure_table of a table still as this process left it reads its metadata only; any change made
    meanwhile (a property, a column, the table dropped) sends it through the whole check again."""
    table = V1.qualified(settings.catalog)
    key = "write.parquet.compression-codec"
    assert ensure_table(lake, settings.catalog, V1).created
    assert not ensure_table(lake, settings.catalog, V1).any

    # An SCD2 apply moves its cursor property in its data commit: not an alteration, so no whole check either.
    lake.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('{CURSOR_PROPERTY}' = '{{}}')")
    with monkeypatch.context() as patched:
        patched.setattr(evolve_module, "_ensure", lambda *args: pytest.fail("checked again after a cursor move"))
        assert not ensure_table(lake, settings.catalog, V1).any

    lake.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('{key}' = 'gzip')")
    changes = ensure_table(lake, settings.catalog, V1)
    assert changes.changed_properties == (key,)
    assert lake.sql(f"SHOW TBLPROPERTIES {table} ('{key}')").first()["value"] == V1.table_properties[key]

    lake.sql(f"ALTER TABLE {table} ADD COLUMNS (added_elsewhere string)")
    with pytest.raises(UnsafeEvolution, match="column added_elsewhere: dropping a column"):
        ensure_table(lake, settings.catalog, V1)

    lake.sql(f"DROP TABLE {table}")
    assert ensure_table(lake, settings.catalog, V1).created


def test_a_changed_write_order_sorts_the_files_written_from_then_on(lake, settings):
    """The spec's write order is the table's, also when it changes: the next file is sorted the new way, the
    files before keep theirs; an unchanged order alters nothing."""
    table = V1.qualified(settings.catalog)
    by_id = evolve(V1, write_order=("day", "id"))
    assert ensure_table(lake, settings.catalog, by_id).created
    assert not ensure_table(lake, settings.catalog, evolve(by_id)).any  # its own order, as Iceberg shows it

    by_customer = evolve(V1, write_order=("day", "customer_id"))
    changes = ensure_table(lake, settings.catalog, by_customer)
    assert changes.write_order == ("day", "customer_id") and "write order now day, customer_id" in changes.describe()
    assert not ensure_table(lake, settings.catalog, evolve(by_customer)).any
    rows = [(i, 10 - i, 1.0, 1.0, "2025-01-01") for i in range(1, 10)]  # ids up, customers down
    lake.createDataFrame(rows, "id int, customer_id bigint, amount double, score double, day string").selectExpr(
        "id",
        "customer_id",
        "CAST(amount AS decimal(10,2)) AS amount",
        "CAST(score AS float) AS score",
        "CAST(day AS date) AS day",
    ).writeTo(table).append()
    (path,) = [r[0] for r in lake.sql(f"SELECT file_path FROM {table}.files").collect()]
    assert [r["customer_id"] for r in lake.read.parquet(path).collect()] == list(range(1, 10))  # in file order
