"""A Spark job that ran out of memory or disk, told in one line that names what to raise (docs/production.md).
An OutOfMemoryError may reach Python as a refused connection (the JVM exited 52), so the whole exception chain and
the exit code are read; a full disk Java names no file of is found among the folders the run writes to."""

from __future__ import annotations

import errno
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlparse

from etr_assets.errors import ResourceExhausted

# Java's heap (GC overhead, ...), or Spark's own when a task cannot get execution memory.
OUT_OF_MEMORY = re.compile(r"(?:java\.lang\.|org\.apache\.spark\.memory\.Spark)OutOfMemoryError(?::[^\n]*)?")
NO_SPACE = re.compile(r"(?:[\w.$]+(?:Exception|Error): )?No space left on device")
NAMED_PATH = re.compile(r"(/[^\s:()]+) \(No space left on device\)")  # Java names the file it could not open
WAREHOUSE_KEY = re.compile(r"spark\.sql\.catalog\.[^.]+\.warehouse")
SCRATCH = "Spark's scratch folder"
JVM_OUT_OF_MEMORY_EXIT = 52  # SparkExitCode.OOM: how an executor's JVM (the driver's, in local mode) ends on one
JVM_EXIT_WAIT_SECONDS = 5.0  # a JVM that hung up on Python may still be running its shutdown hooks


def exhaustion(
    failure: BaseException,
    doing: str,
    spark_conf: dict[str, str],
    jvm_exit_code: Callable[[], int | None] | None = None,
    folders: dict[str, str] | None = None,
) -> ResourceExhausted | None:
    """`failure` as one line if it is the JVM (or Python) running out of memory or disk while `doing`, naming the
    setting from `spark_conf` or the full disk's folder; None otherwise (`jvm_exit_code`: asked if the JVM hung up)."""
    texts = list(_texts(failure))
    memory = next((m.group(0).strip() for text in texts if (m := OUT_OF_MEMORY.search(text))), None)
    if memory is None and any(_is_hang_up(text) for text in texts):
        if (code := (jvm_exit_code or spark_jvm_exit_code)()) == JVM_OUT_OF_MEMORY_EXIT:
            memory = f"java.lang.OutOfMemoryError: the JVM exited with code {code}"
    if memory is not None:
        heap = spark_conf.get("spark.driver.memory", "Spark's default 1g")
        return ResourceExhausted(
            f"the Spark driver ran out of memory ({memory}) while {doing}: raise ETR_SPARK_DRIVER_MEMORY (now {heap})"
        )
    # A Python write that found its disk full, else Java's words for it.
    if full := [e for e in _chain(failure) if isinstance(e, OSError) and e.errno == errno.ENOSPC]:
        disk = f"{type(full[0]).__name__}: [Errno {full[0].errno}] {full[0].strerror or os.strerror(full[0].errno)}"
    else:
        disk = next((m.group(0) for text in texts if (m := NO_SPACE.search(text))), None)
    if disk is not None:
        named = next((os.fsdecode(e.filename) for e in full if e.filename), None)
        named = named or next((m.group(1) for text in texts if (m := NAMED_PATH.search(text))), None)
        return ResourceExhausted(
            f"a disk ran out of space ({disk}) while {doing}: {_where(named, lake_folders(spark_conf, folders))}"
        )
    return None


def lake_folders(spark_conf: dict[str, str], extra: dict[str, str] | None = None) -> dict[str, str]:
    """The local folders a run writes to, each with what it holds: Spark's scratch, every local Iceberg warehouse,
    and `extra` (the raw zone's root). Object-store locations (s3://) are left out: they do not fill."""
    folders = {d: f"{SCRATCH}, spark.local.dir" for d in spark_conf.get("spark.local.dir", "").split(",")}
    for key, value in spark_conf.items():
        if WAREHOUSE_KEY.fullmatch(key):
            folders[value] = "the Iceberg warehouse"
    local = {}
    for location, what in (folders | (extra or {})).items():
        parsed = urlparse(location)
        if parsed.scheme in ("", "file") and (parsed.path or "").startswith("/"):
            local[parsed.path.rstrip("/") or "/"] = what
    return local


def _where(named: str | None, folders: dict[str, str]) -> str:
    """Which disk filled, and what to do. With no path in the error, the disk with the least space left of those the
    run writes to: a write that failed for space leaves its disk full. Every folder of the run on it is named."""
    if named:  # what the folder holding it holds ("the raw zone"), or nothing for a path outside them
        places = {named: next((w for f, w in folders.items() if named == f or named.startswith(f"{f}/")), "")}
    else:
        places = folders
    label = lambda path: f"{path} ({places[path]})" if places.get(path) else path
    disks = {path: space for path in places if (space := _space(path))}
    todo = "or point ETR_HOME at a larger disk, then run it again"
    if not disks:
        return f"free space on the disk of {label(next(iter(places), SCRATCH))}, {todo}"
    device, free, total = min(disks.values(), key=lambda space: space[1])
    on_it = [label(path) for path, space in sorted(disks.items()) if space[0] == device]
    listed = on_it[0] if len(on_it) == 1 else f"{', '.join(on_it[:-1])} and {on_it[-1]}"
    return f"the disk of {listed} has {human_size(free)} free of {human_size(total)}: free space there, {todo}"


def _space(path: str) -> tuple[int, int, int] | None:
    """(device, bytes free, bytes in all) of the disk of `path` or its nearest existing parent; None if unknown."""
    for folder in (path, *map(str, Path(path).parents)):
        try:
            stat, device = os.statvfs(folder), os.stat(folder).st_dev
        except OSError:
            continue
        return device, stat.f_bavail * stat.f_frsize, stat.f_blocks * stat.f_frsize
    return None


def human_size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    value, units = size / 1024, ["KiB", "MiB", "GiB", "TiB"]
    while value >= 1024 and len(units) > 1:
        value, units = value / 1024, units[1:]
    return f"{value:.1f} {units[0]}"


def _chain(failure: BaseException) -> Iterator[BaseException]:
    """`failure` and every exception it was raised from or while handling."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [failure]
    while pending:
        if (current := pending.pop()) is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        pending += [current.__cause__, current.__context__]


def _texts(failure: BaseException) -> Iterator[str]:
    """The text of `failure` and of every exception it was raised from or while handling, Java's stack included."""
    for current in _chain(failure):
        yield type(current).__name__
        try:
            yield str(current)  # a Py4JJavaError asks the JVM for its stack trace here
        except Exception:  # the JVM is gone: what py4j kept without it
            yield str(getattr(current, "errmsg", "") or "")


def _is_hang_up(text: str) -> bool:
    """A py4j call that found no JVM behind the gateway (refused, reset, or an answer cut off), or whose job the
    JVM's shutdown cancelled (an OutOfMemoryError in a task exits the JVM, which stops the SparkContext first)."""
    return text in ("ConnectionRefusedError", "ConnectionResetError", "Py4JNetworkError", "Py4JError") or (
        "Answer from Java side is empty" in text
        or "Error while sending or receiving" in text
        or "because SparkContext was shut down" in text
    )


def spark_jvm_exit_code() -> int | None:
    """How this process's Spark JVM ended (None: still running, or no JVM was started here)."""
    try:
        from pyspark import SparkContext
    except ImportError:
        return None
    if (process := getattr(SparkContext._gateway, "proc", None)) is None:
        return None
    try:
        return process.wait(timeout=JVM_EXIT_WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        return None
