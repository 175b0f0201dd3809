"""Spark actions run at once from one driver: each in a thread of its own that carries the caller's Spark job group
and local properties (so cancelling the caller's jobs, or counting them, covers these too)."""

from __future__ import annotations

from collections.abc import Callable


def run_side_by_side(actions: list[Callable[[], object]]) -> None:
    """Run the actions at once, the first in this thread and each other in a thread that inherits this one's Spark
    job group and properties; wait for all, then raise the first failure."""
    from pyspark import InheritableThread

    failures = []

    def guarded(action):
        try:
            action()
        except BaseException as error:  # handed to the caller's thread
            failures.append(error)

    threads = [InheritableThread(target=guarded, args=(action,)) for action in actions[1:]]
    for thread in threads:
        thread.start()
    try:
        if actions:
            guarded(actions[0])
    finally:
        for thread in threads:
            thread.join()
    if failures:
        raise failures[0]
