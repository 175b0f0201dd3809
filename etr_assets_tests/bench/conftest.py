"""The benchmarks' smoke tests (one file per module of bench/): each runs at a tiny scale in the test process's Spark
session and writes a result with its ratios and counters. Timings are never asserted: only that the figures exist
and add up. One file each, so the test processes share them out instead of one process running them all."""

from __future__ import annotations

import json

import pytest

from bench.__main__ import run_benchmark

TINY = 0.001


@pytest.fixture
def run(spark, tmp_path):
    def run_one(name: str, repeats: int = 1, options: dict | None = None) -> dict:
        scale = 1.0 if options else TINY
        run_benchmark(name, scale, repeats, tmp_path, f"python -m bench {name} --scale {scale}", options=options)
        result = json.loads((tmp_path / f"{name}.json").read_text())
        assert (tmp_path / f"{name}.md").read_text().startswith(f"# {result['title']}")
        assert result["machine"]["cores"] >= 1 and len(result["machine"]["load_average_end"]) == 3
        assert result["ratios"] and all(v is not None for v in result["ratios"].values()), result["ratios"]
        return result

    return run_one
