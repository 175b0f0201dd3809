"""Re-running operations that lose an Iceberg commit race. Iceberg retries a losing append or overwrite itself; a
MERGE, UPDATE or DELETE whose files changed underneath it fails validation, which only re-running resolves."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from etr_assets.errors import CommitConflictError

T = TypeVar("T")

# Class names (or message fragments) of Iceberg's commit conflicts, as they surface through py4j.
CONFLICT_MARKERS = (
    "org.apache.iceberg.exceptions.CommitFailedException",
    "Found conflicting files",
    "Found new conflicting delete files",
    "Cannot commit, found new",
    "Missing required files to delete",  # a compaction whose input files a concurrent overwrite replaced
    "could not be found in the latest snapshot",  # a manifest rewrite whose manifests a concurrent commit merged
    "Requirement failed: branch main has changed",
    "Cannot fast-forward: main is not an ancestor",  # main moved while a branch was written (scd2)
)


def _error_text(error: BaseException) -> str:
    """The error with its Java exception, if any (py4j's own message only says which call failed)."""
    text = f"{type(error).__name__}: {error}"
    if (java := getattr(error, "java_exception", None)) is not None:
        text = f"{java.toString()} ({text.splitlines()[0]})"
    return text


def is_commit_conflict(error: BaseException) -> bool:
    return any(marker in _error_text(error) for marker in CONFLICT_MARKERS)


def run_with_retries(
    operation: Callable[[], T],
    what: str,
    attempts: int = 5,
    base_delay: float = 0.5,
    max_delay: float = 15.0,
    on_retry: Callable[[int, BaseException], None] | None = None,
) -> T:
    """Run `operation` (which must re-read its inputs each time); retry only commit conflicts."""
    for attempt in range(1, attempts + 1):
        try:
            return operation()
        except Exception as error:
            if not is_commit_conflict(error):
                raise
            if attempt == attempts:
                raise CommitConflictError(
                    f"{what}: lost to concurrent writers {attempts} times; last conflict: "
                    f"{_error_text(error).splitlines()[0][:300]}"
                ) from error
            if on_retry:
                on_retry(attempt, error)
            time.sleep(random.uniform(0, min(max_delay, base_delay * 2 ** (attempt - 1))))
    raise AssertionError("unreachable")
