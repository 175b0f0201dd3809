"""Silver's layout against the alternatives, side by side in one process: `python -m bench.silver_layout [DAYS]
[PER_DAY] [REPEATS]` (default 3 days of 1,000,000 rows, best of 3).

The same rows (bench/data.py's) are written as plain Parquet (one file a day, sorted by customer) and as one table
per layout, each the silver spec with its write order and row-group size replaced. Then, in rounds, each layout is
timed on one day's PENDING update, the delete of the median customer, the scattered 1% update, a full scan and the
daily write (`replace_days` of one day), every change rolled back after it; the Parquet rewrite of the PENDING day and
of the customer's days in the same rounds. The layouts take turns going first, and the first round is untimed: a
warm JVM favours whoever runs later. Prints JSON with the load: seconds (best of REPEATS) and the ratios the
formats benchmark judges (Parquet rewrite / Iceberg).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import sys

from bench import data
from bench.common import open_lake, ratio, run_scan
from bench.formats import SPEC_MODE, UPDATE_1PCT, _iceberg_table, _parquet, iceberg_dml, parquet_rewrite
from etr_assets.lake.specs import MIB, ROW_GROUP_SIZE
from etr_assets.lake.writes import replace_days
from etr_assets.tables.transactions import SILVER_TRANSACTIONS

BY_CUSTOMER = ("transaction_date", "customer_id")
ICEBERG_ROW_GROUP = str(128 * MIB)  # Iceberg's default
LAYOUTS = {  # name -> (write order, row-group bytes); None: the spec's
    "the spec's": (None, None),
    "by customer, 128 MiB row groups (silver before)": (BY_CUSTOMER, ICEBERG_ROW_GROUP),
    "by customer, 8 MiB row groups": (BY_CUSTOMER, str(8 * MIB)),
}


def build(lake, rows, name: str, number: int) -> str:
    order, row_group = LAYOUTS[name]
    changes = {"name": f"layout_{number}", **({"write_order": order} if order else {})}
    spec = dataclasses.replace(SILVER_TRANSACTIONS, **changes)
    return _iceberg_table(lake, spec, rows, {ROW_GROUP_SIZE: row_group} if row_group else None).qualified(lake.catalog)


def _layout(spark, table: str) -> dict[str, str | None]:
    """The write order and row-group size as the table itself has them."""
    properties = dict(spark.sql(f"SHOW TBLPROPERTIES {table}").collect())
    return {key: properties.get(key) for key in ("sort-order", ROW_GROUP_SIZE)}


def main(days: int = 3, per_day: int = 1_000_000, repeats: int = 3) -> dict:
    size = data.sizes(0, days=days, per_day=per_day)
    with open_lake("silver_layout") as lake:
        spark = lake.spark
        rows = data.transactions(spark, size["rows"], size["days"], size["customers"]).cache()
        rows.count()
        day = str(data.FIRST_DAY + dt.timedelta(days=days // 2))
        counts = (
            rows.where(f"transaction_date = DATE'{day}'").groupBy("customer_id").count().orderBy("count", "customer_id")
        )
        customers = counts.collect()
        customer = customers[len(customers) // 2][0]
        parquet = _parquet(lake, rows, "parquet")
        tables = {name: build(lake, rows, name, n) for n, name in enumerate(LAYOUTS)}
        pending = f"transaction_date = DATE'{day}' AND status = 'PENDING'"
        one_day = rows.where(f"transaction_date = DATE'{day}'").localCheckpoint()
        one_day.count()
        rows.unpersist()
        statements = {
            "one day's PENDING update": f"UPDATE {{t}} SET status = 'PROCESSED' WHERE {pending}",
            "delete one customer": f"DELETE FROM {{t}} WHERE customer_id = {customer}",
            "scattered 1% update": f"UPDATE {{t}} SET status = 'PROCESSED' WHERE {UPDATE_1PCT}",
            "daily write (replace_days)": lambda t: replace_days(
                spark, t, one_day, "transaction_date", [dt.date.fromisoformat(day)]
            ),
        }
        rewrites = {
            "one day's PENDING update": (pending, {"status": "'PROCESSED'"}),
            "delete one customer": (f"customer_id = {customer}", None),
        }
        best: dict[tuple[str, str], float] = {}

        def keep(key: tuple[str, str], seconds: float, timed: bool) -> None:
            if timed:
                best[key] = min(best.get(key, seconds), seconds)

        names = list(LAYOUTS)
        for round_number in range(repeats + 1):  # round 0 warms the JVM up, untimed
            timed = round_number > 0
            for operation, (condition, change) in rewrites.items():
                keep(
                    ("Parquet rewrite", operation),
                    parquet_rewrite(lake, parquet, condition, change, 1)["seconds"],
                    timed,
                )
            shift = round_number % len(names)
            for name in names[shift:] + names[:shift]:
                for operation, statement in statements.items():
                    measured = iceberg_dml(lake, tables[name], statement, SPEC_MODE, 1, scan_after=False)
                    keep((name, operation), measured["seconds"], timed)
                keep((name, "full scan"), run_scan(spark, f"SELECT * FROM {tables[name]}")[0], timed)
        result = {
            "command": "python -m bench.silver_layout " + " ".join(map(str, (days, per_day, repeats))),
            "rows": size["rows"],
            "customer": customer,
            "load_at_end": os.getloadavg(),
            "layouts": {name: _layout(spark, table) for name, table in tables.items()},
            "seconds": {f"{name}: {operation}": round(s, 3) for (name, operation), s in sorted(best.items())},
            "parquet_rewrite_over_iceberg": {
                f"{name}: {operation}": ratio(best[("Parquet rewrite", operation)], best[(name, operation)])
                for name in LAYOUTS
                for operation in rewrites
            },
        }
        return result


if __name__ == "__main__":
    print(f"load at start: {os.getloadavg()}", file=sys.stderr)
    print(json.dumps(main(*map(int, sys.argv[1:])), indent=1))
