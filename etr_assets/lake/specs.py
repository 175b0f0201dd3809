"""TableSpec: the single declaration of an Iceberg table, from which its DDL, evolution, Spark read schema, the UI's
column schema and erasure's list of tables are derived."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Mapping
from types import MappingProxyType

from etr_assets.errors import SpecError

_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")


def decimal_type(type_name: str) -> tuple[int, int] | None:
    """(precision, scale) of a `decimal(p,s)` column type, None for any other type: the one parser of that form."""
    match = _DECIMAL.match(type_name)
    return (int(match.group(1)), int(match.group(2))) if match else None


# Each simple column type (Spark SQL's name) -> its class in pyspark.sql.types and in pyiceberg.types, by name so that
# specs import neither: `frames.spark_type` and `bootstrap.iceberg_type` derive from this one table.
SIMPLE_TYPES: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "string": ("StringType", "StringType"),
        "bigint": ("LongType", "LongType"),
        "int": ("IntegerType", "IntegerType"),
        "float": ("FloatType", "FloatType"),
        "double": ("DoubleType", "DoubleType"),
        "boolean": ("BooleanType", "BooleanType"),
        "date": ("DateType", "DateType"),
        "timestamp": ("TimestampType", "TimestamptzType"),  # Spark's timestamp is Iceberg's timestamptz (docs/stack.md)
    }
)
# A partition transform as a spec writes it: `days(col)`, `bucket(16, col)`, or a column (identity).
TRANSFORM = re.compile(r"^(identity|years|months|days|hours)\((\w+)\)$|^(bucket|truncate)\((\d+),\s*(\w+)\)$|^(\w+)$")

MIB = 1024 * 1024
# Iceberg table property names this project reads or sets (one spelling each).
TARGET_FILE_SIZE = "write.target-file-size-bytes"
ROW_GROUP_SIZE = "write.parquet.row-group-size-bytes"  # the unit a reader skips by its statistics and bloom filters
WAP_ENABLED = "write.wap.enabled"
FORMAT_VERSION = "format-version"
# Row-level changes write delete files (v3: deletion vectors), not whole files; compaction merges them later.
MERGE_ON_READ: Mapping[str, str] = MappingProxyType(
    {f"write.{change}.mode": "merge-on-read" for change in ("delete", "update", "merge")}
)
BLOOM_FILTER_COLUMN = "write.parquet.bloom-filter-enabled.column.{}"
BLOOM_FILTER_MAX_BYTES = "write.parquet.bloom-filter-max-bytes"


def bloom_filter(column: str, ids_per_file: int) -> dict[str, str]:
    """Properties of a Parquet bloom filter on `column`, sized for `ids_per_file` distinct values at about 1% false
    positives: Parquet's default of 1 MiB a filter dwarfs small day files (docs/benchmarks.md)."""
    size = 1024
    while size < ids_per_file * 1.25:
        size *= 2
    return {BLOOM_FILTER_COLUMN.format(column): "true", BLOOM_FILTER_MAX_BYTES: str(size)}


# A spec without `format_version` gets the profile's (Settings.format_version): v2 where Athena must read it.
FORMAT_VERSIONS = (2, 3)
# Per-column metrics mode: `counts` keeps value and null counts but no lower/upper bound, so a manifest never
# carries a personal value (truncate(n) never shortens an integer and keeps a string's first n characters).
METRICS_COLUMN_PROPERTY = "write.metadata.metrics.column.{}"
METRICS_DEFAULT = "write.metadata.metrics.default"
PERSONAL_DATA_METRICS = "counts"

# Properties every table gets unless its spec overrides them (requirement R1, docs/stack.md, apache/iceberg #732).
DEFAULT_PROPERTIES: Mapping[str, str] = MappingProxyType(
    {
        "write.format.default": "parquet",
        "write.parquet.compression-codec": "zstd",
        TARGET_FILE_SIZE: str(128 * MIB),
        "write.distribution-mode": "hash",
        # Concurrent writers: Iceberg re-applies a losing append/overwrite itself this many times.
        "commit.retry.num-retries": "10",
        "commit.retry.min-wait-ms": "100",
        "commit.retry.max-wait-ms": "30000",
        "commit.retry.total-timeout-ms": "600000",
        # Keep metadata.json history bounded (mitodl/ol-data-platform #2238). Each version lists every snapshot kept:
        # tens of them for a table appended at every step made metadata.json the lake's largest excess of bytes.
        "write.metadata.delete-after-commit.enabled": "true",
        "write.metadata.previous-versions-max": "10",
        METRICS_DEFAULT: "truncate(16)",
        # Every commit merges the newest manifests once 8 have piled up (Iceberg's default waits for 100): every
        # read and check lists all of them, so reads would grow with each commit until rewrite_manifests.
        "commit.manifest.min-count-to-merge": "8",
        # Snapshot retention read by expire_snapshots.
        "history.expire.max-snapshot-age-ms": str(7 * 24 * 3600 * 1000),
        "history.expire.min-snapshots-to-keep": "10",
    }
)


@dataclasses.dataclass(frozen=True)
class Column:
    name: str
    type: str  # Spark SQL type name: one of SIMPLE_TYPES or decimal(p,s)
    doc: str = ""
    required: bool = False  # a NOT NULL column: rows without it never reach the table
    pii: bool = False  # holds personal data: erased on a GDPR request
    renamed_from: str | None = None  # the column's previous name: evolution renames instead of adding
    path: tuple[str, ...] = ()  # where a received record holds the value, when not a top-level field of this name


@dataclasses.dataclass(frozen=True)
class Check:
    """A rule every row satisfies: a SQL predicate over the typed columns (NULL passes). `per_record`: a breaking
    record goes to the record quarantine and the rest of its day publishes; otherwise the whole day is stopped."""

    description: str
    predicate: str
    per_record: bool = False

    @property
    def name(self) -> str:
        """A short identifier (for Dagster check names and metric rows)."""
        return re.sub(r"[^a-z0-9]+", "_", self.description.lower()).strip("_")[:60]


@dataclasses.dataclass(frozen=True)
class Reference:
    """Every non-NULL `column` value should be a `key` of `table`: a WARN check (they may arrive later)."""

    column: str
    table: str
    key: str

    @property
    def name(self) -> str:
        return f"{self.column}_is_known"


@dataclasses.dataclass(frozen=True)
class QualityRules:
    """Non-blocking data-quality checks of a table (etr_assets.lake.quality), besides its expectations."""

    row_count_window_days: int = 7  # a day's rows are compared with the median of the days before it
    row_count_tolerance: float = 0.5  # allowed relative distance from that median
    row_count_min_history_days: int = 3  # fewer days of history: no verdict (the check passes, saying so)
    # The asset's FreshnessPolicy: it fails freshness once its newest materialization is older than this.
    freshness_window: dt.timedelta = dt.timedelta(hours=36)
    references: tuple[Reference, ...] = ()

    def __post_init__(self) -> None:
        if self.row_count_window_days < 1 or self.row_count_min_history_days < 1:
            raise SpecError("quality rules: row-count window and minimum history must be at least one day")
        if not 0 < self.row_count_tolerance:
            raise SpecError(f"quality rules: row_count_tolerance={self.row_count_tolerance} must be positive")
        if self.freshness_window < dt.timedelta(minutes=1):
            raise SpecError(
                f"quality rules: freshness_window={self.freshness_window} is under a minute (Dagster's least)"
            )


@dataclasses.dataclass(frozen=True)
class Scd2:
    """How an SCD2 table keeps history: by key, over the tracked columns, ordered by the source's sequence."""

    key: str
    tracked: tuple[str, ...]
    sequence: str  # the source's update timestamp: versions are ordered by it, never by arrival


@dataclasses.dataclass(frozen=True)
class HealthThresholds:
    """Limits on a table's metadata figures: above one the table WARNs (maintenance is due); above `error_factor`
    times a count or age limit it is an ERROR (planning and commits are already slow); small files only WARN."""

    max_small_file_share: float = 0.5  # share of data files compaction could merge (small, not alone in a partition)
    # ... judged only from this many mergeable files (or small files filling a target file)
    min_mergeable_small_files: int = 16
    max_delete_files: int = 20  # position/equality delete files every read must apply
    max_snapshots: int = 100
    max_snapshot_age_days: float = 14.0  # judged only beyond history.expire.min-snapshots-to-keep
    max_manifests: int = 50
    max_metadata_file_mb: float = 5.0  # metadata.json is re-read by every query and commit
    # bytes kept per byte the current snapshot reads; judged once the excess would fill a target file (a tiny table
    # is mostly metadata)
    max_storage_amplification: float = 2.0
    error_factor: float = 4.0

    def __post_init__(self) -> None:
        if not 0 < self.max_small_file_share <= 1:
            raise SpecError(f"health threshold max_small_file_share={self.max_small_file_share} must be in (0, 1]")
        for name in (f.name for f in dataclasses.fields(self) if f.name.startswith(("max_", "min_"))):
            if getattr(self, name) <= 0:
                raise SpecError(f"health threshold {name}={getattr(self, name)} must be positive")
        if self.error_factor < 1:
            raise SpecError(f"health threshold error_factor={self.error_factor} must be at least 1")


STATE_HASH_COLUMN = "_state_hash"
# The expression the table's `_state_hash` values were computed with (`TableSpec.state_hash_sql`). Set only once every
# row carries it (evolution fills the column first): a reader may trust the stored hashes exactly when it matches.
STATE_HASH_PROPERTY = "etr.scd2.state-hash"
CURSOR_PROPERTY = "etr.scd2.cursor"  # where an SCD2 table keeps its cursor (`scd2.Scd2Cursor`)

# Columns every SCD2 table carries (requirement R2, and the state hash), after its business columns.
SCD2_COLUMNS = (
    Column("_ingested_at", "timestamp", "When this version row was last written", required=True),
    Column("_source_file", "string", "Raw-zone file of the record that started this version", required=True),
    Column("_batch_id", "string", "Raw-zone batch of the record that started this version", required=True),
    Column("_is_current", "boolean", "True for the version valid now (at most one per key)", required=True),
    Column("_valid_from", "timestamp", "Source time this version became valid", required=True),
    Column("_valid_to", "timestamp", "Source time the next version (or deletion) began; NULL while current"),
    Column(
        STATE_HASH_COLUMN,
        "bigint",
        "Fingerprint of the tracked columns (the table property etr.scd2.state-hash says how it is computed): a daily "
        "batch is compared with it instead of every tracked column of every current version",
    ),
)


# Row rules every SCD2 table keeps (blocking checks after each MERGE).
SCD2_EXPECTATIONS = (
    Check("validity intervals are ordered", "_valid_to IS NULL OR _valid_to >= _valid_from"),
    Check("exactly the open versions are current", "_is_current = (_valid_to IS NULL)"),
)

# By the month a version closed: the daily apply reads the current versions' one partition (docs/scd2.md).
HISTORY_PARTITIONS = ("months(_valid_to)",)
# The current versions as a filter Iceberg prunes by (`_is_current` would read every partition).
CURRENT_VERSIONS = "_valid_to IS NULL"


@dataclasses.dataclass(frozen=True)
class TableSpec:
    namespace: str
    name: str
    description: str
    columns: tuple[Column, ...]
    partition_by: tuple[str, ...] = ()  # Iceberg transforms, e.g. "days(transaction_date)"
    write_order: tuple[str, ...] = ()  # sort within each written file
    properties: Mapping[str, str] = dataclasses.field(default_factory=dict)  # overrides DEFAULT_PROPERTIES
    subject_column: str | None = None  # the column naming the data subject, for erasure
    checks: tuple[Check, ...] = ()  # input validation beyond types and NOT NULL (bronze tables)
    expectations: tuple[Check, ...] = ()  # every written row satisfies these: blocking checks before publishing
    unique_key: str | None = None  # no two rows share this column's value: a blocking check too
    scd2: Scd2 | None = None  # history kept as SCD2 versions
    health: HealthThresholds = HealthThresholds()  # when the table needs maintenance
    quality: QualityRules = QualityRules()  # row-count anomaly, freshness, references
    format_version: int | None = None  # None: the profile's (FORMAT_VERSIONS above)

    def __post_init__(self) -> None:
        where = f"table spec {self.namespace}.{self.name}"
        for part in (self.namespace, self.name):
            if not re.fullmatch(r"[a-z][a-z0-9_]*", part):
                raise SpecError(f"{where}: {part!r} is not a lower-case identifier")
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            raise SpecError(f"{where}: duplicate column names {sorted(n for n in names if names.count(n) > 1)}")
        for column in self.columns:
            if column.renamed_from and column.renamed_from in names:
                raise SpecError(
                    f"{where}: column {column.name!r} is renamed from {column.renamed_from!r}, which is still a column"
                )
            if column.type not in SIMPLE_TYPES and not decimal_type(column.type):
                raise SpecError(f"{where}: column {column.name!r} has unsupported type {column.type!r}")
        if self.format_version is not None and self.format_version not in FORMAT_VERSIONS:
            raise SpecError(f"{where}: format_version {self.format_version} is not one of {FORMAT_VERSIONS}")
        for transform in self.partition_by:
            if not (match := TRANSFORM.match(transform)):
                raise SpecError(f"{where}: partition transform {transform!r} is not understood")
            source = match.group(2) or match.group(5) or match.group(6)
            if source not in names:
                raise SpecError(f"{where}: partition transform {transform!r} names unknown column {source!r}")
        if unknown := [name for name in self.write_order if name not in names]:
            raise SpecError(f"{where}: write order names unknown column {unknown[0]!r}")
        if self.subject_column is not None and self.subject_column not in names:
            raise SpecError(f"{where}: subject column {self.subject_column!r} is not a column")
        if self.scd2 is not None:
            for name in (self.scd2.key, self.scd2.sequence, *self.scd2.tracked, *(c.name for c in SCD2_COLUMNS)):
                if name not in names:
                    raise SpecError(f"{where}: SCD2 names column {name!r}, which the table lacks")
        if lacking := [r.column for r in self.quality.references if r.column not in names]:
            raise SpecError(f"{where}: reference names column {lacking[0]!r}, which the table lacks")
        if self.subject_column is None and self.pii_columns:
            raise SpecError(f"{where}: has personal data {self.pii_columns} but no subject column to erase by")

    @property
    def identifier(self) -> str:
        return f"{self.namespace}.{self.name}"

    def qualified(self, catalog: str) -> str:
        return f"{catalog}.{self.namespace}.{self.name}"

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def pii_columns(self) -> list[str]:
        return [c.name for c in self.columns if c.pii]

    @property
    def holds_personal_data(self) -> bool:
        return bool(self.pii_columns)

    @property
    def personal_data_columns(self) -> list[str]:
        """The subject column and every pii column: none of them may leave a value in a manifest's bounds."""
        pii = self.pii_columns
        return [self.subject_column, *(c for c in pii if c != self.subject_column)] if pii else []

    def column(self, name: str) -> Column:
        for column in self.columns:
            if column.name == name:
                return column
        raise SpecError(f"table spec {self.identifier} has no column {name!r}")

    @property
    def day_column(self) -> str | None:
        """The column of the table's days(...) partition: what a daily asset partition of it holds."""
        return next((m.group(1) for t in self.partition_by if (m := re.fullmatch(r"days\((\w+)\)", t))), None)

    @property
    def table_properties(self) -> dict[str, str]:
        personal = {METRICS_COLUMN_PROPERTY.format(c): PERSONAL_DATA_METRICS for c in self.personal_data_columns}
        state = {}
        if self.scd2 is not None:
            state[STATE_HASH_PROPERTY] = self.state_hash_sql
            if self.holds_personal_data:  # a hash of personal values: no bounds of it in manifests either
                personal[METRICS_COLUMN_PROPERTY.format(STATE_HASH_COLUMN)] = PERSONAL_DATA_METRICS
        pinned = {FORMAT_VERSION: str(self.format_version)} if self.format_version else {}
        return {**DEFAULT_PROPERTIES, **personal, **state, **pinned, **self.properties}

    @property
    def state_hash_sql(self) -> str | None:
        """SQL of the SCD2 state fingerprint: a 64-bit hash of the typed tracked columns, each preceded by whether
        it is NULL (Spark's hashes skip NULLs, which would make (x, NULL) and (NULL, x) equal)."""
        if self.scd2 is None:
            return None
        values = [f"CAST(`{name}` AS {self.column(name).type})" for name in self.scd2.tracked]
        return f"xxhash64({', '.join(f'{value} IS NULL, {value}' for value in values)})"

    @property
    def merge_on_read(self) -> bool:
        """Whether any row-level change (delete, update, merge) leaves delete files instead of rewriting."""
        properties = self.table_properties
        return any(properties.get(mode) == "merge-on-read" for mode in MERGE_ON_READ)

    @property
    def target_file_size_bytes(self) -> int:
        return int(self.table_properties[TARGET_FILE_SIZE])

    def create_ddl(self, catalog: str) -> str:
        """CREATE TABLE for this spec. Names come from validated identifiers; no user input is formatted in."""
        columns = ",\n  ".join(
            f"{c.name} {c.type}{' NOT NULL' if c.required else ''}"
            + (f" COMMENT {_sql_string(c.doc)}" if c.doc else "")
            for c in self.columns
        )
        lines = [f"CREATE TABLE {self.qualified(catalog)} (\n  {columns}\n) USING iceberg"]
        if self.partition_by:
            lines.append(f"PARTITIONED BY ({', '.join(self.partition_by)})")
        lines.append(f"COMMENT {_sql_string(self.description)}")
        props = ",\n  ".join(f"{_sql_string(k)} = {_sql_string(v)}" for k, v in sorted(self.table_properties.items()))
        lines.append(f"TBLPROPERTIES (\n  {props}\n)")
        return "\n".join(lines)

    def write_order_ddl(self, catalog: str) -> str | None:
        """Cluster writes by partition and sort inside each file (docs/stack.md: avoids OOM, keeps files few)."""
        if not self.write_order:
            return None
        order = ", ".join(self.write_order)
        return f"ALTER TABLE {self.qualified(catalog)} WRITE DISTRIBUTED BY PARTITION LOCALLY ORDERED BY {order}"


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
