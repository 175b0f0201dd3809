"""JVM and Spark options for the suite's many short-lived JVMs, set once in SPARK_SUBMIT_OPTS by conftest.

spark-submit adds SPARK_SUBMIT_OPTS to the driver's command line (silently), so they reach every JVM the suite starts:
this process's, and its subprocesses' (Dagster runs, `etr sql`, the Glue stand-in) through the inherited environment.
The suite is thousands of short Spark jobs over tables of a few hundred rows, on two cores:

- C1 only and the serial collector: C2 compiler threads and parallel GC threads compete with the work for the same
  cores (C1-only took 0.54x the CPU time of the defaults on test_transactions, on one core). The test processes'
  own long-lived JVMs stay C1-only too: with C2 they ran four in-process pipeline days faster alone (17.5 s against
  24.5 s for the fourth day), but in the suite (two workers on two cores) the files they start with got slower
  (pipeline/test_transactions.py 93 s -> 127-143 s) and the whole run gained nothing.
- A code cache of 256 MB: C1 alone gets 48 MB by default (240 MB with C2), and a Spark + Iceberg session fills that
  within three pipeline days; from then on the JVM flushes compiled methods and compiles them again, all the time.
  With room for them, three pipeline days took 53 s of JVM CPU instead of 60 s (idle machine, several runs each).
- No code generation (`spark.sql.codegen.*` as system properties, which SparkConf reads): compiling a plan with Janino
  costs more than interpreting it over a few hundred rows (lake/test_scd2.py + test_incremental.py: 136 s -> 96 s).
- Adaptive query execution stays on in every JVM: a job the suite starts with Spark's default 200 shuffle partitions
  (a standalone cluster's; the Glue stand-in's did too) needs it to coalesce them (turned off JVM-wide,
  aws/test_glue_pipes.py took 120 s instead of 74 s alone; its stand-in now runs at one partition: 53 s). Only the
  test processes' own sessions, at one shuffle partition, turn it off.
- A class-data-sharing archive of the classes a Spark + Iceberg session loads, made once per JDK and jar set (about
  15 s, kept in the venv): a session then starts in 3.6 s instead of 6.6 s (idle machine), and the suite starts
  about fifty JVMs. A JVM that cannot use the archive runs without it; `-Xlog:cds*=off` keeps its warning off
  stdout (`etr sql --json` prints there).

Long-running jobs (benchmarks, production) keep the JVM's and Spark's defaults.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

JIT_AND_GC = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=256m"
NO_CODEGEN = "-Dspark.sql.codegen.wholeStage=false -Dspark.sql.codegen.factoryMode=NO_CODEGEN"
ARCHIVES = Path(sys.prefix) / "etr-test-cds"  # inside the venv: made per machine, never committed

# What the archive is made from: a session that creates, writes, merges and reads an Iceberg table.
WARM_UP = """
import sys
from etr_assets.lake.session import get_spark
from etr_assets.settings import Settings

spark = get_spark(Settings(home=sys.argv[1], catalog="warm", shuffle_partitions=1, driver_memory="1g"))
spark.sql("CREATE TABLE warm.db.t (id BIGINT, v STRING, d DATE) USING iceberg PARTITIONED BY (d)")
spark.sql("INSERT INTO warm.db.t VALUES (1, 'a', DATE'2025-01-01'), (2, 'b', DATE'2025-01-02')")
spark.sql("MERGE INTO warm.db.t t USING (SELECT 1 AS id, 'c' AS v, DATE'2025-01-01' AS d) s ON t.id = s.id "
          "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
spark.sql("SELECT d, count(*), max(v) FROM warm.db.t GROUP BY d ORDER BY d").collect()
spark.sql("SELECT * FROM warm.db.t.snapshots").collect()
spark.stop()
"""


def _archive_key() -> str:
    import pyspark

    from etr_assets.lake.session import iceberg_runtime_jar, local_fs_jar

    java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60).stderr
    jars = sorted(p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    text = "\n".join([java, *jars, iceberg_runtime_jar(), str(local_fs_jar()), JIT_AND_GC, NO_CODEGEN])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def class_archive(scratch: Path) -> Path | None:
    """The suite's class-data-sharing archive, made now if this JDK and jar set have none; None if it cannot be."""
    try:
        archive = ARCHIVES / f"spark-{_archive_key()}.jsa"
        if archive.exists():
            return archive
        ARCHIVES.mkdir(exist_ok=True)
        for stale in ARCHIVES.glob("*.jsa"):
            stale.unlink()
        env = os.environ | {"SPARK_SUBMIT_OPTS": f"{JIT_AND_GC} {NO_CODEGEN} -XX:ArchiveClassesAtExit={archive}"}
        subprocess.run(
            [sys.executable, "-c", WARM_UP, str(scratch)], env=env, capture_output=True, check=True, timeout=300
        )
        return archive if archive.exists() else None
    except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
        print(f"no class-data-sharing archive for the suite's JVMs ({exc}); they start without one", file=sys.stderr)
        return None


def suite_options(scratch: Path) -> str:
    archive = class_archive(scratch)
    sharing = f" -XX:SharedArchiveFile={archive} -Xlog:cds*=off" if archive else ""
    return f"{JIT_AND_GC} {NO_CODEGEN}{sharing}"


if __name__ == "__main__":  # ./dev setup --tests (and ./dev test) make the archive before the suite starts
    import tempfile

    if not (ARCHIVES / f"spark-{_archive_key()}.jsa").exists():
        print("==> making the class-data-sharing archive of the suite's JVMs (once per JDK and jars)", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="etr-cds-") as scratch:
        sys.exit(0 if class_archive(Path(scratch)) else 1)
