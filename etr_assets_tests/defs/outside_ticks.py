"""A tick of the `commits_outside_dagster` sensor as the daemon runs it: the sensor, then the run it asks for."""

from __future__ import annotations

import dataclasses

import dagster as dg


@dataclasses.dataclass(frozen=True)
class OutsideTick:
    result: dg.SensorResult
    evaluations: list[dg.AssetCheckEvaluation]  # of the run the tick launched (none when it skipped)

    @property
    def cursor(self) -> str | None:
        return self.result.cursor

    def failed(self) -> dict[str, dg.AssetCheckEvaluation]:
        return {e.asset_key.to_user_string(): e for e in self.evaluations if not e.passed}


def outside_tick(pipeline: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None = None) -> OutsideTick:
    sensor = pipeline.resolve_sensor_def("commits_outside_dagster")
    result = sensor(dg.build_sensor_context(instance=instance, cursor=cursor, definitions=pipeline))
    evaluations = []
    for request in result.run_requests:  # the job the sensor targets, its checks subset as the daemon subsets it
        assert not request.asset_selection and request.asset_check_keys, request
        job = pipeline.resolve_job_def(sensor.job_name)
        subset = job.get_subset(asset_selection=set(), asset_check_selection=set(request.asset_check_keys))
        run = subset.execute_in_process(instance=instance, tags=request.tags)
        assert run.success
        evaluations += run.get_asset_check_evaluations()
    return OutsideTick(result, evaluations)
