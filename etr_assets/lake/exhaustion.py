"""A Spark job that ran out of memory or disk, told in one line that names what to raise.

Spark reports either as a Java stack trace: a Py4JJavaError, often a task's failure wrapped in a SparkException.
Worse, a task's OutOfMemoryError makes a local JVM exit (with Spark's exit code 52) while Python still waits on it,
so what reaches Python may be a refused connection, or the py4j error of a cleanup call after the first failure.
`exhaustion` reads all of it, the exception, its causes and contexts, and the JVM's exit code, and returns a
`ResourceExhausted` whose message names the setting or folder; None for any other failure. It needs no Dagster and
no live JVM: the settings it names come from the conf the session was made from (`session.spark_conf`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

# java.lang.OutOfMemoryError: Java heap space (GC overhead limit exceeded, ...), or Spark's own when a task cannot
# get execution memory.
OUT_OF_MEMORY = re.compile(r"(?:java\.lang\.|org\.apache\.spark\.memory\.Spark)OutOfMemoryError(?::[^\n]*)?")
NO_SPACE = re.compile(r"(?:[\w.$]+(?:Exception|Error): )?No space left on device")
JVM_OUT_OF_MEMORY_EXIT = 52  # SparkExitCode.OOM: how an executor's JVM (the driver's, in local mode) ends on one
JVM_EXIT_WAIT_SECONDS = 5.0  # a JVM that hung up on Python may still be running its shutdown hooks


class ResourceExhausted(RuntimeError):
    """The Spark driver ran out of heap, or a disk it writes to filled up; one line naming what to raise."""


def exhaustion(
    failure: BaseException,
    doing: str,
    spark_conf: dict[str, str],
    jvm_exit_code: Callable[[], int | None] | None = None,
) -> ResourceExhausted | None:
    """`failure` as one line if it is the JVM running out of memory or disk while `doing` ("building bronze.x for
    2025-01-01"), naming the setting from `spark_conf` (what the session was made with); None otherwise.
    `jvm_exit_code` (default: this process's Spark JVM's) is asked only when the JVM hung up."""
    texts = list(_texts(failure))
    memory = next((m.group(0).strip() for text in texts if (m := OUT_OF_MEMORY.search(text))), None)
    if memory is None and any(_is_hang_up(text) for text in texts):
        code = (jvm_exit_code or spark_jvm_exit_code)()
        if code == JVM_OUT_OF_MEMORY_EXIT:
            memory = f"java.lang.OutOfMemoryError: the JVM exited with code {code}"
    if memory is not None:
        heap = spark_conf.get("spark.driver.memory", "Spark's default 1g")
        return ResourceExhausted(
            f"the Spark driver ran out of memory ({memory}) while {doing}: raise ETR_SPARK_DRIVER_MEMORY (now {heap})"
        )
    disk = next((m.group(0) for text in texts if (m := NO_SPACE.search(text))), None)
    if disk is not None:
        scratch = spark_conf.get("spark.local.dir", "Spark's scratch folder")
        return ResourceExhausted(
            f"a disk ran out of space ({disk}) while {doing}: free space on the disk of {scratch} "
            "(spark.local.dir, under ETR_HOME, as are the local profile's warehouse and raw zone), or point ETR_HOME "
            "at a larger disk"
        )
    return None


def _texts(failure: BaseException) -> Iterator[str]:
    """The text of `failure` and of every exception it was raised from or while handling, Java's stack included."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [failure]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield type(current).__name__
        try:
            yield str(current)  # a Py4JJavaError asks the JVM for its stack trace here
        except Exception:  # the JVM is gone: what py4j kept without it
            yield str(getattr(current, "errmsg", "") or "")
        pending += [current.__cause__, current.__context__]


def _is_hang_up(text: str) -> bool:
    """A py4j call that found no JVM behind the gateway (refused, reset, or an answer cut off)."""
    return text in ("ConnectionRefusedError", "ConnectionResetError", "Py4JNetworkError", "Py4JError") or (
        "Answer from Java side is empty" in text or "Error while sending or receiving" in text
    )


def spark_jvm_exit_code() -> int | None:
    """How this process's Spark JVM ended (None: still running, or no JVM was started here)."""
    import subprocess

    try:
        from pyspark import SparkContext
    except ImportError:
        return None
    process = getattr(SparkContext._gateway, "proc", None)
    if process is None:
        return None
    try:
        return process.wait(timeout=JVM_EXIT_WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        return None
