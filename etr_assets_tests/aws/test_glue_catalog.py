"""The aws profile's catalog on moto's Glue and S3: bootstrap from the specs, metadata reads through pyiceberg.

Spark's GlueCatalog cannot run here (no AWS SDK v2 jars; docs/stack.md), so the JVM-free path the code location uses in
production (pyiceberg's GlueCatalog) is what runs against moto, and a test checks it creates the same tables as
Spark's DDL from the same specs.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

from etr_assets.lake.bookkeeping import DATA_QUALITY_METRICS
from etr_assets.lake.bootstrap import bootstrap_catalog, bootstrap_with_spark, iceberg_schema, warehouse_location
from etr_assets.lake.metadata import catalog, load_table, table_stats
from etr_assets.lake.session import attach_catalog
from etr_assets.tables import ALL_SPECS, spec_for
from etr_assets_tests.aws.conftest import REGION
from etr_assets_tests.infra import list_keys, s3_client


@pytest.mark.slow
def test_bootstrap_creates_every_database_and_table_once(aws_settings, moto_endpoint):
    glue = catalog(aws_settings)
    first = bootstrap_catalog(glue, ALL_SPECS, aws_settings.warehouse, aws_settings.format_version)
    assert sorted(first.created_namespaces) == sorted({s.namespace for s in ALL_SPECS})
    assert sorted(first.created_tables) == sorted(s.identifier for s in ALL_SPECS)

    again = bootstrap_catalog(
        glue, ALL_SPECS, aws_settings.warehouse, aws_settings.format_version
    )  # safe to re-run: nothing changes
    assert again.created_namespaces == () and again.created_tables == ()
    assert sorted(again.existing_tables) == sorted(s.identifier for s in ALL_SPECS)

    # What Glue holds: Iceberg tables (table_type ICEBERG) pointing at metadata in the spec's folder.
    import boto3

    client = boto3.client("glue", endpoint_url=moto_endpoint, region_name=REGION)
    for spec in ALL_SPECS:
        table = client.get_table(DatabaseName=spec.namespace, Name=spec.name)["Table"]
        assert table["Parameters"]["table_type"].upper() == "ICEBERG", table["Parameters"]
        metadata = table["Parameters"]["metadata_location"]
        assert metadata.startswith(warehouse_location(aws_settings.warehouse, spec) + "/metadata/"), metadata
    databases = {d["Name"]: d for d in client.get_databases()["DatabaseList"]}
    assert databases["silver"]["LocationUri"] == f"s3://{aws_settings.bucket}/warehouse/silver.db"
    keys = list_keys(s3_client(moto_endpoint, REGION), aws_settings.bucket, "warehouse/")
    assert len([k for k in keys if k.endswith(".metadata.json")]) == len(ALL_SPECS), keys


def test_metadata_reads_go_through_glue_without_a_jvm(aws_settings):
    glue = catalog(aws_settings)
    spec = DATA_QUALITY_METRICS
    assert table_stats(aws_settings, spec).exists is False  # not bootstrapped yet: a clear "absent"
    bootstrap_catalog(glue, [spec], aws_settings.warehouse, aws_settings.format_version)
    empty = table_stats(aws_settings, spec)
    assert empty.exists and empty.rows == 0 and empty.snapshots == 0

    table = load_table(aws_settings, spec)
    rows = pa.Table.from_pylist(
        [{c.name: _value(c.type, i) for c in spec.columns} for i in range(3)],
        schema=table.schema().as_arrow(),
    )
    table.append(rows)
    stats = table_stats(aws_settings, spec)
    assert stats.rows == 3 and stats.snapshots == 1 and stats.data_files == 1 and stats.bytes > 0
    assert stats.location == warehouse_location(aws_settings.warehouse, spec)
    assert str(stats.current_snapshot_id) == str(load_table(aws_settings, spec).current_snapshot().snapshot_id)


@pytest.mark.slow  # every table made twice, by pyiceberg on Glue and by Spark: over 10 s
def test_bootstrap_without_spark_makes_the_tables_spark_makes(aws_settings, settings, lake):
    """Spark's ensure_table (local Hadoop catalog) and pyiceberg's bootstrap (Glue) agree table by table."""
    # Both in the aws profile's format version (pyiceberg 0.12 cannot write v3 metadata).
    settings = dataclasses.replace(settings, table_format_version=aws_settings.format_version)
    bootstrap_with_spark(attach_catalog(lake, settings), settings.catalog, ALL_SPECS)
    bootstrap_catalog(catalog(aws_settings), ALL_SPECS, aws_settings.warehouse, aws_settings.format_version)
    for spec in ALL_SPECS:
        by_spark, by_pyiceberg = load_table(settings, spec), load_table(aws_settings, spec)
        where = spec.identifier
        assert by_pyiceberg.schema().as_struct() == by_spark.schema().as_struct(), where
        assert by_pyiceberg.schema() == iceberg_schema(spec), where
        assert by_pyiceberg.spec().fields == by_spark.spec().fields, where
        assert by_pyiceberg.sort_order().fields == by_spark.sort_order().fields, where
        wanted_version = spec.format_version or settings.format_version
        assert by_pyiceberg.metadata.format_version == by_spark.metadata.format_version == wanted_version, where
        wanted = {k: v for k, v in spec.table_properties.items() if k != "format-version"}
        for props in (by_spark.properties, by_pyiceberg.properties):
            assert {k: props.get(k) for k in wanted} == wanted, where


def test_a_type_without_an_iceberg_equivalent_is_named():
    from etr_assets.lake.bootstrap import iceberg_type

    with pytest.raises(ValueError, match="silver.x.amount: type 'money'"):
        iceberg_type("money", "silver.x.amount")
    assert spec_for("silver.bnpl_transactions_clean")  # the specs themselves all convert (previous tests)


def _value(type_name: str, i: int):
    import datetime as dt
    from decimal import Decimal

    if type_name.startswith("decimal"):
        return Decimal("1.50")
    return {
        "string": f"v{i}",
        "bigint": i,
        "int": i,
        "double": 0.5 * i,
        "float": 0.5 * i,
        "boolean": True,
        "date": dt.date(2025, 1, 1),
        "timestamp": dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
    }[type_name]
