"""Create a table from its spec, or evolve the live table to match it, refusing what is unsafe before anything is
altered (what is allowed: docs/lifecycle.md#schema-and-partition-evolution)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from etr_assets.errors import UnsafeEvolution
from etr_assets.lake.session import java_class
from etr_assets.lake.specs import CURSOR_PROPERTY, STATE_HASH_COLUMN, STATE_HASH_PROPERTY, TableSpec, decimal_type
from etr_assets.lake.writes import iceberg_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_WIDENINGS = {("int", "bigint"), ("float", "double")}
# Tables this process brought to a spec, with their layout: unchanged, one metadata read instead of five statements.
_MATCHED: dict[tuple[str, int], tuple[TableSpec, tuple]] = {}


@dataclasses.dataclass(frozen=True)
class TableChanges:
    table: str
    created: bool = False
    added_columns: tuple[str, ...] = ()
    renamed_columns: tuple[str, ...] = ()  # "old -> new"
    widened_columns: tuple[str, ...] = ()  # "name: int -> bigint"
    relaxed_columns: tuple[str, ...] = ()
    added_partition_fields: tuple[str, ...] = ()
    dropped_partition_fields: tuple[str, ...] = ()
    changed_properties: tuple[str, ...] = ()
    write_order: tuple[str, ...] = ()  # the spec's, when the table was sorted otherwise (or not at all)
    schema_id: int | None = None

    @property
    def any(self) -> bool:
        return any(dataclasses.astuple(self)[1:-1])

    def describe(self) -> str:
        if self.created:
            return f"created {self.table}"
        parts = [
            f"{label} {', '.join(values)}"
            for label, values in (
                ("added columns", self.added_columns),
                ("renamed", self.renamed_columns),
                ("widened", self.widened_columns),
                ("made nullable", self.relaxed_columns),
                ("added partition fields", self.added_partition_fields),
                ("dropped partition fields", self.dropped_partition_fields),
                ("set properties", self.changed_properties),
                ("write order now", self.write_order),
            )
            if values
        ]
        return f"{self.table}: " + ("; ".join(parts) if parts else "unchanged")


def plan(spec: TableSpec, live_columns: dict[str, tuple[str, bool]], live_parts: list[str]) -> dict[str, list]:
    """What to alter, given the live columns {name: (type, nullable)}; raises UnsafeEvolution on refusals."""
    problems, steps = [], {"add": [], "rename": [], "widen": [], "relax": [], "add_part": [], "drop_part": []}
    claimed = set()
    for column in spec.columns:
        source = column.name if column.name in live_columns else column.renamed_from
        if source not in live_columns:
            steps["add"].append(column)
            continue
        claimed.add(source)
        if source != column.name:
            steps["rename"].append((source, column.name))
        live_type, nullable = live_columns[source]
        if live_type != column.type:
            a, b = decimal_type(live_type), decimal_type(column.type)  # a decimal widens to more precision, same scale
            if (live_type, column.type) in _WIDENINGS or (a and b and a[1] == b[1] and b[0] > a[0]):
                steps["widen"].append((column.name, live_type, column.type))
            else:
                problems.append(
                    f"column {column.name}: {live_type} -> {column.type} is not a safe widening (Iceberg allows "
                    "int->bigint, float->double, decimal precision increases); add a new column and backfill it instead"
                )
        if column.required and nullable:
            problems.append(
                f"column {column.name}: making an existing column NOT NULL could break old rows; keep it nullable "
                "in the spec and enforce it with a data-quality check"
            )
        elif not column.required and not nullable:
            steps["relax"].append(column.name)
    for name in live_columns:
        if name not in claimed:
            problems.append(
                f"column {name}: dropping a column may break readers downstream; keep it in the spec "
                f"(mark it deprecated in its doc) or rename it with renamed_from"
            )
    steps["add_part"] = [p for p in spec.partition_by if p not in live_parts]
    steps["drop_part"] = [p for p in live_parts if p not in spec.partition_by]
    if problems:
        raise UnsafeEvolution(f"table {spec.identifier}: refused before any change: " + "; ".join(problems))
    return steps


def _layout(spark: SparkSession, qualified: str) -> tuple:
    """What any ALTER changes (identity, schema, partitioning, sort order, properties) and a data commit does not."""
    table = iceberg_table(spark, qualified)
    properties = java_class(spark, "java.util.HashMap")(table.properties())
    properties.remove(CURSOR_PROPERTY)  # an SCD2 apply moves it in its data commit
    return (
        str(table.uuid()),
        table.schema().schemaId(),
        table.spec().specId(),
        table.sortOrder().orderId(),
        properties.hashCode(),
    )


def ensure_table(spark: SparkSession, catalog: str, spec: TableSpec) -> TableChanges:
    """Create the table if absent; otherwise evolve it to the spec (or refuse, altering nothing)."""
    qualified = spec.qualified(catalog)
    matched = _MATCHED.get((qualified, id(spec)))
    if matched is not None and matched[0] is spec:  # nobody altered it since this process matched it to `spec`?
        try:
            layout = _layout(spark, qualified)
        except Exception:  # dropped since: the full path creates it again
            layout = None
        if layout == matched[1]:
            return TableChanges(qualified, schema_id=layout[1])
    changes = _ensure(spark, catalog, spec, qualified)
    layout = _layout(spark, qualified)
    _MATCHED[(qualified, id(spec))] = (spec, layout)
    return dataclasses.replace(changes, schema_id=layout[1])


def _ensure(spark: SparkSession, catalog: str, spec: TableSpec, qualified: str) -> TableChanges:
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{spec.namespace}")
    if not spark.catalog.tableExists(qualified):
        try:
            spark.sql(spec.create_ddl(catalog))
        except Exception as exc:  # another writer created it between our check and our CREATE
            if "already exists" not in str(exc).lower():
                raise
        else:
            if spec.write_order:
                spark.sql(spec.write_order_ddl(catalog))
            return TableChanges(qualified, created=True)

    live = {f.name: (f.dataType.simpleString(), f.nullable) for f in spark.table(qualified).schema.fields}
    parts = [
        r["data_type"] for r in spark.sql(f"DESCRIBE TABLE {qualified}").collect() if r["col_name"].startswith("Part ")
    ]
    steps = plan(spec, live, parts)
    alters = [f"RENAME COLUMN {old} TO {new}" for old, new in steps["rename"]]
    alters += [f"ALTER COLUMN {name} TYPE {new_type}" for name, _, new_type in steps["widen"]]
    alters += [f"ALTER COLUMN {name} DROP NOT NULL" for name in steps["relax"]]
    if steps["add"]:
        alters.append(f"ADD COLUMNS ({', '.join(f'{c.name} {c.type}' for c in steps['add'])})")
    alters += [f"DROP PARTITION FIELD {field}" for field in steps["drop_part"]]
    alters += [f"ADD PARTITION FIELD {field}" for field in steps["add_part"]]
    for alter in alters:
        spark.sql(f"ALTER TABLE {qualified} {alter}")

    current = {row["key"]: row["value"] for row in spark.sql(f"SHOW TBLPROPERTIES {qualified}").collect()}
    # Missing after a crash between CREATE and its ALTER, or another order: files written from now on follow the
    # spec's; those written before keep theirs (compaction bin-packs, it does not sort).
    shown = ", ".join(f"{column} ASC NULLS FIRST" for column in spec.write_order)  # as Iceberg shows the order
    reordered = spec.write_order if spec.write_order and current.get("sort-order") != shown else ()
    if reordered:
        spark.sql(spec.write_order_ddl(catalog))
    wanted = {k: v for k, v in spec.table_properties.items() if k != "format-version" and current.get(k) != v}
    if STATE_HASH_PROPERTY in wanted:  # the rows' hashes are missing or computed otherwise: fill them first
        spark.sql(f"UPDATE {qualified} SET {STATE_HASH_COLUMN} = {spec.state_hash_sql}")
    if wanted:
        assignments = ", ".join(f"'{k}' = '{v}'" for k, v in sorted(wanted.items()))
        spark.sql(f"ALTER TABLE {qualified} SET TBLPROPERTIES ({assignments})")
    return TableChanges(
        qualified,
        added_columns=tuple(c.name for c in steps["add"]),
        renamed_columns=tuple(f"{old} -> {new}" for old, new in steps["rename"]),
        widened_columns=tuple(f"{n}: {a} -> {b}" for n, a, b in steps["widen"]),
        relaxed_columns=tuple(steps["relax"]),
        added_partition_fields=tuple(steps["add_part"]),
        dropped_partition_fields=tuple(steps["drop_part"]),
        changed_properties=tuple(sorted(wanted)),
        write_order=reordered,
    )
