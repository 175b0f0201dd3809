"""Maintenance on the `s3` profile (S3A on moto, JDBC catalog on PostgreSQL), in a subprocess of its own for the
reason spark_job.py gives. Makes a table of tiny appends, maintains it, prints ``RESULT {json}``.

    python maintenance_job.py maintain '{"bucket": ..., "endpoint": ..., "jdbc_url": ..., "home": ...}'
"""

from __future__ import annotations

import json
import sys

from etr_assets.lake.specs import Column, HealthThresholds, TableSpec

SPEC = TableSpec(
    "silver",
    "ledger",
    "maintenance on S3",
    (Column("id", "bigint"), Column("day", "date")),
    partition_by=("days(day)",),
    # Two earlier metadata.json kept: from the fourth commit on, each deletes the oldest through the table's FileIO.
    properties={"write.delete.mode": "merge-on-read", "write.metadata.previous-versions-max": "2"},
    health=HealthThresholds(min_mergeable_small_files=2),  # five tiny files must count as worth merging here
)


def main(argv: list[str]) -> int:
    from spark_job import (
        settings_from,  # beside this file: the script runs as a file, like spark_job.py
    )

    from etr_assets.lake.evolve import ensure_table
    from etr_assets.lake.maintenance import maintain_table
    from etr_assets.lake.session import get_spark

    settings = settings_from(json.loads(argv[2]))  # argv[1] is the mode, as spark_job.py's runner passes it
    spark = get_spark(settings)
    ensure_table(spark, settings.catalog, SPEC)
    table = SPEC.qualified(settings.catalog)
    for n in range(5):
        spark.sql(f"INSERT INTO {table} SELECT id, DATE'2025-03-01' FROM range({n * 10}, {n * 10 + 2})")
    spark.sql(f"DELETE FROM {table} WHERE id = 10")
    location = spark.sql(f"SELECT file_path FROM {table}.files LIMIT 1").first()[0]
    result = maintain_table(spark, settings, SPEC, run_id="s3-run")
    ids = sorted(r[0] for r in spark.sql(f"SELECT id FROM {table}").collect())
    log = spark.sql(
        f"SELECT status_before, status_after, data_files_after FROM {settings.catalog}.monitoring.table_maintenance_log"
    ).collect()
    print(
        "RESULT "
        + json.dumps(
            {
                "ids": ids,
                "file_scheme": location.split("://")[0],
                "before": [result.before.status, result.before.data_files, result.before.delete_files],
                "after": [result.after.status, result.after.data_files, result.after.delete_files],
                "orphans_removed": list(result.orphans.removed),
                "log": [list(r) for r in log],
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
