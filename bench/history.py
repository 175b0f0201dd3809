"""Benchmark 6: the pipeline over time and at volume.

Over time: does a day cost more the longer the lake has run? Day 1 is built alone on fresh lakes (best of
`repeats` lakes, tables created first as `bootstrap_lake` creates them), timed per layer. The history is then seeded
up to N days as a single-run backfill builds a range: the raw zone fetched day by day, bronze written directly from
those batches (`Pipeline.seed_bronze`: the layers' own range path plans every day apart, minutes a month on two
cores), every later layer once over the whole range (`run_layer` with a multi-day request). The next days are then
built one at a time, timed per layer, each followed by day 1 on a fresh lake. Target: every layer's day N+1 within
1.2x of its day 1 at N = 365, at the same day size, judged on the median of the paired ratios (each day N+1 over the
day 1 timed right after it: a drift of the machine's speed over the run moves both); the best of each is shown too.

At volume: one day of 999,999 transactions (the synthetic API's most) through every layer on a fresh lake, against a
floor measured in the same run: Spark reading that day's raw JSON with bronze's schema and writing it as Parquet
once. Targets: the whole day within 2.5x the floor times the number of layers, no layer over 3x one floor.

Every day is built the way a daily run builds it: the project's synthetic API on loopback, its three endpoints
fetched into the raw zone (`fetch_day`), then each table layer through `etr_assets.pipeline.layers.run_layer` in
the asset graph's order, with the run's audit branch and the raw zone's policy, as `LayerRunner` does in process.
Silver finds each day's cursor in its own table, as a real run does: a day never built has none, so it is read
whole.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import statistics
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

from bench.common import MIB, JvmPeak, Lake, measure, ratio, revision, verdict

TITLE = "Benchmark 6 — the pipeline over time and at volume"
RAW_FETCH = "raw fetch"
# The asset graph's order: raw, bronze, landing (SCD2 history), silver, gold (activity reads silver and the day
# before's activity; profiles read landing and activity). `run` checks it names every layer the pipeline has.
TABLE_LAYERS = (
    "bronze/bnpl_transactions_raw",
    "bronze/bnpl_customers_raw",
    "bronze/bnpl_merchants_raw",
    "landing/customers",
    "landing/merchants",
    "silver/bnpl_transactions_clean",
    "gold/bnpl_daily_summary",
    "gold/customer_activity",
    "gold/customer_profiles",
)
LAYERS = (RAW_FETCH, *TABLE_LAYERS)
HISTORY_DAYS = (30, 365)


def _layers_of(declared) -> set[str]:
    """A declared source's table layers (`namespace/name`, as etr_assets.pipeline.layers names them)."""
    return {f"{spec.namespace}/{spec.name}" for spec in declared.specs}


PER_DAY = 10_000
VOLUME = 999_999  # the synthetic API's most a day (transaction ids carry a six-digit sequence)
HISTORY_TARGET = 1.2  # day N+1 / day 1, every layer, at the longest history
VOLUME_DAY_TARGET = 2.5  # the big day's seconds / (floor x layers)
VOLUME_LAYER_TARGET = 3.0  # one layer's seconds / floor
VOLUME_VERDICT = f"verdict (<= {VOLUME_LAYER_TARGET}x)"
WARM_UP = True  # an untimed day first: a JVM's first run of each plan compiles classes, which day 1 must not pay
FULL_GC = True  # before each layer: its memory peak is then its own (JvmPeak)


# --- one lake and its source ----------------------------------------------------------------------------------
@dataclasses.dataclass
class Pipeline:
    """A lake of its own (catalog, warehouse and raw zone) fed by the synthetic API, run layer by layer."""

    spark: object
    settings: object  # etr_assets.settings.Settings
    raw: object  # RawZone
    api: object  # RunningApi
    memory: JvmPeak

    def client(self, page_size: int):
        """The declared BNPL source's client on the synthetic API."""
        from etr_assets.sources.http_fetch import SourceClient
        from etr_assets.tables.declared import source

        token = {"token": self.api.config.token}
        return SourceClient(source("bnpl").declaration, self.api.url, token, page_size=page_size, timeout=120.0)

    def fetch(self, days: list[dt.date], page_size: int) -> dict:
        from etr_assets.sources.fetch import fetch_day

        client, records = self.client(page_size), 0
        for day in days:
            for endpoint in client.declaration.names:
                records += fetch_day(client, self.raw, endpoint, day)[1].records
        return {"rows_written": records}

    def prepare_source(self, day: dt.date) -> None:
        """Ask for each endpoint's first record of `day`: the synthetic API builds a day's list on its first request
        (about a minute at 999,999 transactions), a cost of the source, not of the pipeline's fetch."""
        client = self.client(1)
        for resource in client.declaration.resources:
            next(client.iter_record_texts(resource, day))  # the first page only

    def build(self, layer: str, days: list[dt.date], run_id: str) -> dict:
        from etr_assets.lake.wap import branch_name
        from etr_assets.pipeline.contract import BronzeRequest
        from etr_assets.pipeline.layers import LAYERS, run_layer

        options = {"max_reject_rate": self.settings.max_reject_rate, "max_day_shrink": self.settings.max_day_shrink}
        bronze = issubclass(LAYERS[layer].request_type, BronzeRequest)  # the limits are bronze's alone
        request = LAYERS[layer].request(
            [d.isoformat() for d in days], branch_name(run_id), **(options if bronze else {})
        )
        figures = run_layer(self.spark, self.settings.catalog, lambda: self.raw, request, run_id).figures
        return {"rows_written": figures.get("rows_written"), "table_rows": figures.get("dagster/row_count")}

    def seed_bronze(self, layer: str, days: list[dt.date]) -> dict:
        """A bronze table's seeded days written directly: every day's newest raw batch read and validated as one
        (bronze's `read_validated`, the spec's schema and checks), appended in one commit with the same lineage
        columns, and the batches settled as bronze settles them. The layer's own range path validates and unions a
        plan per day, which took minutes a month on two cores."""
        from pyspark.sql import functions as F

        from etr_assets.lake.frames import conform
        from etr_assets.lake.validate import read_validated
        from etr_assets.lake.writes import append
        from etr_assets.pipeline.layers import LAYERS as PIPELINE_LAYERS
        from etr_assets.tables.feeds import RAW_FEEDS

        feed = next(f for f in RAW_FEEDS if f.bronze is PIPELINE_LAYERS[layer].spec)
        batches = [self.raw.latest_sealed(feed.source, feed.endpoint, day) for day in days]
        files = [uri for batch in batches for uri in self.raw.file_uris(batch)]
        checked = read_validated(self.spark, files, feed.api_columns, feed.bronze.checks)
        try:
            if checked.quarantined_count:
                raise RuntimeError(f"seeding {layer}: {checked.quarantined_count} record(s) refused (a clean source)")
            batch_id = F.element_at(F.split("_source_file", "/"), -2)  # a batch's files sit in its own folder
            rows = checked.accepted.withColumns({"_batch_id": batch_id, "_ingested_at": F.current_timestamp()})
            if feed.day_column not in {c.name for c in feed.api_columns}:
                rows = rows.withColumn(feed.day_column, F.to_date(F.substring(batch_id, 1, 10)))
            table = feed.bronze.qualified(self.settings.catalog)
            commit = append(self.spark, table, conform(rows, feed.bronze))
        finally:
            checked.release()
        for batch in batches:
            self.raw.settle(batch, {"snapshot_id": str(commit.snapshot_id), "table": table})
        return {"rows_written": checked.accepted_count}

    def run(
        self,
        days: list[dt.date],
        page_size: int,
        stage: str,
        history_days: int,
        after_layer: Callable[[str], None] = lambda layer: None,
        seeding: bool = False,
    ) -> list[dict]:
        """Every layer over `days` as one run (one day: a daily run; several: a single-run backfill), each timed.
        `seeding`: bronze written directly (`seed_bronze`), every other layer as a run would build it."""
        run_id = f"bench-history-{uuid.uuid4().hex[:12]}"
        rows = []
        for layer in LAYERS:
            how = "run_layer"
            if layer == RAW_FETCH:
                how, action = "fetch_day", lambda: self.fetch(days, page_size)  # noqa: E731
            elif seeding and layer.startswith("bronze/"):
                how, action = "written directly", lambda layer=layer: self.seed_bronze(layer, days)  # noqa: E731
            else:
                action = lambda layer=layer: self.build(layer, days, run_id)  # noqa: E731
            self.memory.start()
            seconds, counters, figures = measure(self.spark, action)
            rows.append(
                {
                    "stage": stage,
                    "history_days": history_days,
                    "days": f"{days[0]}" if len(days) == 1 else f"{days[0]}..{days[-1]} ({len(days)})",
                    "layer": layer,
                    "how": how,
                    "seconds": round(seconds, 3),
                    "peak_rss_mib": self.memory.stop(),
                    "rows_written": figures.get("rows_written"),
                    "table_rows": figures.get("table_rows"),
                    "spark_tasks": counters["tasks"],
                    "input_mib": round(counters["input_bytes"] / MIB, 1),
                    "shuffle_read_mib": round(counters["shuffle_read_bytes"] / MIB, 1),
                }
            )
            # Every figure reaches the log as it is measured: a run stopped midway still leaves its figures.
            say(f"  {stage}, {rows[-1]['days']}: {layer} {seconds:.2f} s, peak RSS {rows[-1]['peak_rss_mib']:,.0f} MiB")
            after_layer(layer)
        return rows


def new_pipeline(lake: Lake, name: str, api, memory: JvmPeak) -> Pipeline:
    """A fresh lake under the benchmark's folder: its own home (warehouse, raw zone) and catalog, with every table
    created as `bootstrap_lake` creates them before a first run (a one-off, not part of any day's cost)."""
    from etr_assets.lake.bootstrap import bootstrap_with_spark
    from etr_assets.lake.session import attach_catalog
    from etr_assets.sources.raw_zone import local_raw_zone
    from etr_assets.tables import ALL_SPECS

    settings = dataclasses.replace(
        lake.settings,
        home=lake.path(name),
        catalog=f"{lake.catalog}_{name}",
        api_transactions_per_day=api.config.transactions_per_day,
    )
    spark = attach_catalog(lake.spark, settings)
    bootstrap_with_spark(spark, settings.catalog, ALL_SPECS)
    return Pipeline(spark, settings, local_raw_zone(settings.raw_root), api, memory)


def daily_page_size(settings, transactions: int) -> int:
    """The run's page size (ETR_API_PAGE_SIZE), unless the day would need more pages than the client follows (the
    source's max_pages guards against an API that pages for ever): then the API's largest page."""
    from etr_assets.sources.synthetic_api import ApiConfig
    from etr_assets.tables.declared import source

    pages = transactions * 1.03 / settings.api_page_size + 1  # the feed re-sends about 3% as stale copies
    max_pages = source("bnpl").declaration.client.max_pages
    return settings.api_page_size if pages < max_pages else ApiConfig.max_page_size


# --- the floor ----------------------------------------------------------------------------------------------------
def floor_once(pipeline: Pipeline, day: dt.date, out: Path) -> tuple[float, dict]:
    """Spark reading the day's newest raw transactions batch with bronze's column types and writing it as Parquet:
    the least any layer that touches the whole day could do."""
    from pyspark.sql import types as T

    from etr_assets.lake.frames import spark_type
    from etr_assets.tables.feeds import TRANSACTIONS

    spark = pipeline.spark
    files = pipeline.raw.file_uris(pipeline.raw.latest_sealed(TRANSACTIONS.source, TRANSACTIONS.endpoint, day))
    schema = T.StructType([T.StructField(c.name, spark_type(c.type), True) for c in TRANSACTIONS.api_columns])

    def read_and_write() -> int:
        spark.read.schema(schema).json(files).write.mode("overwrite").parquet(str(out))
        return len(files)

    seconds, counters, _ = measure(spark, read_and_write)
    return seconds, {"files": len(files), "input_mib": round(counters["input_bytes"] / MIB, 1)}


# --- the two parts ------------------------------------------------------------------------------------------------
def say(text: str) -> None:
    print(f"bench history: {text}", file=sys.stderr, flush=True)


def total_seconds(rows: list[dict]) -> float:
    return sum(r["seconds"] for r in rows)


def over_time(lake: Lake, memory: JvmPeak, per_day: int, histories: list[int], repeats: int) -> dict:
    """Day 1 on a fresh lake, which then holds the history: for each length N, seeded to N days, then the next
    `repeats` days built one at a time, each followed by day 1 on another fresh lake (day 1's figure is the best of
    all of them, taken beside the days it is compared with)."""
    from etr_assets.sources.synthetic_api import ApiConfig, serve

    settings, first = lake.settings, lake.settings.start_date
    page_size = daily_page_size(settings, per_day)
    seed_page_size = ApiConfig.max_page_size  # seeded days are never timed: the fewest requests and files
    timed, seeded = [], []
    fresh_lakes = 0

    def day_one() -> Pipeline:
        nonlocal fresh_lakes
        fresh_lakes += 1
        pipeline = new_pipeline(lake, f"history{fresh_lakes}", api, memory)
        pipeline.prepare_source(first)
        timed.extend(pipeline.run([first], page_size, "day 1", 0))
        say(f"day 1 on fresh lake {fresh_lakes}: {total_seconds(timed[-len(LAYERS) :]):.1f} s")
        return pipeline

    with serve(same_size_source(settings.api_seed, per_day, first)) as api:
        history = day_one()  # the lake that goes on to hold the history
        built = 1
        for length in sorted(set(histories)):
            if length > built:
                days = [first + dt.timedelta(days=d) for d in range(built, length)]
                say(f"seeding days {built + 1}..{length}: raw fetched, bronze written, then each layer over the range")
                seeded += history.run(days, seed_page_size, f"seed to {length} days", built, seeding=True)
                say(f"seeded in {total_seconds(seeded[-len(LAYERS) :]):.0f} s")
                built = length
            # Each day N+1 is followed by a day 1 on a fresh lake: both meet the machine's load of the same minutes.
            for _ in range(max(1, repeats)):
                day = first + dt.timedelta(days=built)
                history.prepare_source(day)
                timed += history.run([day], page_size, f"after {length} days", built)
                say(f"day {built + 1} after {built} days: {total_seconds(timed[-len(LAYERS) :]):.1f} s")
                built += 1
                day_one()
    return {"timed": timed, "seeded": seeded, "page_size": page_size, "seed_page_size": seed_page_size}


def same_size_source(seed: int, per_day: int, first: dt.date):
    """The synthetic API with every day the same size: its customer list held at the size it has on `first` (by
    default three customers sign up a day, so the customer layers' own input would be 1.8x larger on day 366 whatever
    the lake holds). Customers still change, so the histories grow as in a real lake."""
    from etr_assets.sources.synthetic_data import EPOCH, ApiConfig

    default = ApiConfig(seed=seed)
    customers = default.base_customers + default.signups_per_day * (first - EPOCH).days
    return ApiConfig(seed=seed, transactions_per_day=per_day, base_customers=customers, signups_per_day=0)


def warm_up(lake: Lake, memory: JvmPeak, per_day: int) -> list[dict]:
    """One day through every layer on a lake of its own, not counted: a JVM's first run of each plan loads and
    compiles classes, which neither day 1 nor the big day should pay."""
    from etr_assets.sources.synthetic_api import ApiConfig, serve

    settings = lake.settings
    day = settings.start_date - dt.timedelta(days=1)
    with serve(ApiConfig(seed=settings.api_seed, transactions_per_day=per_day)) as api:
        pipeline = new_pipeline(lake, "warmup", api, memory)
        pipeline.prepare_source(day)
        rows = pipeline.run([day], daily_page_size(settings, per_day), "warm-up (not counted)", 0)
    say(f"warm-up day: {total_seconds(rows):.1f} s")
    return rows


def at_volume(lake: Lake, memory: JvmPeak, volume: int, repeats: int) -> dict:
    """One day of `volume` transactions on a fresh lake, with the floor timed right after the fetch and again after
    the last layer (`repeats` times in all): it brackets the layers, so a change of load shows in its spread."""
    from etr_assets.sources.synthetic_api import ApiConfig, serve

    settings, day = lake.settings, lake.settings.start_date
    page_size = daily_page_size(settings, volume)
    floors: list[dict] = []
    with serve(ApiConfig(seed=settings.api_seed, transactions_per_day=volume)) as api:
        pipeline = new_pipeline(lake, "volume", api, memory)
        out = Path(pipeline.settings.home) / "floor"

        def floor(layer: str = RAW_FETCH) -> None:
            if layer == RAW_FETCH:
                seconds, detail = floor_once(pipeline, day, out)
                floors.append({"seconds": round(seconds, 3), **detail})
                say(f"floor (the day's raw JSON read, written as Parquet): {seconds:.1f} s")

        say(f"one day of {volume:,} transactions (page size {page_size}): preparing the source")
        pipeline.prepare_source(day)
        rows = pipeline.run([day], page_size, f"{volume:,} transactions", 0, after_layer=floor)
        for _ in range(max(1, repeats) - 1):
            floor()
    return {"rows": rows, "floors": floors, "page_size": page_size}


# --- results ------------------------------------------------------------------------------------------------------
def best_by_layer(rows: list[dict]) -> dict[str, float]:
    return {layer: min(r["seconds"] for r in rows if r["layer"] == layer) for layer in LAYERS}


def paired_ratios(timed: list[dict], layer: str, length: int) -> list[float]:
    """Each day N+1 after `length` days over the day 1 built right after it (`over_time` interleaves them): two
    figures taken minutes apart, so a machine whose speed drifts over the run moves both."""
    runs = [r for r in timed if r["layer"] == layer and r["stage"] in ("day 1", f"after {length} days")]
    return [
        ratio(run["seconds"], following["seconds"])
        for run, following in zip(runs, runs[1:], strict=False)
        if run["stage"] != "day 1" and following["stage"] == "day 1"
    ]


def history_results(part: dict, histories: list[int]) -> tuple[list[dict], dict, dict]:
    """Per layer: day 1's best, each history's best and its ratio to it, the median of the paired ratios (each day
    N+1 over the day 1 right after it) and the verdict on that median at the longest history."""
    timed = part["timed"]
    day_one = best_by_layer([r for r in timed if r["stage"] == "day 1"])
    lengths = sorted(set(histories))
    after = {n: best_by_layer([r for r in timed if r["stage"] == f"after {n} days"]) for n in lengths}
    longest = lengths[-1]
    judged = f"verdict (paired median <= {HISTORY_TARGET}x after {longest})"
    rows, ratios = [], {}
    for layer in LAYERS:
        row = {"layer": layer, "day 1 (s)": day_one[layer]}
        for n in lengths:
            pairs = paired_ratios(timed, layer, n)
            row[f"day {n + 1} (s)"] = after[n][layer]
            row[f"x after {n}"] = ratios[f"day {n + 1} / day 1, {layer}"] = ratio(after[n][layer], day_one[layer])
            row[f"pairs after {n}"] = ", ".join(f"{p:g}" for p in pairs)
            median = round(statistics.median(pairs), 3) if pairs else None
            row[f"paired median after {n}"] = ratios[f"day {n + 1} / day 1 beside it (median), {layer}"] = median
        row[judged] = verdict(row[f"paired median after {longest}"], HISTORY_TARGET)
        rows.append(row)
        say(f"{layer}: day {longest + 1} / day 1 = {row[f'paired median after {longest}']}x -> {row[judged]}")
    chart = {
        "file": "history.png",
        "title": "Day N+1 against day 1, per layer (seconds, best of the repeats)",
        "xlabel": "seconds",
        "labels": list(LAYERS),
        "series": {"day 1": [day_one[x] for x in LAYERS]}
        | {f"day {n + 1} (after {n} days)": [after[n][x] for x in LAYERS] for n in lengths},
    }
    return rows, ratios, chart


def volume_results(part: dict, volume: int) -> tuple[list[dict], dict, dict]:
    """Per layer: seconds in floor units and the peak memory; then the whole day against the floor x layers."""
    floor = min(f["seconds"] for f in part["floors"])
    rows, ratios = [], {}
    for r in part["rows"]:
        units = ratio(r["seconds"], floor)
        ratios[f"{volume:,} transactions, {r['layer']} / floor (target <= {VOLUME_LAYER_TARGET})"] = units
        rows.append(
            {
                "layer": r["layer"],
                "seconds": r["seconds"],
                "x floor": units,
                VOLUME_VERDICT: verdict(units, VOLUME_LAYER_TARGET),
                "peak_rss_mib": r["peak_rss_mib"],
                "rows_written": r["rows_written"],
                "spark_tasks": r["spark_tasks"],
                "input_mib": r["input_mib"],
                "shuffle_read_mib": r["shuffle_read_mib"],
            }
        )
    day_seconds = total_seconds(part["rows"])
    day_units = ratio(day_seconds, floor * len(LAYERS))
    ratios[f"{volume:,} transactions, whole day / (floor x {len(LAYERS)} layers) (target <= {VOLUME_DAY_TARGET})"] = (
        day_units
    )
    rows.append(
        {
            "layer": f"whole day (floor x {len(LAYERS)} = {floor * len(LAYERS):.1f} s)",
            "seconds": round(day_seconds, 3),
            "x floor": day_units,
            VOLUME_VERDICT: f"{verdict(day_units, VOLUME_DAY_TARGET)} (<= {VOLUME_DAY_TARGET}x)",
            "peak_rss_mib": max(r["peak_rss_mib"] for r in part["rows"]),
        }
    )
    for row in rows:
        say(f"{row['layer']}: {row['seconds']:.1f} s = {row['x floor']}x the floor -> {row[VOLUME_VERDICT]}")
    chart = {
        "file": "history_volume.png",
        "title": f"One day of {volume:,} transactions: each layer against the floor (seconds)",
        "xlabel": "seconds",
        "labels": [*LAYERS, "floor: raw JSON read, Parquet written"],
        "series": {"seconds": [r["seconds"] for r in part["rows"]] + [floor]},
    }
    return rows, ratios, chart


def run(
    lake: Lake,
    scale: float,
    repeats: int = 3,
    days: list[int] | None = None,
    per_day: int | None = None,
    volume: int | None = None,
) -> dict:
    from etr_assets.pipeline.layers import LAYERS as PIPELINE_LAYERS
    from etr_assets.tables.declared import SOURCES

    # etr_pipeline's layers: the BNPL source's and the Python ones, not those of other declared sources.
    others = {layer for declared in SOURCES if declared.name != "bnpl" for layer in _layers_of(declared)}
    built = set(PIPELINE_LAYERS) - others
    missing, unknown = built - set(TABLE_LAYERS), set(TABLE_LAYERS) - built
    if missing or unknown:  # a daily run builds every layer: so must this benchmark
        raise SystemExit(f"bench history: TABLE_LAYERS misses {sorted(missing)} and names unknown {sorted(unknown)}")
    histories = [n for n in (days if days is not None else HISTORY_DAYS) if n > 0]
    per_day = max(1, int((per_day if per_day is not None else PER_DAY) * scale))
    volume = min(999_999, int((volume if volume is not None else VOLUME) * scale))
    memory = JvmPeak(lake.spark, full_gc=FULL_GC)
    tables, ratios, charts, data = [], {}, [], {"history_days": histories, "per_day": per_day, "volume": volume}
    data |= {"memory": memory.method, "jvm_heap_max_mib": memory.heap_max_mib(), **revision()}
    changes = " (with uncommitted changes to etr_assets or bench)" if data["dirty"] else ""
    notes = [f"Run on {data['date']} at commit {data['commit']}{changes}."]
    warm = warm_up(lake, memory, per_day) if WARM_UP else []
    # The big day first, while the JVM holds little else: its memory peaks are then its own.
    big = at_volume(lake, memory, volume, repeats) if volume else None
    if histories:
        part = over_time(lake, memory, per_day, histories, repeats)
        rows, history_ratios, chart = history_results(part, histories)
        tables += [
            {
                "title": f"Day N+1 against day 1, per layer (target: <= {HISTORY_TARGET}x after {max(histories)} days)",
                "rows": rows,
            },
            {"title": "Every timed day, per layer", "rows": part["timed"]},
        ]
        ratios |= history_ratios
        charts.append(chart)
        data |= {"page_size": part["page_size"], "seed_page_size": part["seed_page_size"]}
    if big:
        rows, volume_ratios, chart = volume_results(big, volume)
        tables += [
            {"title": f"One day of {volume:,} transactions, per layer, against the floor", "rows": rows},
            {
                "title": "The floor: the day's raw JSON read with bronze's types, written as Parquet",
                "rows": big["floors"],
            },
        ]
        ratios |= volume_ratios
        charts.append(chart)
        data |= {"volume_page_size": big["page_size"]}
    seeded = part["seeded"] if histories else []
    tables.append({"title": "The warm-up and the seeded history, per layer (not counted)", "rows": warm + seeded})
    timed_days = (
        f"best of {max(1, repeats)} consecutive days for day N+1, each followed by day 1 on a fresh lake (day 1: the "
        "best of those and of the history lake's own)"
    )
    return {
        "title": TITLE,
        "data": data,
        "data_description": (
            f"History: {per_day:,} synthetic transactions a day (the synthetic API on loopback, its customer "
            f"list held at day 1's size), after {', '.join(map(str, histories)) or 'no'} days; seeded as a single-run "
            "backfill would build the range (raw fetched day by day, every later layer through run_layer with a "
            "multi-day request), "
            f"except bronze, written directly from the raw batches; timed days {timed_days}. "
            f"Volume: one day of {volume:,} transactions on a fresh lake. Days start {lake.settings.start_date}; "
            f"every day fetched into the raw zone, then each layer through run_layer in the asset graph's order."
        ),
        "counters_description": (
            "Per layer: wall time, the Spark tasks it ran and what they read and shuffled (task metrics by job "
            f"group), the rows it wrote and the table's rows after it, and the JVM's resident peak ({memory.method}; "
            f"the heap may grow to {data['jvm_heap_max_mib']:,.0f} MiB)."
        ),
        "tables": tables,
        "ratios": ratios,
        "charts": charts,
        "notes": notes,
    }
