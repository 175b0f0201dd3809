"""How long the out-of-date view of the gold days takes to compute: `python -m bench.propagation [DAYS] [ROUNDS]`
(default 400 days, 5 rounds).

A Dagster instance on SQLite (as `dagster dev` keeps one) holds DAYS daily partitions of silver, the customer history
and the three gold tables, recorded as materializations in the order a daily run builds them; then silver's first
day is corrected. Times, per round: the `propagate_corrections` sensor's whole evaluation (the five storage-id queries,
the rules, every flag's check evaluation with its target materialization, the run requests), and the rules alone.
Prints JSON with every figure, the medians and the load average at start and end."""

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
    from etr_assets.defs.propagation import build_propagation_sensor, built_orders
    from etr_assets.pipeline.layers import LAYERS
    from etr_assets.pipeline.propagation import ACTIVITY, HISTORY, PROFILES, SILVER, SUMMARY, out_of_date

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
        sensor, sensor_s, rules_s, flagged = build_propagation_sensor(), [], [], 0
        for _ in range(rounds):
            began = time.perf_counter()
            result = sensor(dg.build_sensor_context(instance=i))
            sensor_s.append(time.perf_counter() - began)
            flagged = len(result.asset_events)
            built = built_orders(i)
            began = time.perf_counter()
            out_of_date(built)
            rules_s.append(time.perf_counter() - began)
    return {
        "days": days,
        "events_recorded": days * 5 + 1,
        "seconds_to_record_them": round(recorded, 1),
        "days_flagged": flagged,
        "sensor_seconds": [round(s, 3) for s in sensor_s],
        "rules_seconds": [round(s, 4) for s in rules_s],
        "median_sensor_seconds": round(statistics.median(sensor_s), 3),
        "median_rules_seconds": round(statistics.median(rules_s), 4),
        "load_average": {"start": start.get("load_average"), "end": machine().get("load_average")},
    }


if __name__ == "__main__":
    print(json.dumps(main(*(int(a) for a in sys.argv[1:])), indent=2))
