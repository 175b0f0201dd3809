"""What a layer is asked and what it answers, as plain JSON-able values so the same contract holds in process and in
a Glue/EMR job (Pipes extras in, one Pipes message out). A layer's request type says what it takes beyond its days."""

from __future__ import annotations

import dataclasses
import datetime as dt

from etr_assets.lake.bronze import DEFAULT_MAX_DAY_SHRINK, DEFAULT_MAX_REJECT_RATE
from etr_assets.lake.figures import Tagged
from etr_assets.lake.quality import CheckOutcome, Severity


@dataclasses.dataclass(frozen=True)
class LayerRequest:
    """Build these days of the layer (the gold layers take nothing more)."""

    layer: str  # layer_name(spec) of the table it builds
    days: list[str]
    audit_branch: str | None = None  # write-audit-publish through this branch, where the layer audits

    @property
    def dates(self) -> list[dt.date]:
        return [dt.date.fromisoformat(day) for day in self.days]

    def to_extras(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class BronzeRequest(LayerRequest):
    """A bronze load, failing past these limits: the share of a batch's records refused into quarantine, and how
    far a day may shrink against what bronze held."""

    max_reject_rate: float = DEFAULT_MAX_REJECT_RATE
    max_day_shrink: float = DEFAULT_MAX_DAY_SHRINK


@dataclasses.dataclass(frozen=True)
class RebuildRequest(LayerRequest):
    """Silver, or a history: `full_refresh` reads every upstream row instead of only what changed since."""

    full_refresh: bool = False


def request_from_extras(extras: dict, request_type: type[LayerRequest]) -> LayerRequest:
    """`request_type`'s request from the Pipes extras (other keys, e.g. the job's settings, are not its)."""
    if missing := [k for k in ("layer", "days") if k not in extras]:
        raise ValueError(f"the Pipes extras lack {', '.join(missing)}: got keys {sorted(extras)}")
    fields = {f.name for f in dataclasses.fields(request_type)}
    return request_type(**{k: v for k, v in extras.items() if k in fields} | {"days": list(extras["days"])})


@dataclasses.dataclass(frozen=True)
class FinishedLayer:
    figures: dict[str, object]  # lake.figures: the materialization's metadata, plain values
    outcomes: list[CheckOutcome]  # every check of the write, blocking ones from the audit branch included
    warnings: tuple[str, ...] = ()  # for the run's log (fields the source added, records quarantined...)


@dataclasses.dataclass(frozen=True)
class Report:
    figures: dict[str, object]  # the materialization's metadata (lake.figures); none when the layer failed
    outcomes: list[CheckOutcome]  # every check of the write, a failed audit's included
    logs: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (level, message) for the run's log
    failure: str | None = None  # why the run fails, after its checks are recorded
    failure_figures: dict[str, object] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict) -> Report:
        """The report again from `dataclasses.asdict(report)`, the JSON a remote job sends through Pipes."""

        def tagged(figures: dict) -> dict:
            return {
                k: Tagged(**v) if isinstance(v, dict) and set(v) == {"kind", "value"} else v for k, v in figures.items()
            }

        outcomes = [CheckOutcome(**o | {"severity": Severity(o["severity"])}) for o in data["outcomes"]]
        return cls(tagged(data["figures"]), outcomes, data["logs"], data["failure"], tagged(data["failure_figures"]))
