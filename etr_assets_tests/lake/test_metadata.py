"""A table's rows from metadata (`metadata.row_count`) are what `SELECT count(*)` returns, after deletes, on
copy-on-write, v2 merge-on-read (position-delete files) and v3 merge-on-read (deletion vectors) tables, and every
figure reports that one number: `etr tables`, health, a commit's figures. Where metadata cannot know (equality
deletes, partition-scoped position deletes) the count is unknown with the reason, never a wrong number."""

from __future__ import annotations

import pytest

from etr_assets.lake.evolve import TableChanges, ensure_table
from etr_assets.lake.figures import WriteResult, layer_figures
from etr_assets.lake.health import table_health
from etr_assets.lake.metadata import (
    EQUALITY_DELETES_UNKNOWN,
    PARTITION_SCOPED_UNKNOWN,
    PositionDeleteFile,
    RowCount,
    load_table,
    row_count,
    snapshot_row_count,
    table_stats,
)
from etr_assets.lake.specs import MERGE_ON_READ, Column, TableSpec
from etr_assets.lake.writes import commit_of, current_snapshot_id, iceberg_table, rows_where_null
from etr_assets_tests.lake.test_table_listing import listing

COLUMNS = (Column("id", "bigint"), Column("day", "date"))
COPY_ON_WRITE = {mode: "copy-on-write" for mode in MERGE_ON_READ}


def spec_named(name: str, format_version: int, properties: dict[str, str], partitioned: bool = True) -> TableSpec:
    return TableSpec(
        "silver",
        name,
        "row count test table",
        COLUMNS,
        partition_by=("days(day)",) if partitioned else (),
        format_version=format_version,
        properties=properties,
    )


def count_star(lake, table: str) -> int:
    return lake.sql(f"SELECT count(*) FROM {table}").first()[0]


def every_figure(lake, settings, monkeypatch, capsys, spec: TableSpec) -> dict[str, RowCount | int | None]:
    """The table's rows as each reader reports them: the one function (pyiceberg and the JVM's manifests), `etr
    tables`, health and a commit's figures."""
    table = spec.qualified(settings.catalog)
    commit = commit_of(lake, table, current_snapshot_id(lake, table))
    _, tables, _ = listing(monkeypatch, capsys, settings)
    figures = layer_figures(WriteResult(commit, TableChanges(table), {}), "")
    return {
        "row_count": snapshot_row_count(load_table(settings, spec)).rows,
        "commit": commit.table_rows.rows,
        "table_stats": table_stats(settings, spec).rows,
        "etr tables": tables[spec.identifier]["rows"],
        "health": table_health(settings, spec).rows,
        "dagster/row_count": figures.get("dagster/row_count"),
    }


def summary_difference(settings, spec: TableSpec) -> int:
    """What subtracting the summary's totals gives (right unless a position delete deletes nothing)."""
    summary = load_table(settings, spec).current_snapshot().summary.additional_properties
    return int(summary["total-records"]) - int(summary.get("total-position-deletes", 0))


@pytest.mark.parametrize(
    "format_version, properties",
    [(2, COPY_ON_WRITE), (2, dict(MERGE_ON_READ)), (3, dict(MERGE_ON_READ))],
    ids=["copy-on-write", "v2-merge-on-read", "v3-merge-on-read"],
)
def test_every_figure_is_count_star_after_deletes_merges_and_compaction(
    lake, settings, monkeypatch, capsys, format_version, properties
):
    spec = spec_named(
        f"rows_v{format_version}_{properties['write.delete.mode'].replace('-', '_')}", format_version, properties
    )
    table = spec.qualified(settings.catalog)
    ensure_table(lake, settings.catalog, spec)
    for first in (0, 100):  # two files a day
        lake.sql(
            f"INSERT INTO {table} SELECT id, DATE'2025-01-01' + CAST(id % 2 AS INT) FROM range({first}, {first + 100})"
        )
    lake.sql(f"DELETE FROM {table} WHERE id % 10 = 0")
    lake.sql(f"DELETE FROM {table} WHERE id % 5 = 0")  # half of these rows are already deleted
    # A MERGE that deletes rows (some matched twice by the source) and inserts others.
    lake.sql(
        f"MERGE INTO {table} t USING (SELECT id, DATE'2025-01-01' + CAST(id % 2 AS INT) AS day "
        f"FROM range(3, 260, 7) UNION ALL SELECT id, DATE'2025-01-02' FROM range(3, 200, 14)) s ON t.id = s.id "
        "WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT *"
    )
    rows = count_star(lake, table)
    assert rows < 200
    assert set(every_figure(lake, settings, monkeypatch, capsys, spec).values()) == {rows}
    deletes = table_health(settings, spec).delete_files
    assert deletes == 0 if properties is COPY_ON_WRITE else deletes > 0

    # Compaction rewrites the data files with the deletes applied. A v2 table keeps the position-delete files of the
    # rewritten files until rewrite_position_delete_files: they delete nothing, and are not subtracted.
    lake.sql(
        f"CALL {settings.catalog}.system.rewrite_data_files(table => '{spec.identifier}', "
        "options => map('min-input-files', '2', 'delete-file-threshold', '1'))"
    )
    assert count_star(lake, table) == rows
    dangling = format_version == 2 and properties is not COPY_ON_WRITE
    assert (summary_difference(settings, spec) < rows) is dangling  # the plain subtraction is wrong then
    assert set(every_figure(lake, settings, monkeypatch, capsys, spec).values()) == {rows}

    # As maintenance runs it: every delete file rewritten, the positions of files that are gone dropped.
    lake.sql(
        f"CALL {settings.catalog}.system.rewrite_position_delete_files(table => '{spec.identifier}', "
        "options => map('rewrite-all', 'true'))"
    )
    lake.sql(f"DELETE FROM {table} WHERE id % 10 = 7")
    rows = count_star(lake, table)
    assert summary_difference(settings, spec) == rows
    assert set(every_figure(lake, settings, monkeypatch, capsys, spec).values()) == {rows}


def test_equality_deletes_make_the_count_unknown_with_the_reason(lake, settings, monkeypatch, capsys, tmp_path):
    """Spark never writes equality deletes (Flink does): one is written with pyarrow and committed through the Java
    API, so Spark's count(*) applies it while metadata alone cannot tell which rows it matched."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    spec = spec_named("equality", 2, dict(MERGE_ON_READ), partitioned=False)
    table = spec.qualified(settings.catalog)
    ensure_table(lake, settings.catalog, spec)
    lake.sql(f"INSERT INTO {table} SELECT id, DATE'2025-01-01' FROM range(0, 10)")
    java_table = iceberg_table(lake, table)
    id_field = java_table.schema().findField("id").fieldId()
    path = tmp_path / "equality-deletes.parquet"
    deleted_ids = pa.field("id", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(id_field).encode()})
    pq.write_table(pa.table({"id": pa.array([1, 2, 3, 42], pa.int64())}, schema=pa.schema([deleted_ids])), path)
    jvm = lake.sparkContext._jvm
    field_ids = lake.sparkContext._gateway.new_array(jvm.int, 1)
    field_ids[0] = id_field
    delete_file = (
        jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(java_table.spec())
        .ofEqualityDeletes(field_ids)
        .withPath(f"file:{path}")
        .withFormat(jvm.org.apache.iceberg.FileFormat.PARQUET)
        .withFileSizeInBytes(path.stat().st_size)
        .withRecordCount(4)
        .build()
    )
    java_table.newRowDelta().addDeletes(delete_file).commit()

    assert count_star(lake, table) == 7  # three of the four ids were in the table
    unknown = snapshot_row_count(load_table(settings, spec))
    assert unknown == RowCount(None, EQUALITY_DELETES_UNKNOWN)
    assert str(unknown) == f"unknown ({EQUALITY_DELETES_UNKNOWN})"
    figures = every_figure(lake, settings, monkeypatch, capsys, spec)
    assert set(figures.values()) == {None}, figures
    commit = commit_of(lake, table, current_snapshot_id(lake, table))
    figures = layer_figures(WriteResult(commit, TableChanges(table), {}), "")
    assert "table_rows" not in figures and figures["table_rows_unknown"] == EQUALITY_DELETES_UNKNOWN
    health = table_health(settings, spec)
    assert health.rows_unknown == EQUALITY_DELETES_UNKNOWN and "rows" not in health.figures()
    monkeypatch.setenv("ETR_HOME", str(settings.home))
    from etr_assets.cli import main

    assert main(["tables"]) == 0
    out = capsys.readouterr().out
    assert f"{spec.identifier}: rows unknown: {EQUALITY_DELETES_UNKNOWN}" in out


class FakeFiles:
    def __init__(self, deletes=(), data=()) -> None:
        self.deletes, self.data = list(deletes), list(data)

    def position_delete_files(self):
        return self.deletes

    def data_file_paths(self):
        return self.data


def test_the_summary_alone_decides_without_position_deletes_and_the_manifests_say_which_deletes_count():
    summary = {"total-records": "100", "total-position-deletes": "0", "total-equality-deletes": "0"}
    assert row_count(summary, FakeFiles()) == RowCount(100)
    assert row_count({}, FakeFiles()) == RowCount(0)  # a table never written
    assert row_count(summary | {"total-equality-deletes": "3"}, FakeFiles()).rows is None

    deleted = summary | {"total-position-deletes": "12"}
    vectors = [PositionDeleteFile(5, True, None), PositionDeleteFile(7, True, None)]
    assert row_count(deleted, FakeFiles(vectors)) == RowCount(88)
    files = [PositionDeleteFile(5, False, "a.parquet"), PositionDeleteFile(7, False, "gone.parquet")]
    assert row_count(deleted, FakeFiles(files, ["a.parquet", "b.parquet"])) == RowCount(95)
    scoped = [PositionDeleteFile(12, False, None)]
    assert row_count(deleted, FakeFiles(scoped, ["a.parquet"])) == RowCount(None, PARTITION_SCOPED_UNKNOWN)


def test_a_partition_scoped_position_delete_file_makes_the_count_unknown(lake, settings):
    spec = spec_named("scoped", 2, dict(MERGE_ON_READ) | {"write.delete.granularity": "partition"})
    table = spec.qualified(settings.catalog)
    ensure_table(lake, settings.catalog, spec)
    lake.sql(f"INSERT INTO {table} SELECT id, DATE'2025-01-01' FROM range(0, 10)")
    lake.sql(f"INSERT INTO {table} SELECT id, DATE'2025-01-01' FROM range(10, 20)")
    lake.sql(f"DELETE FROM {table} WHERE id % 3 = 0")  # one delete file for the day's two data files
    assert snapshot_row_count(load_table(settings, spec)) == RowCount(None, PARTITION_SCOPED_UNKNOWN)
    assert commit_of(lake, table, current_snapshot_id(lake, table)).table_rows == RowCount(
        None, PARTITION_SCOPED_UNKNOWN
    )


@pytest.mark.parametrize("format_version", [2, 3])
def test_a_partitions_null_rows_are_counted_from_its_files_alone_and_unknown_where_files_mix_them(
    lake, settings, format_version
):
    """`rows_where_null`, a history's current versions: its files' null counts less their file-scoped deletes."""
    columns = (Column("id", "bigint"), Column("_valid_to", "timestamp"))
    tables = {}
    for layout in ("months(_valid_to)", None):  # a history's partitions, then one file holding both kinds of row
        spec = TableSpec(
            "silver",
            f"nulls_v{format_version}_{'partitioned' if layout else 'unpartitioned'}",
            "null rows test table",
            columns,
            partition_by=(layout,) if layout else (),
            format_version=format_version,
            properties=dict(MERGE_ON_READ),
        )
        tables[layout] = table = spec.qualified(settings.catalog)
        ensure_table(lake, settings.catalog, spec)
        lake.sql(f"INSERT INTO {table} SELECT id, IF(id % 3 = 0, TIMESTAMP'2025-01-01', NULL) FROM range(0, 60)")
        lake.sql(f"INSERT INTO {table} SELECT id, NULL FROM range(60, 80)")
        # Versions closed (moved out of the null partition) and deleted, as an SCD2 apply does.
        lake.sql(
            f"MERGE INTO {table} t USING (SELECT id FROM range(0, 80, 4)) s ON t.id = s.id AND t._valid_to IS NULL "
            "WHEN MATCHED AND t.id % 8 = 0 THEN DELETE WHEN MATCHED THEN UPDATE SET _valid_to = TIMESTAMP'2025-02-01'"
        )
    partitioned, mixed = tables.values()
    current = lake.sql(f"SELECT count(*) FROM {partitioned} WHERE _valid_to IS NULL").first()[0]
    assert 0 < current < 80 and rows_where_null(lake, partitioned, "_valid_to") == current
    assert rows_where_null(lake, mixed, "_valid_to") is None  # a file's null count is not its rows
    lake.sql(
        f"CALL {settings.catalog}.system.rewrite_data_files(table => '{partitioned.split('.', 1)[1]}', "
        "options => map('min-input-files', '2', 'delete-file-threshold', '1'))"
    )
    assert rows_where_null(lake, partitioned, "_valid_to") == current
