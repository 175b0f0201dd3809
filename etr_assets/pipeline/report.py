"""What a run of a layer reports, wherever it ran: built here around `run_layer`, shown by `etr_assets.defs.compute`
both when it ran in process and when a Glue/EMR job (`etr_assets.remote.run_layer`) sent it as one Pipes message,
so the two ways report the same metadata, warnings, metric rows and check results."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from etr_assets.lake.exhaustion import exhaustion
from etr_assets.lake.figures import Tagged
from etr_assets.lake.quality import CheckOutcome, Severity, metrics_of, record_metrics
from etr_assets.lake.wap import AuditFailed
from etr_assets.pipeline.layers import LAYERS, LayerRequest, run_layer
from etr_assets.sources.raw_zone import RawZone


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


def report_layer(
    spark, catalog: str, raw: Callable[[], RawZone], request: LayerRequest, run_id: str, spark_conf: dict, raw_root: str
) -> Report:
    """Run the layer and say what happened. A failed audit records its metric rows and reports its checks before
    the run fails; a JVM out of memory or disk fails it in one line naming the setting or the folder; any other
    error is raised as it is."""
    spec = LAYERS[request.layer].spec
    try:
        finished = run_layer(spark, catalog, raw, request, run_id)
    except AuditFailed as failed:
        record_metrics(spark, catalog, metrics_of(spec, failed.results), run_id)
        inspect = f"`etr sql \"SELECT * FROM {spec.identifier} VERSION AS OF '{failed.branch}'\"`"
        return Report(
            {}, list(failed.results), [], str(failed), {"audit_branch": failed.branch, "inspect": Tagged("md", inspect)}
        )
    except Exception as failed:
        days = request.days[0] + (f"..{request.days[-1]}" if len(request.days) > 1 else "")
        folders = {raw_root: "the raw zone"} if raw_root else {}  # with the conf's scratch and warehouse
        exhausted = exhaustion(failed, f"building {spec.identifier} for {days}", spark_conf, folders=folders)
        if exhausted is None:
            raise
        return Report({}, [], [], str(exhausted))
    f = finished.figures
    rows = f.get("dagster/row_count", "an unknown number of rows")
    commit = f"{f['operation']} snapshot {f['snapshot_id']} (+{f['files_added']}/-{f['files_removed']} files)"
    summary = f"{spec.identifier}: {f['rows_written']} rows written, {rows} in the table; " + (
        commit if f["snapshot_id"] != "none" else "nothing committed"
    )
    logs = [("info", summary)] + [("warning", warning) for warning in finished.warnings]
    return Report(f, list(finished.outcomes), logs)
