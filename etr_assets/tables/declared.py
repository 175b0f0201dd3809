"""The tables of every declared source (docs/sources.md), derived from its YAML: per resource a bronze table and its
quarantine, and for entities an SCD2 history in landing. The shipped declarations live in `etr_assets/defs/sources/`;
`ETR_SOURCE_DIRS` adds folders of a deployment's own."""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib.resources
import os
from pathlib import Path

from etr_assets.errors import DeclarationError, SpecError
from etr_assets.lake.feeds import EntityFeed, FeedMode, RawFeed
from etr_assets.lake.specs import (
    HISTORY_PARTITIONS,
    MERGE_ON_READ,
    MIB,
    ROW_GROUP_SIZE,
    SCD2_COLUMNS,
    SCD2_EXPECTATIONS,
    TARGET_FILE_SIZE,
    Check,
    Column,
    QualityRules,
    Scd2,
    TableSpec,
)
from etr_assets.sources.declaration import (
    EntityMode,
    Resource,
    ResourceKind,
    SourceDeclaration,
    declaration_files,
    load_declaration,
)

# The package's own declarations, wherever the package is (a folder, or the zip a Glue or EMR job runs from).
SHIPPED_SOURCES = importlib.resources.files("etr_assets.defs.sources")
SOURCE_DIRS_VARIABLE = "ETR_SOURCE_DIRS"  # more folders of declarations, separated by os.pathsep

BRONZE_LINEAGE = (
    Column("_batch_id", "string", "Raw-zone batch the record arrived in", required=True),
    Column("_source_file", "string", "Raw-zone file the record was read from", required=True),
    Column("_ingested_at", "timestamp", "When the record was loaded into Iceberg", required=True),
)
AS_OF = Column("_as_of", "date", "Day of the snapshot the record came in", required=True)
# An entity list with no update time: a version starts when the snapshot that first showed its state was taken.
OBSERVED_AT = Column(
    "_observed_at", "timestamp", "Time of the snapshot that first showed this version's state", required=True
)
QUARANTINED_AT = Column("quarantined_at", "timestamp", "When it was quarantined", required=True)
_SMALL = {TARGET_FILE_SIZE: str(32 * MIB)}
# SCD2 histories change a few rows of a keyed table each day: the daily MERGE writes the closed and new versions and
# deletion vectors (format v3; position deletes on v2) instead of rewriting every file that holds a changed key.
# Every daily apply reads the whole current partition three times; row groups of 8 MiB (Iceberg splits a file only
# between them) spread those scans over every core instead of a task per file (docs/benchmarks.md).
_HISTORY = {**_SMALL, **MERGE_ON_READ, ROW_GROUP_SIZE: str(8 * MIB), "read.split.target-size": str(8 * MIB)}


def quarantine_spec(
    endpoint: str,
    subject: Column | None = None,
    key: Column | None = None,
    name: str | None = None,
    description: str | None = None,
    properties: dict[str, str] | None = None,
) -> TableSpec:
    """`bronze.quarantine_<endpoint>`, erasable by subject (raw text may hold personal data). `key`: kept when
    readable, since a refused record of a full snapshot still says its key was in it (SCD2 keeps the key)."""
    pii, carried = subject is not None, ()
    if subject is not None:
        carried = (Column(subject.name, subject.type, "Data subject, when it could be read from the record", pii=True),)
    if key is not None and (subject is None or key.name != subject.name):
        carried += (Column(key.name, key.type, "The record's key, when it could be read (present in the snapshot)"),)
    return TableSpec(
        namespace="bronze",
        name=name or f"quarantine_{endpoint}",
        description=description
        or f"Records of the {endpoint} endpoint that failed validation: raw text, reason, file and line",
        columns=(
            Column("_batch_id", "string", "Raw-zone batch", required=True),
            Column("_batch_day", "date", "Business day of the batch", required=True),
            Column("source_file", "string", "Raw-zone file", required=True),
            Column("line_number", "bigint", "1-based line in the file", required=True),
            Column("raw_text", "string", "The record exactly as stored in the raw zone", required=True, pii=pii),
            Column("reason", "string", "Why the record was refused", required=True),
            *carried,
            QUARANTINED_AT,
        ),
        partition_by=("days(_batch_day)",),
        properties={TARGET_FILE_SIZE: str(8 * MIB), **(properties or {})},
        subject_column=subject.name if subject else None,
    )


@dataclasses.dataclass(frozen=True)
class DeclaredSource:
    """A declaration and the feeds (with their tables) derived from it, by resource name."""

    declaration: SourceDeclaration
    feeds: dict[str, RawFeed | EntityFeed]

    @property
    def name(self) -> str:
        return self.declaration.name

    def raw_feed(self, resource: str) -> RawFeed:
        feed = self.feeds[resource]
        return feed.raw if isinstance(feed, EntityFeed) else feed

    @property
    def raw_feeds(self) -> tuple[RawFeed, ...]:
        return tuple(self.raw_feed(name) for name in self.feeds)

    @property
    def entity_feeds(self) -> tuple[EntityFeed, ...]:
        return tuple(feed for feed in self.feeds.values() if isinstance(feed, EntityFeed))

    @property
    def specs(self) -> tuple[TableSpec, ...]:
        raw = self.raw_feeds
        return (*(f.bronze for f in raw), *(f.quarantine for f in raw), *(f.landing for f in self.entity_feeds))


def _feed(source: SourceDeclaration, resource: Resource) -> RawFeed | EntityFeed:
    columns = {
        f.name: Column(f.name, f.type, f.doc, required=f.required, pii=f.pii, path=f.path) for f in resource.columns
    }
    fields = tuple(columns.values())
    checks = tuple(Check(c.description, c.sql) for c in resource.checks)
    freshness = QualityRules(freshness_window=dt.timedelta(hours=resource.freshness_hours))
    subject = columns[resource.subject] if resource.subject else None
    default_name = f"{source.name}_{resource.name}"
    bronze_options, entities = resource.bronze, resource.kind == ResourceKind.ENTITIES
    day = "_as_of" if entities else resource.day_column
    bronze = TableSpec(
        namespace="bronze",
        name=bronze_options.table or default_name,
        description=bronze_options.description
        or (
            f"Every {resource.name} record the {source.name} API delivered, per snapshot day, with lineage"
            if entities
            else f"{resource.name} of the {source.name} API as delivered, one row per received record, with lineage"
        ),
        columns=fields + ((AS_OF,) if entities else ()) + BRONZE_LINEAGE,
        partition_by=(f"days({day})",),
        write_order=(day, resource.key) if resource.key else (day,),
        properties={**(_SMALL if entities else {}), **bronze_options.properties},
        subject_column=resource.subject,
        checks=checks,
        quality=freshness,
    )
    full = entities and resource.mode == EntityMode.FULL
    quarantine = quarantine_spec(
        resource.name,
        subject,
        columns[resource.key] if full else None,
        resource.quarantine.table or f"quarantine_{default_name}",
        resource.quarantine.description,
        dict(resource.quarantine.properties),
    )
    if not entities:
        return RawFeed(source.name, resource.name, bronze, quarantine, day_column=day, record_day_column=day)
    raw = RawFeed(
        source.name, resource.name, bronze, quarantine, day_column=day, key_column=resource.key if full else None
    )
    history = resource.history
    business = [
        dataclasses.replace(
            columns[c.name], path=(), type=c.type or columns[c.name].type, doc=c.doc or columns[c.name].doc
        )
        for c in history.columns
    ] or [dataclasses.replace(c, path=()) for c in fields]
    landing = TableSpec(
        namespace="landing",
        name=history.table or default_name,
        description=history.description
        or f"{resource.name.capitalize()} history as SCD2: one version per change of a tracked attribute",
        columns=(*business, *(() if resource.sequence else (OBSERVED_AT,)), *SCD2_COLUMNS),
        partition_by=HISTORY_PARTITIONS,
        write_order=(resource.key, "_valid_from"),
        properties={**_HISTORY, **history.properties},
        subject_column=resource.subject if resource.subject in {c.name for c in business} else None,
        scd2=Scd2(key=resource.key, tracked=resource.tracked, sequence=resource.sequence or OBSERVED_AT.name),
        expectations=SCD2_EXPECTATIONS,
        quality=freshness,
    )
    return EntityFeed(raw, landing, FeedMode.FULL if full else FeedMode.INCREMENTAL)


def derive(declaration: SourceDeclaration) -> DeclaredSource:
    """The source's feeds and tables; a table the spec rules refuse is an error naming the resource's line."""
    feeds = {}
    for resource in declaration.resources:
        try:
            feeds[resource.name] = _feed(declaration, resource)
        except SpecError as refused:
            raise DeclarationError(f"{resource.where}: {refused}") from None
    return DeclaredSource(declaration, feeds)


def source_dirs(environ=None) -> tuple:
    extra = (environ if environ is not None else os.environ).get(SOURCE_DIRS_VARIABLE, "")
    return (SHIPPED_SOURCES, *(Path(p) for p in extra.split(os.pathsep) if p.strip()))


def load_sources(folders: tuple) -> tuple[DeclaredSource, ...]:
    """Every source declared under `folders`; two sources of one name, or two resources writing one table, are an
    error naming both places."""
    sources, names, tables = [], {}, {}
    for folder in folders:
        if not folder.is_dir():
            raise DeclarationError(f"{SOURCE_DIRS_VARIABLE} names {folder}, which is not a folder")
        for path in declaration_files(folder):
            source = derive(load_declaration(path))
            if source.name in names:
                raise DeclarationError(f"{path}: source {source.name} is declared twice (also in {names[source.name]})")
            names[source.name] = path
            for resource, feed in source.feeds.items():
                where, raw = source.declaration.resource(resource).where, source.raw_feed(resource)
                for spec in (raw.bronze, raw.quarantine, *([feed.landing] if isinstance(feed, EntityFeed) else [])):
                    if spec.identifier in tables:
                        raise DeclarationError(
                            f"{where}: writes table {spec.identifier}, which {tables[spec.identifier]} writes too"
                        )
                    tables[spec.identifier] = where.rsplit(": ", 1)[0]
            sources.append(source)
    return tuple(sources)


SOURCES: tuple[DeclaredSource, ...] = load_sources(source_dirs())


def source(name: str) -> DeclaredSource:
    for declared in SOURCES:
        if declared.name == name:
            return declared
    raise KeyError(f"no source named {name!r}; declared: {', '.join(s.name for s in SOURCES)}")
