"""A real Spark standalone cluster on loopback: one master and one small worker, from the pyspark wheel.

A plain context manager (like `infra.py`'s servers): it starts both JVMs with the wheel's `bin/spark-class`
(docs/stack.md), waits until the master lists the worker as ALIVE, yields the master URL, and stops exactly the two
processes it started, by pid, even when the test fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from etr_assets_tests.infra import free_port
from etr_assets_tests.quick_jvm import JIT_AND_GC

START_TIMEOUT_S = 120


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    # spark-class ends in `exec java ...`: the pid we get is the JVM's, so stopping it stops the daemon.
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _alive_workers(ui_port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as response:
        state = json.load(response)
    return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextlib.contextmanager
def standalone_cluster(work_dir: Path, worker_cores: int = 1, worker_memory: str = "1g") -> Iterator[str]:
    """Yields `spark://127.0.0.1:<port>` once one worker with `worker_cores` cores has registered."""
    work_dir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    env |= {
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(work_dir),
        "SPARK_DAEMON_MEMORY": "256m",
        # The master, the worker and the executors it starts (they inherit its environment) compile with C1 only
        # and the serial GC, as the suite's other JVMs (quick_jvm.py): SPARK_SUBMIT_OPTS reaches only drivers.
        "JAVA_TOOL_OPTIONS": JIT_AND_GC,
    }
    port, ui_port = free_port(), free_port()
    master_url = f"spark://127.0.0.1:{port}"
    started: list[subprocess.Popen] = []
    try:
        started.append(
            _start(
                [
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--webui-port",
                    str(ui_port),
                ],
                work_dir / "master.log",
                env,
            )
        )
        started.append(
            _start(
                [
                    "org.apache.spark.deploy.worker.Worker",
                    master_url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    str(worker_cores),
                    "--memory",
                    worker_memory,
                    "--work-dir",
                    str(work_dir / "work"),
                    "--webui-port",
                    str(free_port()),
                ],
                work_dir / "worker.log",
                env,
            )
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            for proc, name in zip(started, ("master", "worker")):
                if proc.poll() is not None:
                    log = (work_dir / f"{name}.log").read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"the Spark {name} exited with {proc.returncode}:\n{log}")
            with contextlib.suppress(OSError, ValueError):
                if _alive_workers(ui_port) >= 1:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"no Spark worker registered with {master_url} within {START_TIMEOUT_S} s")
            time.sleep(0.5)
        yield master_url
    finally:
        for proc in reversed(started):
            _stop(proc)
