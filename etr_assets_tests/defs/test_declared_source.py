"""A second API declared in YAML only (etr_assets_tests/sources/declared/stores): API key header, cursor paging,
records under result.items, nested fields, no update time. Through Dagster, on a lake of the test's own: three days
raw -> bronze -> SCD2 against a model, a fetch cut midway and run again, malformed records quarantined, and a data
subject erased with the proof passing."""

from __future__ import annotations

import datetime as dt

import pytest
from dagster import AssetKey, DagsterInstance, materialize

from etr_assets.definitions import build_definitions
from etr_assets.lake.erasure import ErasureRequest
from etr_assets.pipeline.erasure import erase_customers
from etr_assets.sources.raw_zone import local_raw_zone
from etr_assets.sources.synthetic_stores import StoresConfig, StoresFaults, checkins_for, serve, stores_as_of
from etr_assets.tables.declared import source

DAYS = [dt.date(2025, 1, 1), dt.date(2025, 1, 2), dt.date(2025, 1, 3)]
STORES = source("stores")
HISTORY, CHECKINS = STORES.feeds["stores"].landing, STORES.raw_feed("checkins")
CONFIG = StoresConfig(min_checkins=120, max_checkins=160)  # three pages of 50 a day


@pytest.fixture
def stores_api(monkeypatch):
    with serve(CONFIG) as running:
        monkeypatch.setenv("STORES_API_URL", running.url)
        monkeypatch.setenv("STORES_API_KEY", CONFIG.api_key)  # read at the run's start, never stored by Dagster
        yield running


def run(defs, day: dt.date, instance, keys=None, expect_success=True):
    job = defs.resolve_job_def("stores_ingest")
    selected = [a for a in defs.assets if any(k in job.asset_layer.selected_asset_keys for k in a.keys)]
    resources = defs.get_repository_def().get_top_level_resources()
    result = materialize(
        selected,
        resources=resources,
        partition_key=day.isoformat(),
        instance=instance,
        selection=keys,
        raise_on_error=False,
    )
    assert result.success is expect_success
    return result


def model_history(days):
    """The SCD2 versions the snapshots imply: a store's state starts when a snapshot first shows it (the end of that
    day: no update time is sent), and ends when a later snapshot shows another state or no longer lists the store."""
    open_versions, versions = {}, []
    for day in days:
        at = dt.datetime.combine(day + dt.timedelta(days=1), dt.time())
        listed = {
            s["store_id"]: (s["name"], s["address"]["city"], s["address"]["country"], s["format"])
            for s in stores_as_of(CONFIG, day)
        }
        for key, version in list(open_versions.items()):
            if listed.get(key) != version[0]:
                versions.append((key, *version[0], version[1], at))
                del open_versions[key]
        for key, state in listed.items():
            open_versions.setdefault(key, (state, at))
    versions += [(key, *state, start, None) for key, (state, start) in open_versions.items()]
    return sorted(versions, key=lambda v: (v[0], v[5]))


@pytest.mark.slow  # Spark through Dagster: CI and ./dev test, not the fast tier
def test_three_days_load_raw_bronze_and_an_scd2_history_equal_to_the_model(settings, lake, stores_api):
    defs, instance = build_definitions(settings), DagsterInstance.ephemeral()
    for day in DAYS:
        result = run(defs, day, instance)
    spark, catalog = lake, settings.catalog

    rows = spark.sql(
        f"SELECT store_id, name, city, country, format, _valid_from, _valid_to FROM {HISTORY.qualified(catalog)}"
    ).collect()
    history = sorted((tuple(r) for r in rows), key=lambda v: (v[0], v[5]))
    assert history == model_history(DAYS)
    assert any(v[6] is not None for v in history)  # changes and closings happened in three days
    current = spark.sql(f"SELECT count(*) FROM {HISTORY.qualified(catalog)} WHERE _is_current").first()[0]
    assert current == len(stores_as_of(CONFIG, DAYS[-1]))

    # Events: every check-in of each day once, nested device fields flattened into their columns.
    checkins = spark.sql(
        f"SELECT day, count(*), count(os), count(app_version) FROM {CHECKINS.bronze.qualified(catalog)} GROUP BY day"
    ).collect()
    expected = {day: len(checkins_for(CONFIG, day)) for day in DAYS}
    assert {r[0]: tuple(r[1:]) for r in checkins} == {day: (n, n, n) for day, n in expected.items()}

    # The raw zone keeps each record's text as it arrived (the nested object too), its batches complete.
    raw = local_raw_zone(settings.raw_root)
    [batch] = raw.batches("stores", "checkins", DAYS[-1])
    assert raw.is_complete(batch)
    lines = [line for uri in raw.file_uris(batch) for line in open(uri) if line.strip()]
    assert '"device": {"os": ' in lines[0] or '"device":{"os":' in lines[0]

    metadata = {
        e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()
    }
    landing = metadata["landing/stores_stores"]
    assert landing["history_method"].value == "current-rows", landing["history_reason"].value
    assert metadata["raw/stores_checkins"]["dagster/partition_row_count"].value == expected[DAYS[-1]]


@pytest.mark.slow  # Spark through Dagster: CI and ./dev test, not the fast tier
def test_a_fetch_cut_midway_leaves_its_batch_unloaded_and_the_rerun_loads_the_whole_day(settings, lake, stores_api):
    defs, instance, raw = build_definitions(settings), DagsterInstance.ephemeral(), local_raw_zone(settings.raw_root)
    keys = [AssetKey(["raw", "stores_checkins"]), AssetKey(["bronze", "stores_checkins"])]
    stores_api.set_faults(StoresFaults(fail_after_pages=1))  # the second page never comes
    run(defs, DAYS[0], instance, keys, expect_success=False)
    [cut] = raw.batches("stores", "checkins", DAYS[0])
    assert raw.manifest(cut) is None and not raw.is_complete(cut)  # pending, never sealed: never loaded
    assert [b.batch_id for b in raw.pending("stores", "checkins")] == [cut.batch_id]

    stores_api.set_faults(StoresFaults())
    run(defs, DAYS[0], instance, keys)
    loaded = lake.sql(f"SELECT count(*) FROM {CHECKINS.bronze.qualified(settings.catalog)}").first()[0]
    assert loaded == len(checkins_for(CONFIG, DAYS[0]))


@pytest.mark.slow  # Spark through Dagster: CI and ./dev test, not the fast tier
def test_malformed_records_are_quarantined_with_their_reason_and_the_rest_loads(settings, lake, stores_api):
    defs, instance = build_definitions(settings), DagsterInstance.ephemeral()
    keys = [AssetKey(["raw", "stores_checkins"]), AssetKey(["bronze", "stores_checkins"])]
    stores_api.set_faults(StoresFaults(malformed_rate=0.04))
    run(defs, DAYS[0], instance, keys)
    catalog, total = settings.catalog, len(checkins_for(CONFIG, DAYS[0]))
    refused = lake.sql(f"SELECT reason, raw_text FROM {CHECKINS.quarantine.qualified(catalog)}").collect()
    accepted = lake.sql(f"SELECT count(*) FROM {CHECKINS.bronze.qualified(catalog)}").first()[0]
    assert refused and accepted + len(refused) == total
    assert all(r["reason"] and r["raw_text"].startswith("{") for r in refused)


@pytest.mark.slow  # Spark through Dagster: CI and ./dev test, not the fast tier
def test_erasing_a_subject_reaches_the_declared_sources_tables_and_raw_zone_and_is_proven(settings, lake, stores_api):
    defs, instance = build_definitions(settings), DagsterInstance.ephemeral()
    keys = [AssetKey(["raw", "stores_checkins"]), AssetKey(["bronze", "stores_checkins"])]
    run(defs, DAYS[0], instance, keys)
    catalog, table = settings.catalog, CHECKINS.bronze.qualified(settings.catalog)
    subject = lake.sql(f"SELECT customer_id FROM {table} GROUP BY 1 ORDER BY count(*) DESC LIMIT 1").first()[0]
    before = lake.sql(f"SELECT count(*) FROM {table}").first()[0]
    mine = lake.sql(f"SELECT count(*) FROM {table} WHERE customer_id = {subject}").first()[0]

    request = ErasureRequest.create("REQ-STORES", [subject], b"test-audit-key", run_id="test-run")
    report = erase_customers(lake, catalog, local_raw_zone(settings.raw_root), request)

    assert report.proof.passed, report.proof
    assert lake.sql(f"SELECT count(*) FROM {table}").first()[0] == before - mine
    assert report.table(CHECKINS.bronze.identifier).rows_removed == mine
    raw = local_raw_zone(settings.raw_root)
    [batch] = raw.batches("stores", "checkins", DAYS[0])
    text = "".join(open(uri).read() for uri in raw.file_uris(batch))
    assert f'"customer_id": {subject},' not in text and f'"customer_id":{subject},' not in text


def test_a_missing_secret_fails_the_run_at_its_start_naming_the_variable_before_any_request(settings, monkeypatch):
    with serve(CONFIG) as api:
        monkeypatch.setenv("STORES_API_URL", api.url)
        monkeypatch.delenv("STORES_API_KEY", raising=False)
        defs, instance = build_definitions(settings), DagsterInstance.ephemeral()
        result = run(defs, DAYS[0], instance, [AssetKey(["raw", "stores_checkins"])], expect_success=False)
        [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
        message = failure.step_failure_data.user_failure_data.description
        assert "STORES_API_KEY" in message and "stores/defs.yaml:" in message, message
        assert api.requests_served == 0
    assert not local_raw_zone(settings.raw_root).batches("stores", "checkins")  # not even a batch was started


@pytest.mark.slow  # two `etr run` processes, the second with its JVM
def test_a_run_killed_mid_fetch_leaves_its_batch_unloaded_and_the_next_run_loads_the_whole_day(tmp_path):
    """`etr run --job stores_ingest` killed (SIGKILL, its whole process group) while the check-ins are downloading,
    then run again with no manual step: the cut batch stays pending and unsealed, and the day loads whole once."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from etr_assets_tests.test_cli_subprocess import isolated_env, prepare_instance

    etr = str(Path(sys.executable).parent / "etr")
    day = DAYS[0]
    with serve(CONFIG, faults=StoresFaults(page_delay_seconds=1.0)) as api:
        env = isolated_env(tmp_path, STORES_API_URL=api.url, STORES_API_KEY=CONFIG.api_key, PYTHONWARNINGS="ignore")
        env |= {"ETR_START_DATE": DAYS[0].isoformat()}
        prepare_instance(env)
        raw = local_raw_zone(Path(env["ETR_HOME"]) / "raw")
        command = [etr, "run", "--job", "stores_ingest", day.isoformat()]
        killed = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + 120
        while not any(raw.batches("stores", e, day) for e in ("stores", "checkins")):  # a download under way
            assert killed.poll() is None and time.monotonic() < deadline, "the run ended before its download"
            time.sleep(0.1)
        time.sleep(1.5)  # a page or two stored, the rest not yet served
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(timeout=60)
        batches = [b for e in ("stores", "checkins") for b in raw.batches("stores", e, day)]
        cut = [b for b in batches if raw.manifest(b) is None]  # never sealed: never loaded
        assert cut and not any(raw.is_complete(b) for b in batches)

        api.set_faults(StoresFaults())
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    from etr_assets.lake.metadata import load_table
    from etr_assets.settings import Settings

    settings = Settings.from_env(env)
    table = load_table(settings, CHECKINS.bronze)
    assert table.scan().to_arrow().num_rows == len(checkins_for(CONFIG, day))
    # The cut batches were never loaded: closed as abandoned once their day loaded whole, never pending again.
    assert {raw.outcome(b) for b in cut} == {"abandoned (download never finished)"}
    assert all(raw.manifest(b) is None for b in cut)
