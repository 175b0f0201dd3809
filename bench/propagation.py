"""How long the out-of-date view of the gold days takes to compute: `python -m bench.propagation [DAYS] [ROUNDS]`
(default 400 days, 5 rounds).

A Dagster instance on SQLite (as `dagster dev` keeps one) holds DAYS daily partitions of silver, the customer history
and the three gold tables, recorded as materializations in the order a daily run builds them; then silver's first
day is corrected. Times, per round: the `propagate_corrections` sensor's tick (the five storage-id queries, the
rules, the run requests) and the rules alone; once, the `flag_out_of_date` run that records every flag on its day's
latest materialization (what the UI shows). Prints JSON with every figure, the medians and the load average."""

from __future__ import annotations

import datetime as dt
import json
import statistics
import sys
import tempfile
import time

from bench.common import machine


def main(days: int = 400, rounds: int = 5) -> dict:
    import dagster as dg

    from etr_assets.defs.common import table_key
    from etr_assets.defs.propagation import build_propagation_sensor, built_orders, flag_out_of_date
    from etr_assets.pipeline.layers import LAYERS
    from etr_assets.pipeline.propagation import ACTIVITY, HISTORY, PROFILES, SILVER, SUMMARY, out_of_date
    from etr_assets.settings import Settings

    start = machine()
    on = [(dt.date(2025, 1, 1) + dt.timedelta(days=i)).isoformat() for i in range(days)]
    with tempfile.TemporaryDirectory(prefix="etr-bench-propagation-") as home, dg.instance_for_test(temp_dir=home) as i:
        began = time.perf_counter()
        for day in on:
            for layer in (SILVER, HISTORY, SUMMARY, ACTIVITY, PROFILES):
                key = table_key(LAYERS[layer].spec)
                i.report_runless_asset_event(dg.AssetMaterialization(asset_key=key, partition=day))
        i.report_runless_asset_event(dg.AssetMaterialization(asset_key=table_key(LAYERS[SILVER].spec), partition=on[0]))
        recorded = time.perf_counter() - began
        (sensor, _), sensor_s, rules_s = build_propagation_sensor(Settings()), [], []
        for _ in range(rounds):
            began = time.perf_counter()
            result = sensor(dg.build_sensor_context(instance=i))
            sensor_s.append(time.perf_counter() - began)
            built = built_orders(i)
            began = time.perf_counter()
            out_of_date(built)
            rules_s.append(time.perf_counter() - began)
        [flags] = [r for r in result.run_requests if r.job_name == "flag_out_of_date"]
        flagged = len(flags.run_config["ops"]["flag_days"]["config"]["flags"])
        began = time.perf_counter()
        assert flag_out_of_date.execute_in_process(run_config=flags.run_config, instance=i).success
        flag_run = time.perf_counter() - began
    return {
        "days": days,
        "events_recorded": days * 5 + 1,
        "seconds_to_record_them": round(recorded, 1),
        "days_flagged": flagged,
        "sensor_seconds": [round(s, 3) for s in sensor_s],
        "rules_seconds": [round(s, 4) for s in rules_s],
        "median_sensor_seconds": round(statistics.median(sensor_s), 3),
        "median_rules_seconds": round(statistics.median(rules_s), 4),
        "flag_run_seconds": round(flag_run, 2),
        "load_average": {"start": start.get("load_average"), "end": machine().get("load_average")},
    }


if __name__ == "__main__":
    print(json.dumps(main(*(int(a) for a in sys.argv[1:])), indent=2))
