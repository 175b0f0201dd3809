"""Actions run side by side: at once, every one to its end, the first failure raised afterwards."""

from __future__ import annotations

import threading

import pytest

from etr_assets.lake.side_by_side import run_side_by_side


def test_the_actions_run_at_once():
    meeting = threading.Barrier(3, timeout=30)  # passed only when all three wait at the same time
    met = []
    run_side_by_side([lambda: met.append(meeting.wait()) for _ in range(3)])
    assert sorted(met) == [0, 1, 2]


def test_every_action_ends_before_the_first_failure_is_raised():
    finished = threading.Event()

    def slow():
        finished.wait(0.2)
        finished.set()

    def failing():
        raise ValueError("bad batch")

    with pytest.raises(ValueError, match="bad batch"):
        run_side_by_side([failing, slow])
    assert finished.is_set()
