"""The `propagate_corrections` sensor: finds the gold days built before something they derive from changed
(etr_assets.pipeline.propagation), marks each on its asset page (its `up_to_date` check fails with why, recorded by a
short `flag_out_of_date` run), and re-derives them with `rederive_gold`, one single-run backfill per range of days.
Stopped by default, like every automation here (docs/lifecycle.md, "Corrections propagate")."""

import json

import dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
from pydantic import Field

from etr_assets.defs.common import IN_FLIGHT, daily_partitions, table_key
from etr_assets.defs.dagster_private import materialization_of
from etr_assets.pipeline.layers import DERIVED_SPECS, LAYERS, UP_TO_DATE
from etr_assets.pipeline.propagation import DERIVED, INPUTS, out_of_date
from etr_assets.settings import Settings

PROPAGATION_TAG = "etr/propagates"  # on each run it launches: the range and the tables it re-derives
FLAG_JOB, REDERIVE_JOB = "flag_out_of_date", "rederive_gold"
RETRY_OF = "etr/flags_again_after"  # on a flag run that records the flags of a failed one again


def built_orders(instance: dg.DagsterInstance) -> dict[str, dict[str, int]]:
    """Per judged or input table, the storage id of each day's latest materialization: one query per table."""
    latest_by_partition = instance.get_latest_storage_id_by_partition
    return {
        layer: dict(latest_by_partition(table_key(LAYERS[layer].spec), dg.DagsterEventType.ASSET_MATERIALIZATION))
        for layer in (*INPUTS, *DERIVED)
    }


class FlagConfig(dg.Config):
    flags: list[list[str]] = Field(description="[table layer, day, why it is out of date] of each day to mark")


@dg.op(name="flag_days")
def flag_days(context: dg.OpExecutionContext, config: FlagConfig) -> None:
    """A failed (WARN) `up_to_date` for each day, on that day's latest materialization. Recorded by a run: Dagster
    stores one evaluation per check, partition and run, so a sensor's (runless) second flag of a day would collide."""
    for layer, day, why in config.flags:
        key = table_key(LAYERS[layer].spec)
        evaluation = dg.AssetCheckEvaluation(
            asset_key=key,
            check_name=UP_TO_DATE,
            passed=False,
            severity=dg.AssetCheckSeverity.WARN,
            partition=day,
            description=f"out of date: {why}",
            metadata={"reason": why},
            target_materialization_data=materialization_of(context.instance, key, day),
        )
        context.log_event(evaluation)
    context.log.info(f"marked {len(config.flags)} gold day(s) out of date")


@dg.job(name=FLAG_JOB, description="Marks gold days out of date on their up_to_date check (propagate_corrections).")
def flag_out_of_date():
    flag_days()


def build_propagation_sensor(settings: Settings) -> tuple[dg.SensorDefinition, list]:
    """The sensor and the two jobs it launches."""
    rederive = dg.define_asset_job(
        name=REDERIVE_JOB,
        selection=dg.AssetSelection.assets(*(table_key(spec) for spec in DERIVED_SPECS)),
        partitions_def=daily_partitions(settings),
        description="Re-derives out-of-date gold days (propagate_corrections): a range of days as one run.",
    )

    @dg.sensor(
        name="propagate_corrections",
        jobs=[flag_out_of_date, rederive],
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=(
            "Finds gold days built before a day they derive from changed (a corrected silver day, a customer history "
            "given a late day, a day rebuilt after the days built on it), marks each day's up_to_date check as "
            f"failing with the reason ({FLAG_JOB}), and re-derives them ({REDERIVE_JOB}): one run per range of "
            "days, from the first out-of-date day to the newest built one for tables carried forward."
        ),
    )
    def propagate_corrections(context: dg.SensorEvaluationContext):
        # A re-derivation under way rewrites the gold days one table after another: judged midway, the days of the
        # tables it has yet to write would look out of date again. The lake is judged once it has ended.
        if running := context.instance.get_runs(dg.RunsFilter(job_name=REDERIVE_JOB, statuses=IN_FLIGHT), limit=1):
            run, what = running[0], running[0].tags.get(PROPAGATION_TAG, "")
            return dg.SkipReason(f"{REDERIVE_JOB} run {run.run_id[:8]} ({what}) is under way: judged once it ends")
        built = built_orders(context.instance)
        stale = out_of_date(built)
        state = json.loads(context.cursor or "{}")
        state = {"flagged": state} if isinstance(state, list) else state  # an earlier version's cursor: the flags
        already, retried = set(state.get("flagged", [])), list(state.get("retried", []))
        # A flag run that failed flagged nothing: its days are flagged again, once (a failed retry stays failed).
        ended_badly = dg.RunsFilter(job_name=FLAG_JOB, statuses=[dg.DagsterRunStatus.FAILURE])
        failed = context.instance.get_runs(ended_badly, limit=10)
        failed = [r for r in failed if r.run_id not in retried and RETRY_OF not in r.tags]
        for run in failed:
            already -= {f"{t}@{d}" for t, d, _ in run.run_config["ops"]["flag_days"]["config"]["flags"]}
        retried = (retried + [r.run_id for r in failed])[-50:]
        flagged = {f"{layer}@{day}" for layer, days in stale.days.items() for day in days}
        new = [[t, d, why] for t, days in stale.days.items() for d, why in days.items() if f"{t}@{d}" not in already]
        # One run per state of the lake: a later tick with nothing new built asks for nothing new.
        latest = max((order for days in built.values() for order in days.values()), default=0)
        requests = []
        if new:
            run_config = {"ops": {"flag_days": {"config": {"flags": new}}}}
            retry = {RETRY_OF: failed[0].run_id} if failed else {}
            key = f"flags@{latest}" + (f"/after-{failed[0].run_id}" if failed else "")
            requests.append(dg.RunRequest(job_name=FLAG_JOB, run_key=key, run_config=run_config, tags=retry))
        for tables, first, last in stale.runs(built):
            names = ", ".join(tables)
            tags = {PROPAGATION_TAG: f"{names} {first}...{last}"}
            if first != last:
                tags |= {ASSET_PARTITION_RANGE_START_TAG: first, ASSET_PARTITION_RANGE_END_TAG: last}
            request = dg.RunRequest(
                job_name=REDERIVE_JOB,
                run_key=f"{names}:{first}...{last}@{latest}",
                asset_selection=[table_key(LAYERS[t].spec) for t in tables],
                partition_key=first if first == last else None,
                tags=tags,
            )
            requests.append(request)
        cursor = json.dumps({"flagged": sorted(flagged), "retried": retried})
        if not requests:
            return dg.SensorResult(skip_reason="no gold day is out of date", cursor=cursor)
        context.log.info(
            "out of date: "
            + "; ".join(f"{t} {min(d)}...{max(d)} ({len(d)} day(s))" for t, d in stale.days.items() if d)
        )
        return dg.SensorResult(run_requests=requests, cursor=cursor)

    return propagate_corrections, [flag_out_of_date, rederive]
