"""Dagster's private API, used only here: what Dagster 1.13 offers no public way to do. A Dagster upgrade that
moves or changes any of it fails `etr_assets_tests/defs/test_check_partitions.py`, `defs/test_run_guard.py`,
`test_run_summary.py` or `test_cli_run.py`."""

from collections.abc import Mapping

import dagster as dg
from dagster._core.definitions.asset_checks.asset_check_evaluation import AssetCheckEvaluationTargetMaterializationData
from dagster._core.definitions.run_request import DagsterRunReaction
from dagster._core.events import EngineEventData
from dagster._core.execution.plan.objects import ErrorSource, StepFailureData, UserFailureData

USER_CODE_ERROR = ErrorSource.USER_CODE_ERROR  # a step failure Dagster wrapped around the code's own error


def materialization_of(instance: dg.DagsterInstance, key: dg.AssetKey, day: str):
    """The day's materialization, as a check evaluation of that day names it. Dagster links only a one-day run's
    results; without the link the UI drops a range run's check status of the day as out of date."""
    of_day = dg.AssetRecordsFilter(asset_key=key, asset_partitions=[day])
    if not (found := instance.fetch_materializations(of_day, limit=1).records):
        return None
    return AssetCheckEvaluationTargetMaterializationData(
        storage_id=found[0].storage_id, run_id=found[0].event_log_entry.run_id, timestamp=found[0].timestamp
    )


def spark_started(lazy) -> bool:
    """Whether a `LazyPySparkResource` has made its session (dagster-pyspark keeps it private)."""
    return lazy._spark_session is not None


def refused_step(plan_context, execution_plan, reason: str, metadata: Mapping[str, object]) -> dg.DagsterEvent:
    """The run's first step failed with `reason`, without running and without a stack trace (a `Failure` raised in
    the step logs Dagster's stack twice; one raised by the executor, as the run's exception)."""
    step = execution_plan.get_steps_to_execute_in_topo_order()[0]
    failure = UserFailureData(label="intentional-failure", description=reason, metadata=metadata)
    data = StepFailureData(error=None, user_failure_data=failure)
    return dg.DagsterEvent.step_failure_event(plan_context.for_step(step), data, message=reason)


def report_engine_event(instance: dg.DagsterInstance, run: dg.DagsterRun, message: str, metadata: Mapping[str, str]):
    """An engine event in the run's log, with metadata a reader finds it by (`DagsterInstance.report_engine_event`
    is public; its `EngineEventData` is not)."""
    instance.report_engine_event(message, run, EngineEventData(metadata=dict(metadata)))


def run_reaction(run: dg.DagsterRun) -> DagsterRunReaction:
    """What a sensor returns for a run it acted on: the daemon records a tick without run requests as SKIPPED unless
    it returns reactions, which also name the run and log the sensor's action in it (`_evaluate_sensor`). Public
    only through `@run_status_sensor`, which watches run events, not processes."""
    return DagsterRunReaction(dagster_run=run, run_status=run.status)
