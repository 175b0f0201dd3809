"""The `propagate_corrections` sensor: finds the gold days built before something they derive from changed
(etr_assets.pipeline.propagation), marks each on its asset page (the day's `up_to_date` check fails with why), and
re-derives them: one single-run backfill per range of days, one commit per table. Stopped by default, like every
automation here (docs/lifecycle.md, "Corrections propagate")."""

from __future__ import annotations

import json

import dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from etr_assets.defs.common import table_key
from etr_assets.defs.dagster_private import materialization_of
from etr_assets.pipeline.layers import DERIVED_SPECS, LAYERS, UP_TO_DATE
from etr_assets.pipeline.propagation import DERIVED, INPUTS, out_of_date

PROPAGATION_TAG = "etr/propagates"  # on each run it launches: the range and the tables it re-derives


def built_orders(instance: dg.DagsterInstance) -> dict[str, dict[str, int]]:
    """Per judged or input table, the storage id of each day's latest materialization: one query per table."""
    return {
        layer: dict(
            instance.get_latest_storage_id_by_partition(
                table_key(LAYERS[layer].spec), dg.DagsterEventType.ASSET_MATERIALIZATION
            )
        )
        for layer in (*INPUTS, *DERIVED)
    }


def flagged_evaluations(instance, stale: dict[str, dict[str, str]], already: set[str]) -> list:
    """A failed (WARN) `up_to_date` of each out-of-date day not flagged before, on that day's materialization."""
    events = []
    for layer, days in stale.items():
        key = table_key(LAYERS[layer].spec)
        for day, why in days.items():
            if f"{layer}@{day}" in already:
                continue
            events.append(
                dg.AssetCheckEvaluation(
                    asset_key=key,
                    check_name=UP_TO_DATE,
                    passed=False,
                    severity=dg.AssetCheckSeverity.WARN,
                    partition=day,
                    description=f"out of date: {why}",
                    metadata={"reason": why},
                    target_materialization_data=materialization_of(instance, key, day),
                )
            )
    return events


def build_propagation_sensor() -> dg.SensorDefinition:
    @dg.sensor(
        name="propagate_corrections",
        target=dg.AssetSelection.assets(*(table_key(spec) for spec in DERIVED_SPECS)),
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=(
            "Finds gold days built before a day they derive from changed (a corrected silver day, a customer history "
            "given a late day, a day rebuilt after the days built on it), marks each day's up_to_date check as "
            "failing with the reason, and re-derives them: one run per range of days, from the first out-of-date "
            "day to the newest built one for tables carried forward."
        ),
    )
    def propagate_corrections(context: dg.SensorEvaluationContext):
        built = built_orders(context.instance)
        stale = out_of_date(built)
        already = set(json.loads(context.cursor or "[]"))
        flagged = {f"{layer}@{day}" for layer, days in stale.days.items() for day in days}
        events = flagged_evaluations(context.instance, stale.days, already)
        latest = max((order for days in built.values() for order in days.values()), default=0)
        requests = []
        for tables, first, last in stale.runs(built):
            names = ", ".join(tables)
            tags = {PROPAGATION_TAG: f"{names} {first}...{last}"}
            if first != last:
                tags |= {ASSET_PARTITION_RANGE_START_TAG: first, ASSET_PARTITION_RANGE_END_TAG: last}
            requests.append(
                dg.RunRequest(
                    # One run per state of the lake: a later tick with nothing new built asks for nothing new.
                    run_key=f"{names}:{first}...{last}@{latest}",
                    asset_selection=[table_key(LAYERS[t].spec) for t in tables],
                    partition_key=first if first == last else None,
                    tags=tags,
                )
            )
        cursor = json.dumps(sorted(flagged))
        if not requests:
            skip = "no gold day is out of date"
            return dg.SensorResult(skip_reason=skip, cursor=cursor) if flagged != already else dg.SkipReason(skip)
        context.log.info(
            "out of date: "
            + "; ".join(f"{t} {min(d)}...{max(d)} ({len(d)} day(s))" for t, d in stale.days.items() if d)
        )
        return dg.SensorResult(run_requests=requests, asset_events=events, cursor=cursor)

    return propagate_corrections
