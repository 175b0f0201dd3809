"""bench/fetch.py at a tiny size: this tree's API client against its last revision, the same bytes stored."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # whole-pipeline runs: CI and ./dev test, not the fast tier


def test_fetch_compares_the_client_with_its_last_revision():
    from bench import fetch

    fetched = fetch.compare(transactions=300, rounds=1, revision=fetch.last_api_client_revision())
    assert fetched["same bytes stored"] and fetched["now / then (best)"] and fetched["records"] >= 300
