"""Create the lake's databases and every table from the specs, before any data arrives; safe to re-run. With Spark,
or with pyiceberg on `aws`, where Spark's GlueCatalog needs jars only Glue and EMR ship (both make the same tables)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING

from etr_assets.lake.evolve import ensure_table
from etr_assets.lake.specs import FORMAT_VERSION, SIMPLE_TYPES, TRANSFORM, TableSpec, decimal_type

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclasses.dataclass(frozen=True)
class BootstrapResult:
    created_namespaces: tuple[str, ...]
    created_tables: tuple[str, ...]
    existing_tables: tuple[str, ...]

    def describe(self) -> str:
        return (
            f"created {len(self.created_namespaces)} database(s) and {len(self.created_tables)} table(s); "
            f"{len(self.existing_tables)} table(s) already existed"
        )


def namespaces(specs: Iterable[TableSpec]) -> list[str]:
    return sorted({spec.namespace for spec in specs})


def namespace_location(warehouse: str, namespace: str) -> str:
    """Where a database's tables live: `<warehouse>/<db>.db`, the layout Spark's and pyiceberg's GlueCatalog use."""
    return f"{warehouse.rstrip('/')}/{namespace}.db"


def warehouse_location(warehouse: str, spec: TableSpec) -> str:
    """Where a new table of `spec` goes under `warehouse` (`writes.table_location` reads an existing table's)."""
    return f"{namespace_location(warehouse, spec.namespace)}/{spec.name}"


def iceberg_type(type_name: str, where: str):
    from pyiceberg import types as T

    if type_name in SIMPLE_TYPES:
        return getattr(T, SIMPLE_TYPES[type_name][1])()
    if decimal := decimal_type(type_name):
        return T.DecimalType(*decimal)
    raise ValueError(f"{where}: type {type_name!r} has no Iceberg equivalent here")


def iceberg_schema(spec: TableSpec):
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    fields = [
        NestedField(i, c.name, iceberg_type(c.type, f"{spec.identifier}.{c.name}"), c.required, c.doc or None)
        for i, c in enumerate(spec.columns, start=1)
    ]
    return Schema(*fields)


def partition_spec(spec: TableSpec, schema):
    """The spec's partitioning, its fields named as Spark names them (`transaction_date_day`), so both agree."""
    from pyiceberg import transforms as X
    from pyiceberg.partitioning import PartitionField, PartitionSpec

    by_time = {"years": (X.YearTransform, "year"), "months": (X.MonthTransform, "month")}
    by_time |= {"days": (X.DayTransform, "day"), "hours": (X.HourTransform, "hour")}
    fields = []
    for i, text in enumerate(spec.partition_by):
        match = TRANSFORM.match(text)  # TableSpec accepts no other form
        kind, column = match.group(1) or match.group(3), match.group(2) or match.group(5) or match.group(6)
        width = int(match.group(4) or 0)
        if kind in by_time:
            transform, name = by_time[kind][0](), f"{column}_{by_time[kind][1]}"
        elif kind == "bucket":
            transform, name = X.BucketTransform(width), f"{column}_bucket_{width}"
        elif kind == "truncate":
            transform, name = X.TruncateTransform(width), f"{column}_trunc_{width}"
        else:
            transform, name = X.IdentityTransform(), column
        fields.append(PartitionField(schema.find_field(column).field_id, 1000 + i, transform, name))
    return PartitionSpec(*fields)


def sort_order(spec: TableSpec, schema):
    from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, NullOrder, SortDirection, SortField, SortOrder
    from pyiceberg.transforms import IdentityTransform

    if not spec.write_order:
        return UNSORTED_SORT_ORDER
    # NULLS FIRST: Spark's default for ASC, as `ensure_table` writes it
    ascending = (IdentityTransform(), SortDirection.ASC, NullOrder.NULLS_FIRST)
    return SortOrder(*(SortField(schema.find_field(name).field_id, *ascending) for name in spec.write_order))


PYICEBERG_WRITES_UP_TO = 2  # pyiceberg 0.12 reads v3 tables but cannot write v3 metadata


def bootstrap_catalog(catalog, specs: Iterable[TableSpec], warehouse: str, format_version: int) -> BootstrapResult:
    """Create every database and absent table of `specs` in a pyiceberg catalog (Glue in production)."""
    from pyiceberg.exceptions import NamespaceAlreadyExistsError, TableAlreadyExistsError

    specs = list(specs)
    if newer := sorted(s.identifier for s in specs if (s.format_version or format_version) > PYICEBERG_WRITES_UP_TO):
        raise ValueError(
            f"pyiceberg writes table metadata up to format v{PYICEBERG_WRITES_UP_TO} only: create "
            f"{', '.join(newer)} with Spark (bootstrap_with_spark), or use format version {PYICEBERG_WRITES_UP_TO}"
        )
    created_ns, created, existing = [], [], []
    present = {ns[0] for ns in catalog.list_namespaces()}
    for namespace in (ns for ns in namespaces(specs) if ns not in present):
        try:
            catalog.create_namespace(namespace, {"location": namespace_location(warehouse, namespace)})
            created_ns.append(namespace)
        except NamespaceAlreadyExistsError:  # another bootstrap got there first
            pass
    for spec in specs:
        if catalog.table_exists((spec.namespace, spec.name)):
            existing.append(spec.identifier)
            continue
        schema = iceberg_schema(spec)
        # The format version is a creation argument, not a stored property: the spec's own, else the profile's.
        properties = {FORMAT_VERSION: str(format_version), **spec.table_properties, "comment": spec.description}
        try:
            catalog.create_table(
                (spec.namespace, spec.name),
                schema=schema,
                location=warehouse_location(warehouse, spec),
                partition_spec=partition_spec(spec, schema),
                sort_order=sort_order(spec, schema),
                properties=properties,
            )
            created.append(spec.identifier)
        except TableAlreadyExistsError:
            existing.append(spec.identifier)
    return BootstrapResult(tuple(created_ns), tuple(created), tuple(existing))


def bootstrap_with_spark(spark: SparkSession, catalog: str, specs: Iterable[TableSpec]) -> BootstrapResult:
    """`ensure_table` for every spec: creates what is missing and evolves the rest to its spec."""
    specs = list(specs)
    before = {ns for ns in namespaces(specs) if spark.catalog.databaseExists(f"{catalog}.{ns}")}
    created, existing = [], []
    for spec in specs:
        (created if ensure_table(spark, catalog, spec).created else existing).append(spec.identifier)
    return BootstrapResult(tuple(ns for ns in namespaces(specs) if ns not in before), tuple(created), tuple(existing))
