"""Feeds: how an API endpoint's batches reach the lake. A pipeline declares its feeds beside its table specs and
passes them to the library (`bronze.load_bronze_days`, the SCD2 landing step, erasure of the raw zone)."""

from __future__ import annotations

import dataclasses
from enum import StrEnum

from etr_assets.lake.specs import TableSpec


class FeedMode(StrEnum):
    """What an entity feed's batch holds: the whole list (a key it lacks was deleted), or changes only."""

    FULL = "full"
    INCREMENTAL = "incremental"


@dataclasses.dataclass(frozen=True)
class RawFeed:
    """One API endpoint's path from the raw zone into bronze."""

    source: str
    endpoint: str
    bronze: TableSpec
    quarantine: TableSpec
    day_column: str  # bronze column holding the batch's business day (what a rerun replaces)
    record_day_column: str | None = None  # a record field that must equal the batch day, if any
    # A full snapshot's entity key, kept in quarantine: a refused record's key is no deletion for SCD2.
    key_column: str | None = None

    @property
    def api_columns(self):
        return tuple(c for c in self.bronze.columns if not c.name.startswith("_"))


@dataclasses.dataclass(frozen=True)
class EntityFeed:
    """An endpoint of entity versions: bronze is their observation log, `landing` their SCD2 history."""

    raw: RawFeed
    landing: TableSpec
    mode: FeedMode = FeedMode.FULL
