"""The pipeline through Dagster, in process, on the shared Spark session and a lake of the test's own."""

from __future__ import annotations

import pytest
from dagster import AssetKey, DagsterInstance, materialize
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from etr_assets.definitions import build_definitions
from etr_assets.pipeline.layers import layer_name
from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, GOLD_DAILY_SUMMARY, SILVER_TRANSACTIONS
from etr_assets_tests.defs.outside_ticks import outside_tick

pytestmark = pytest.mark.slow  # whole-pipeline runs: CI and ./dev test, not the fast tier
DAYS = ["2025-01-01", "2025-01-02"]  # two days: the second extends history


@pytest.fixture
def pipeline_defs(settings, lake):
    return build_definitions(settings)


def materialize_day(defs, day, instance):
    """etr_pipeline's assets for the day (the suite's second declared source has a job of its own)."""
    resources = defs.get_repository_def().get_top_level_resources()
    keys = defs.resolve_job_def("etr_pipeline").asset_layer.selected_asset_keys
    selected = [a for a in defs.assets if any(k in keys for k in a.keys)]
    result = materialize(selected, resources=resources, partition_key=day, instance=instance)
    assert result.success
    return {e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()}


def counts_by_day(lake, settings, spec):
    query = f"SELECT CAST(transaction_date AS STRING), count(*) FROM {spec.qualified(settings.catalog)} GROUP BY 1"
    return dict(lake.sql(query).collect())


def test_daily_partitions_fill_every_layer_and_describe_their_commits(pipeline_defs, settings, lake):
    instance = DagsterInstance.ephemeral()
    cursor = None
    for day in DAYS:
        metadata = materialize_day(pipeline_defs, day, instance)
        # Every commit of every layer (SCD2 branches, audit branches published, overwrites) is one Dagster recorded.
        tick = outside_tick(pipeline_defs, instance, cursor)
        assert not tick.result.run_requests, [e.description for e in tick.evaluations if not e.passed]
        cursor = tick.cursor

    per_day = settings.api_transactions_per_day
    assert counts_by_day(lake, settings, SILVER_TRANSACTIONS) == {d: per_day for d in DAYS}
    bronze = counts_by_day(lake, settings, BRONZE_TRANSACTIONS)
    assert set(bronze) == set(DAYS) and all(n >= per_day for n in bronze.values())
    gold_totals = dict(
        lake.sql(
            "SELECT CAST(transaction_date AS STRING), sum(transactions) FROM "
            f"{GOLD_DAILY_SUMMARY.qualified(settings.catalog)} GROUP BY 1"
        ).collect()
    )
    assert gold_totals == {d: per_day for d in DAYS}

    # The last materialization's metadata describes the commit that Iceberg recorded.
    silver = metadata["silver/bnpl_transactions_clean"]
    current = lake.sql(
        f"SELECT snapshot_id FROM {SILVER_TRANSACTIONS.qualified(settings.catalog)}.snapshots ORDER "
        "BY committed_at DESC LIMIT 1"
    ).first()[0]
    assert silver["snapshot_id"].value == str(current)  # a string: ids exceed 32 bits
    # Dagster's meanings: the table's rows, and the rows of the partition materialized.
    assert silver["dagster/partition_row_count"].value == per_day == silver["rows_written"].value
    assert silver["dagster/row_count"].value == per_day * len(DAYS)
    assert silver["files_added"].value >= 1 and silver["table_rows"].value == per_day * len(DAYS)
    assert silver["table_uri"].value.endswith("/silver/bnpl_transactions_clean")
    assert silver["table"].value == SILVER_TRANSACTIONS.qualified(settings.catalog)
    assert metadata["raw/bnpl_transactions"]["dagster/partition_row_count"].value == bronze[DAYS[-1]]
    # Days in order: the day's new bronze rows were compared with the current versions only, not recomputed.
    landing = metadata["landing/customers"]
    assert landing["history_method"].value == "current-rows", landing["history_reason"].value

    # Every check of every layer recorded its figure per partition, with the run that measured it.
    metrics = lake.sql(
        "SELECT table_name, metric, partition_key, value, passed, run_id FROM "
        f"{settings.catalog}.monitoring.data_quality_metrics"
    ).collect()
    recorded = {(m[0], m[1], m[2]): (m[3], m[4]) for m in metrics}
    for day in DAYS:
        assert recorded[("silver.bnpl_transactions_clean", "keys_are_present", day)] == (0.0, True)
        assert recorded[("silver.bnpl_transactions_clean", "transaction_id_is_unique", day)] == (0.0, True)
        assert recorded[("silver.bnpl_transactions_clean", "row_count_anomaly", day)] == (per_day, True)
        assert recorded[("gold.bnpl_daily_summary", "outcome_counts_add_up", day)] == (0.0, True)
        assert recorded[("bronze.bnpl_transactions_raw", "quarantine_rate", day)] == (0.0, True)
    assert ("landing.customers", "exactly_the_open_versions_are_current", None) in recorded
    assert all(m[5] for m in metrics)
    # Rerunning a day (the README's "run one day" again) is test_cli_subprocess's: it replaces the day, commits no
    # history, and reports both.

    # A corrected early silver day: Dagster's stale status names exactly the partitions that read it, and its
    # downstream (what a backfill "with downstream" selects) follows the day-before dependencies to the last day.
    assert stale_partitions(pipeline_defs, instance) == set()
    silver_key = AssetKey(["silver", "bnpl_transactions_clean"])
    resources = pipeline_defs.get_repository_def().get_top_level_resources()
    assert materialize(
        list(pipeline_defs.assets),
        selection=[silver_key],
        resources=resources,
        partition_key=DAYS[0],
        instance=instance,
    ).success
    assert stale_partitions(pipeline_defs, instance) == {
        ("gold/bnpl_daily_summary", DAYS[0]),
        ("gold/customer_activity", DAYS[0]),
    }
    assert downstream_partitions(pipeline_defs, silver_key, DAYS[0]) == {
        ("gold/bnpl_daily_summary", DAYS[0]),
        *(("gold/customer_activity", day) for day in DAYS),
        *(("gold/customer_profiles", day) for day in DAYS),
    }


def stale_partitions(defs, instance) -> set[tuple[str, str]]:
    """(asset, day) of every materialized partition Dagster reports as stale (what the UI marks "stale")."""
    from dagster._core.definitions.data_version import StaleStatus
    from dagster._utils.test.data_versions import get_stale_status_resolver

    graph = defs.get_repository_def().asset_graph
    resolver = get_stale_status_resolver(instance, list(defs.assets))
    return {
        (key.to_user_string(), day)
        for key in graph.materializable_asset_keys
        for day in DAYS
        if resolver.get_status(key, day) == StaleStatus.STALE
    }


def downstream_partitions(defs, key, day: str) -> set[tuple[str, str]]:
    """Every materialized partition that reads (key, day), directly or through others, by the graph's partition
    mappings (a day-before dependency goes on to every later day; the test's lake holds DAYS)."""
    graph = defs.get_repository_def().asset_graph
    found, frontier = set(), [(key, day)]
    while frontier:
        parent, partition = frontier.pop()
        for child in graph.get(parent).child_keys:
            for child_day in graph.get_child_partition_keys_of_parent(partition, parent, child):
                if child_day in DAYS and (child.to_user_string(), child_day) not in found:
                    found.add((child.to_user_string(), child_day))
                    frontier.append((child, child_day))
    return found


def test_a_partition_range_runs_as_one_backfill_run(pipeline_defs, settings, lake):
    """The transaction lineage of the main job over a range: one run, one commit per table (every asset of the job
    runs per day in the test above; the entities would double this run)."""
    from dagster import AssetKey

    job = pipeline_defs.resolve_job_def("etr_pipeline")
    lineage = [
        AssetKey(["raw", "bnpl_transactions"]),
        AssetKey(["bronze", "bnpl_transactions_raw"]),
        AssetKey(["silver", "bnpl_transactions_clean"]),
        AssetKey(["gold", "bnpl_daily_summary"]),
    ]
    result = job.execute_in_process(
        instance=DagsterInstance.ephemeral(),
        tags={ASSET_PARTITION_RANGE_START_TAG: DAYS[0], ASSET_PARTITION_RANGE_END_TAG: DAYS[-1]},
        asset_selection=lineage,
    )
    assert result.success
    materializations = result.get_asset_materialization_events()
    materialized = {(e.asset_key.to_user_string(), e.partition) for e in materializations}
    assert materialized == {(key.to_user_string(), day) for key in lineage for day in DAYS}
    assert counts_by_day(lake, settings, SILVER_TRANSACTIONS) == {d: settings.api_transactions_per_day for d in DAYS}
    # Every day carries its own rows on its partition, not the range's; the commit's figures are the run's.
    days = {(e.asset_key.to_user_string(), e.partition): e.materialization.metadata for e in materializations}
    for day in DAYS:
        silver_day = days[("silver/bnpl_transactions_clean", day)]
        assert silver_day["rows_written"].value == settings.api_transactions_per_day
        assert silver_day["dagster/partition_row_count"].value == settings.api_transactions_per_day
        assert silver_day["run_days"].value == f"{DAYS[0]}...{DAYS[-1]}"
        assert days[("raw/bnpl_transactions", day)]["dagster/partition_row_count"].value > 0
    # Every check emitted its step output, as in a one-day run: what Dagster gates the next steps on.
    emitted = {e.step_output_data.output_name for e in result.all_events if e.is_successful_output}
    checks = {name for a in pipeline_defs.assets if set(a.keys) & set(lineage) for name in a.check_specs_by_output_name}
    assert checks and checks <= emitted
    # Checks of days record one result per day, on the day's partition (Dagster alone would record one without a
    # partition for the whole range, which the UI cannot place on any day).
    of_days = {(a.key, c.name) for a in pipeline_defs.assets for c in a.check_specs if c.partitions_def is not None}
    checked = {}
    for event in result.all_events:
        if event.event_type_value == "ASSET_CHECK_EVALUATION":
            data = event.event_specific_data
            if (data.asset_key, data.check_name) in of_days:
                checked[(data.asset_key.to_user_string(), data.check_name, data.partition)] = data.passed
    assert {partition for (_, _, partition) in checked} == set(DAYS)
    for day in DAYS:
        assert checked[("silver/bnpl_transactions_clean", "transaction_id_is_unique", day)] is True
        assert checked[("gold/bnpl_daily_summary", "outcome_counts_add_up", day)] is True
        assert ("bronze/bnpl_transactions_raw", "quarantine_rate", day) in checked
    added = lake.sql(
        f"SELECT summary['added-records'] FROM {SILVER_TRANSACTIONS.qualified(settings.catalog)}.snapshots "
        "WHERE summary['added-records'] > 0"
    ).collect()
    assert [int(r[0]) for r in added] == [settings.api_transactions_per_day * len(DAYS)]  # one atomic commit


def test_the_rollback_job_and_the_daily_growth_check(pipeline_defs, settings, lake):
    instance = DagsterInstance.ephemeral()
    resources = pipeline_defs.get_repository_def().get_top_level_resources()
    selection = [
        a
        for a in pipeline_defs.assets
        if any(k.path[0] in ("raw", "bronze", "silver") and "transactions" in k.path[-1] for k in a.keys)
    ]
    checks = list(pipeline_defs.asset_checks)
    first = materialize(selection + checks, resources=resources, partition_key=DAYS[0], instance=instance)
    (check,) = [c for c in first.get_asset_check_evaluations() if c.check_name == "daily_growth"]
    assert check.passed and check.metadata["daily_growth"].value == settings.api_transactions_per_day
    materialize(selection, resources=resources, partition_key=DAYS[1], instance=instance)
    table = SILVER_TRANSACTIONS.qualified(settings.catalog)
    snapshot = lake.sql(  # the first snapshot with data (creating the audit branch made an empty one before it)
        f"SELECT snapshot_id FROM {table}.snapshots WHERE summary['added-records'] > 0 ORDER BY committed_at LIMIT 1"
    ).first()[0]

    result = pipeline_defs.resolve_job_def("rollback_table").execute_in_process(
        instance=instance,
        run_config={
            "ops": {
                "rollback_table_op": {
                    "config": {
                        "table": "silver.bnpl_transactions_clean",
                        "snapshot_id": str(snapshot),
                        "reason": "day 2 was loaded twice",
                    }
                }
            }
        },
    )
    assert result.success
    assert counts_by_day(lake, settings, SILVER_TRANSACTIONS) == {DAYS[0]: settings.api_transactions_per_day}
    reasons = lake.sql(f"SELECT reason FROM {settings.catalog}.audit.table_changes").collect()
    assert [r[0] for r in reasons] == ["day 2 was loaded twice"]
    metrics = lake.sql(f"SELECT metric, value FROM {settings.catalog}.monitoring.data_quality_metrics").collect()
    assert ("daily_growth", float(settings.api_transactions_per_day)) in [(m[0], m[1]) for m in metrics]


def write_batch(settings, day: str, records: list[dict]) -> None:
    """A sealed raw batch of `records` (transactions of `day`; each gives its id and amount)."""
    import datetime as dt
    import json

    from etr_assets.sources.raw_zone import local_raw_zone

    base = {
        "customer_id": 2,
        "merchant_id": 3,
        "currency": "MYR",
        "instalments": 3,
        "payment_method": "CARD",
        "status": "APPROVED",
        "transaction_date": day,
        "created_at": f"{day}T10:00:00Z",
        "updated_at": f"{day}T10:00:00Z",
    }
    raw = local_raw_zone(settings.raw_root)
    batch = raw.start_batch("bnpl", "transactions", dt.date.fromisoformat(day))
    lines = "".join(json.dumps({**base, **r}) + "\n" for r in records)
    raw.storage.write_bytes(f"{batch.key}/part-00001.jsonl", lines.encode())
    raw.seal(batch, ["part-00001.jsonl"], len(records))


def assets_of(defs, *specs):
    keys = {tuple(layer_name(spec).split("/")) for spec in specs}
    return [a for a in defs.assets if any(tuple(k.path) in keys for k in a.keys)]


def test_a_bad_record_waits_in_quarantine_and_a_bad_day_fails_the_run_and_leaves_main_alone(
    pipeline_defs, settings, lake
):
    """One transaction over silver's amount limit is held back and its day publishes; a day that repeats another
    day's transaction id breaks uniqueness (a per-day check): the run fails, main keeps what it had."""
    selection = assets_of(pipeline_defs, BRONZE_TRANSACTIONS, SILVER_TRANSACTIONS)
    resources = pipeline_defs.get_repository_def().get_top_level_resources()
    instance = DagsterInstance.ephemeral()

    def run_day(day, records):
        write_batch(settings, day, records)
        return materialize(selection, resources=resources, partition_key=day, instance=instance, raise_on_error=False)

    held = run_day(
        "2025-02-01", [{"transaction_id": 1, "amount": "250000.00"}, {"transaction_id": 2, "amount": "10.00"}]
    )
    assert held.success
    checks = {c.check_name: c for c in held.get_asset_check_evaluations()}
    assert checks["records_quarantined"].passed is False and checks["records_quarantined"].severity.value == "WARN"
    assert checks["amount_is_between_0_01_and_100000"].passed is True  # nothing broken got through
    table = SILVER_TRANSACTIONS.qualified(settings.catalog)
    assert [r[0] for r in lake.sql(f"SELECT transaction_id FROM {table}").collect()] == [2]
    assert [
        r[0]
        for r in lake.sql(f"SELECT transaction_id FROM {settings.catalog}.silver.quarantine_transactions").collect()
    ] == [1]

    failed = run_day("2025-02-02", [{"transaction_id": 2, "amount": "12.00"}])  # id 2 again, on another day
    assert not failed.success
    checks = {c.check_name: c.passed for c in failed.get_asset_check_evaluations()}
    assert checks["transaction_id_is_unique"] is False and checks["keys_are_present"] is True
    materialized = {e.asset_key.to_user_string() for e in failed.get_asset_materialization_events()}
    assert materialized == {"bronze/bnpl_transactions_raw"}  # silver was not published
    figures = lake.sql(
        f"SELECT partition_key, value, passed FROM {settings.catalog}.monitoring.data_quality_metrics "
        "WHERE metric = 'transaction_id_is_unique' AND NOT passed"
    ).collect()
    assert [tuple(r) for r in figures] == [("2025-02-02", 1.0, False)]  # the failed figure is recorded too
    assert [r[0] for r in lake.sql(f"SELECT transaction_id FROM {table}").collect()] == [2]  # main as it was
    branches = [r[0] for r in lake.sql(f"SELECT name FROM {table}.refs").collect()]
    assert any(b.startswith("audit_") for b in branches)


def test_a_range_in_which_one_day_breaks_a_blocking_check_publishes_nothing_downstream(pipeline_defs, settings, lake):
    """A range run gates as a one-day run does: a day repeating a published transaction id breaks silver's
    uniqueness on that day alone. Silver publishes none of the range (one commit per table, held on its audit
    branch), so its other days wait for a rerun too; gold does not run; each day's verdict is on its partition."""
    selection = assets_of(pipeline_defs, BRONZE_TRANSACTIONS, SILVER_TRANSACTIONS, GOLD_DAILY_SUMMARY)
    resources = pipeline_defs.get_repository_def().get_top_level_resources()
    instance = DagsterInstance.ephemeral()
    write_batch(settings, "2025-02-01", [{"transaction_id": 1, "amount": "10.00"}])
    assert materialize(selection, resources=resources, partition_key="2025-02-01", instance=instance).success
    days = ["2025-02-02", "2025-02-03", "2025-02-04"]
    for n, day in enumerate(days, start=2):  # the middle day repeats id 1
        write_batch(settings, day, [{"transaction_id": 1 if day == days[1] else n, "amount": "10.00"}])

    tags = {ASSET_PARTITION_RANGE_START_TAG: days[0], ASSET_PARTITION_RANGE_END_TAG: days[-1]}
    result = materialize(selection, resources=resources, instance=instance, tags=tags, raise_on_error=False)

    assert not result.success
    assert [e.step_key for e in result.get_step_failure_events()] == ["silver__bnpl_transactions_clean"]
    started = {e.step_key for e in result.all_events if e.event_type_value == "STEP_START"}
    assert started == {"bronze__bnpl_transactions_raw", "silver__bnpl_transactions_clean"}  # gold never ran
    materialized = {(e.asset_key.to_user_string(), e.partition) for e in result.get_asset_materialization_events()}
    assert materialized == {("bronze/bnpl_transactions_raw", day) for day in days}  # upstream of the failure
    unique = {
        c.partition: c.passed
        for c in result.get_asset_check_evaluations()
        if c.check_name == "transaction_id_is_unique"
    }
    assert unique == {day: day != days[1] for day in days}
    # Published: every day's bronze; of silver and gold only the day before the range.
    assert counts_by_day(lake, settings, BRONZE_TRANSACTIONS) == dict.fromkeys(["2025-02-01", *days], 1)
    assert counts_by_day(lake, settings, SILVER_TRANSACTIONS) == {"2025-02-01": 1}
    assert counts_by_day(lake, settings, GOLD_DAILY_SUMMARY) == {"2025-02-01": 1}
