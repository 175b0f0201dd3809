"""bench/propagation.py at a tiny size: the days a correction flags, and the rules' time."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # whole-pipeline runs: CI and ./dev test, not the fast tier


def test_propagation_flags_the_days_built_on_a_correction():
    from bench import propagation

    view = propagation.main(days=12, rounds=1)
    assert view["days_flagged"] == 1 + 12 + 12 and view["median_rules_seconds"] >= 0
