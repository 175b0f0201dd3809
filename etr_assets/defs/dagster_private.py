"""Dagster's private API, used only here: what Dagster 1.13 offers no public way to do. A Dagster upgrade that
moves or changes any of it fails `etr_assets_tests/defs/test_check_partitions.py`, `test_run_summary.py` or
`test_cli_run.py`."""

from collections.abc import Mapping

import dagster as dg
from dagster._core.definitions.asset_checks.asset_check_evaluation import AssetCheckEvaluationTargetMaterializationData
from dagster._core.execution.plan.objects import ErrorSource, StepFailureData, UserFailureData

USER_CODE_ERROR = ErrorSource.USER_CODE_ERROR  # a step failure Dagster wrapped around the code's own error


def materialization_of(instance: dg.DagsterInstance, key: dg.AssetKey, day: str):
    """The day's materialization, as a check evaluation of that day names it. Dagster links only a one-day run's
    results; without the link the UI drops a range run's check status of the day as out of date."""
    found = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[day]), limit=1
    ).records
    if not found:
        return None
    return AssetCheckEvaluationTargetMaterializationData(
        storage_id=found[0].storage_id, run_id=found[0].event_log_entry.run_id, timestamp=found[0].timestamp
    )


def spark_started(lazy) -> bool:
    """Whether a `LazyPySparkResource` has made its session (dagster-pyspark keeps it private)."""
    return lazy._spark_session is not None


def refused_step(plan_context, execution_plan, reason: str, metadata: Mapping[str, object]) -> dg.DagsterEvent:
    """The run's first step failed with `reason` as its message, without running (logged as it is made, as an
    executor logs a step it could not run): no error, so no stack trace, only the `dg.Failure` data its code would
    have raised. A `Failure` raised in the step is logged with Dagster's stack twice (the step's failure, the
    run's); one raised by the executor, with the stack, as the run's exception."""
    step = execution_plan.get_steps_to_execute_in_topo_order()[0]
    failure = UserFailureData(label="intentional-failure", description=reason, metadata=metadata)
    data = StepFailureData(error=None, user_failure_data=failure)
    return dg.DagsterEvent.step_failure_event(plan_context.for_step(step), data, message=reason)
