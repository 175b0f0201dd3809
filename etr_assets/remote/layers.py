"""The layers a remote job can run, by asset key: each calls the library function its asset calls in process."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable

from etr_assets.lake.bronze import LayerResult
from etr_assets.lake.incremental import Cursor
from etr_assets.lake.specs import TableSpec
from etr_assets.settings import Settings
from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, GOLD_DAILY_SUMMARY, SILVER_TRANSACTIONS


@dataclasses.dataclass(frozen=True)
class LayerRequest:
    """What the Dagster side asks a job to build: plain JSON in the Pipes context's extras."""

    layer: str  # an asset key, e.g. "silver/bnpl_transactions_clean"
    days: list[str]
    audit_branch: str | None = None
    options: dict = dataclasses.field(default_factory=dict)  # e.g. silver's cursors and full_refresh

    def to_extras(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_extras(cls, extras: dict) -> LayerRequest:
        missing = [k for k in ("layer", "days") if k not in extras]
        if missing:
            raise ValueError(f"the Pipes extras lack {', '.join(missing)}: got keys {sorted(extras)}")
        if extras["layer"] not in LAYERS:
            raise ValueError(f"unknown layer {extras['layer']!r}; a remote job runs one of {', '.join(LAYERS)}")
        return cls(extras["layer"], list(extras["days"]), extras.get("audit_branch"), dict(extras.get("options") or {}))

    @property
    def dates(self) -> list[dt.date]:
        return [dt.date.fromisoformat(day) for day in self.days]


def _raw_zone(settings: Settings):
    from etr_assets.sources.raw_zone import local_raw_zone

    if settings.profile == "local":
        return local_raw_zone(settings.raw_root)
    import boto3

    from etr_assets.sources.s3_storage import s3_raw_zone

    client = boto3.client("s3", region_name=settings.region, endpoint_url=settings.s3_endpoint or None)
    return s3_raw_zone(client, settings.bucket, "raw", uri_scheme="s3a" if settings.profile == "s3" else "s3")


def _bronze(spark, settings: Settings, request: LayerRequest) -> LayerResult:
    from etr_assets.lake import transactions

    return transactions.load_bronze(
        spark, settings.catalog, _raw_zone(settings), request.dates, settings.max_reject_rate, settings.max_day_shrink
    )


def _silver(spark, settings: Settings, request: LayerRequest) -> LayerResult:
    from etr_assets.lake import transactions

    cursors = {
        dt.date.fromisoformat(day): Cursor(*value) if value else None
        for day, value in (request.options.get("cursors") or {}).items()
    }
    return transactions.build_silver(
        spark,
        settings.catalog,
        request.dates,
        request.audit_branch,
        cursors or None,
        bool(request.options.get("full_refresh", False)),
    )


def _gold(spark, settings: Settings, request: LayerRequest) -> LayerResult:
    from etr_assets.lake import transactions

    return transactions.build_gold(spark, settings.catalog, request.dates, request.audit_branch)


LAYERS: dict[str, tuple[TableSpec, Callable[..., LayerResult]]] = {
    "bronze/bnpl_transactions_raw": (BRONZE_TRANSACTIONS, _bronze),
    "silver/bnpl_transactions_clean": (SILVER_TRANSACTIONS, _silver),
    "gold/bnpl_daily_summary": (GOLD_DAILY_SUMMARY, _gold),
}


def cursor_options(cursors: dict[dt.date, Cursor | None]) -> dict:
    """Silver's cursors as JSON (snapshot ids as strings would also do; ints survive JSON exactly in Python)."""
    return {
        day.isoformat(): [c.upstream_snapshot_id, c.downstream_snapshot_id] if c else None for day, c in cursors.items()
    }
