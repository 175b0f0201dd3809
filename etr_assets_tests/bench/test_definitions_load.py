"""bench/definitions_load.py at a tiny size: the declared source's assets against the shipped ones."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # whole-pipeline runs: CI and ./dev test, not the fast tier


def test_definitions_load_compares_declared_and_shipped_assets():
    from bench import definitions_load

    loads = definitions_load.main(endpoints=4, rounds=1)
    assert loads["assets"]["declared"] > loads["assets"]["shipped"] and loads["ratio_declared_to_shipped"]
