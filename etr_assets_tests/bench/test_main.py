"""bench/__main__.py: the benchmarks it lists, and the size options it takes or refuses (no benchmark runs)."""

from __future__ import annotations

import pytest

from bench.__main__ import BENCHMARKS


def test_every_benchmark_is_listed():
    assert set(BENCHMARKS) == {"formats", "scd2", "small_files", "health", "orchestration", "history"}


def test_keys_sets_the_scd2_sizes_and_is_refused_elsewhere(tmp_path, monkeypatch):
    from bench import __main__ as bench_main
    from bench import scd2

    seen = {}
    monkeypatch.setattr(scd2, "run", lambda lake, scale, repeats, sizes=None: seen.update(sizes=sizes) or {})
    monkeypatch.setattr(bench_main, "open_lake", lambda name: __import__("contextlib").nullcontext(None))
    monkeypatch.setattr("bench.report.write", lambda result, out: [])
    bench_main.main(["scd2", "--keys", "3000000,200", "--out", str(tmp_path)])
    assert seen["sizes"] == [3_000_000, 200]
    with pytest.raises(SystemExit, match="--keys sets the scd2 benchmark's table sizes"):
        bench_main.main(["formats", "--keys", "3000000"])
    with pytest.raises(SystemExit, match="each >= 100"):
        bench_main.main(["scd2", "--keys", "50"])


def test_size_options_go_to_the_benchmarks_that_take_them(tmp_path, monkeypatch):
    from bench import __main__ as bench_main
    from bench import data, formats

    seen = {}
    monkeypatch.setattr(formats, "run", lambda lake, scale, repeats, **sizes: seen.update(sizes) or {})
    monkeypatch.setattr(bench_main, "open_lake", lambda name: __import__("contextlib").nullcontext(None))
    monkeypatch.setattr("bench.report.write", lambda result, out: [])
    bench_main.main(["formats", "--days", "7", "--per-day", "1000000", "--out", str(tmp_path)])
    assert seen == {"days": 7, "per_day": 1_000_000}
    assert data.sizes(1.0, 7, 1_000_000) == {"rows": 7_000_000, "days": 7, "customers": 350_000}
    assert data.sizes(1.0) == data.sizes(1.0, 365, 10_000)  # the default run: 10,000 rows a day for a year
    with pytest.raises(SystemExit, match="--volume: an option of history only, not formats"):
        bench_main.main(["formats", "--volume", "1000", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="formats takes one --days value"):
        bench_main.main(["formats", "--days", "7,30", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="formats takes --scale or --days/--per-day, not both"):
        bench_main.main(["formats", "--per-day", "1000", "--scale", "2", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="--days, --per-day: an option of history and formats only, not scd2"):
        bench_main.main(["scd2", "--days", "7", "--per-day", "10", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="--volume is 0..999999"):
        bench_main.main(["history", "--volume", "1000000", "--out", str(tmp_path)])
