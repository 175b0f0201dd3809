"""Dagster's private API, used only here: what Dagster 1.13 offers no public way to do. A Dagster upgrade that
moves or changes any of it fails `etr_assets_tests/defs/test_check_partitions.py` or `test_run_summary.py`."""

import dagster as dg
from dagster._core.definitions.asset_checks.asset_check_evaluation import AssetCheckEvaluationTargetMaterializationData
from dagster._core.execution.plan.objects import ErrorSource

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
