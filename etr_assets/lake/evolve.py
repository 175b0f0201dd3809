"""Create a table from its spec, and bring an existing table in line with additive spec changes."""

from __future__ import annotations

import dataclasses

from etr_assets.lake.specs import TableSpec


@dataclasses.dataclass(frozen=True)
class TableChanges:
    table: str
    created: bool = False
    added_columns: tuple[str, ...] = ()
    changed_properties: tuple[str, ...] = ()

    @property
    def any(self) -> bool:
        return self.created or bool(self.added_columns or self.changed_properties)

    def describe(self) -> str:
        if self.created:
            return f"created {self.table}"
        parts = []
        if self.added_columns:
            parts.append(f"added columns {', '.join(self.added_columns)}")
        if self.changed_properties:
            parts.append(f"set properties {', '.join(self.changed_properties)}")
        return f"{self.table}: " + ("; ".join(parts) if parts else "unchanged")


def table_exists(spark, qualified: str) -> bool:
    return bool(spark.catalog.tableExists(qualified))


def ensure_table(spark, catalog: str, spec: TableSpec) -> TableChanges:
    """Create the table if absent; otherwise add spec columns it lacks and sync its properties."""
    qualified = spec.qualified(catalog)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{spec.namespace}")
    if not table_exists(spark, qualified):
        try:
            spark.sql(spec.create_ddl(catalog))
        except Exception as exc:  # another writer created it between our check and our CREATE
            if "already exists" not in str(exc).lower():
                raise
        else:
            if spec.write_order:
                spark.sql(spec.write_order_ddl(catalog))
            return TableChanges(qualified, created=True)

    existing = {field.name for field in spark.table(qualified).schema.fields}
    missing = [c for c in spec.columns if c.name not in existing]
    if missing:
        # New columns are always nullable in an existing table: old rows have no value for them.
        columns = ", ".join(f"{c.name} {c.type}" + (f" COMMENT '{c.doc}'" if c.doc and "'" not in c.doc else "") for c in missing)
        spark.sql(f"ALTER TABLE {qualified} ADD COLUMNS ({columns})")

    current = {row["key"]: row["value"] for row in spark.sql(f"SHOW TBLPROPERTIES {qualified}").collect()}
    wanted = {k: v for k, v in spec.table_properties.items() if k != "format-version" and current.get(k) != v}
    if wanted:
        assignments = ", ".join(f"'{k}' = '{v}'" for k, v in sorted(wanted.items()))
        spark.sql(f"ALTER TABLE {qualified} SET TBLPROPERTIES ({assignments})")
    return TableChanges(qualified, added_columns=tuple(c.name for c in missing), changed_properties=tuple(sorted(wanted)))
