"""The code location loads, and shows what the UI needs, without starting a JVM."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml
from dagster import AssetKey, DefaultScheduleStatus, Definitions

from etr_assets.definitions import build_definitions, defs
from etr_assets.pipeline.layers import LAYERS, layer_name
from etr_assets.settings import Settings
from etr_assets.tables.declared import SOURCES
from etr_assets.tables.transactions import SILVER_TRANSACTIONS

ROOT = Path(__file__).resolve().parents[2]
# The BNPL keys of the lake as it was before sources were declared: a renamed key would orphan every materialization.
BNPL_KEYS = {
    "raw/bnpl_transactions",
    "raw/bnpl_customers",
    "raw/bnpl_merchants",
    "bronze/bnpl_transactions_raw",
    "bronze/bnpl_customers_raw",
    "bronze/bnpl_merchants_raw",
    "landing/customers",
    "landing/merchants",
}
PIPELINE_ASSETS = {  # the Python layers on top of the BNPL source, by layer
    "silver/bnpl_transactions_clean": "silver",
    "gold/bnpl_daily_summary": "gold",
    "gold/customer_activity": "gold",
    "gold/customer_profiles": "gold",
}


def declared_assets() -> dict[str, str]:
    """Each declared source's assets (from its YAML) and their group: the source's name."""
    assets = {}
    for declared in SOURCES:
        for feed in declared.raw_feeds:
            assets[f"raw/{declared.name}_{feed.endpoint}"] = declared.name
            assets[layer_name(feed.bronze)] = declared.name
        assets |= {layer_name(feed.landing): declared.name for feed in declared.entity_feeds}
    return assets


def asset_specs():
    return {key.to_user_string(): spec for a in defs.assets for key, spec in a.specs_by_key.items()}


def test_definitions_load_with_the_expected_assets_and_groups():
    Definitions.validate_loadable(defs)
    assert defs.get_repository_def().get_all_jobs()  # what a code server builds: names unique across ops and jobs
    specs = asset_specs()
    assert {key: spec.group_name for key, spec in specs.items()} == declared_assets() | PIPELINE_ASSETS
    assert BNPL_KEYS <= {key for key, group in declared_assets().items() if group == "bnpl"}
    assert {declared.name for declared in SOURCES} >= {"bnpl", "stores"}  # the suite declares a second API
    graph = defs.resolve_asset_graph()
    assert graph.get(AssetKey(["gold", "bnpl_daily_summary"])).parent_keys == {
        AssetKey(["silver", "bnpl_transactions_clean"])
    }
    assert graph.get(AssetKey(["bronze", "bnpl_transactions_raw"])).parent_keys == {
        AssetKey(["raw", "bnpl_transactions"])
    }
    assert graph.get(AssetKey(["gold", "customer_profiles"])).parent_keys == {
        AssetKey(["landing", "customers"]),
        AssetKey(["gold", "customer_activity"]),
    }


def test_each_table_asset_builds_the_layer_of_its_key_and_no_key_is_spelled_out():
    """A table's key is derived from its TableSpec (`layer_name`): a literal of it elsewhere in the package is a
    second spelling, which a renamed spec would leave behind."""
    assert {key for key in asset_specs() if not key.startswith("raw/")} == set(LAYERS)
    literals = {f'"{key}"' for key in LAYERS} | {str(key.split("/")).replace("'", '"') for key in LAYERS}
    spelled = {
        f"{path.relative_to(ROOT)}: {literal}"
        for path in (ROOT / "etr_assets").rglob("*.py")
        for literal in literals
        if literal in path.read_text()
    }
    assert spelled == set()


def test_each_dependency_is_declared_with_the_partitions_its_code_reads():
    """A day that builds on the day before's state (carried activity, a history extended by a snapshot) depends
    on that partition of itself; everything else reads the same day."""
    graph = defs.resolve_asset_graph()
    day = "2025-03-10"

    def parents(child: str, parent: str) -> set[str]:
        child_key, parent_key = AssetKey(child.split("/")), AssetKey(parent.split("/"))
        subset = graph.get_parent_partition_keys_for_child(day, parent_key, child_key).partitions_subset
        return set(subset.get_partition_keys())

    assert parents("gold/customer_activity", "gold/customer_activity") == {"2025-03-09"}
    assert parents("gold/customer_activity", "silver/bnpl_transactions_clean") == {day}
    assert parents("landing/customers", "landing/customers") == {"2025-03-09"}
    assert parents("landing/customers", "bronze/bnpl_customers_raw") == {day}
    assert parents("gold/customer_profiles", "gold/customer_activity") == {day}
    assert parents("gold/customer_profiles", "landing/customers") == {day}
    assert parents("gold/bnpl_daily_summary", "silver/bnpl_transactions_clean") == {day}


def test_table_assets_carry_kinds_column_schema_and_table_name():
    spec = asset_specs()["silver/bnpl_transactions_clean"]
    assert spec.kinds == {"iceberg", "spark"}
    schema = spec.metadata["dagster/column_schema"]
    assert [c.name for c in schema.columns] == SILVER_TRANSACTIONS.column_names
    amount = next(c for c in schema.columns if c.name == "amount")
    assert amount.type == "decimal(10,2)" and amount.constraints.nullable is False
    customer = next(c for c in schema.columns if c.name == "customer_id")
    assert "personal data" in customer.constraints.other
    assert spec.metadata["dagster/table_name"] == "etr.silver.bnpl_transactions_clean"
    assert spec.description


def test_local_profile_serializes_writers_per_table_with_pools(tmp_path):
    local = build_definitions(Settings(home=tmp_path))
    pools = {k.to_user_string(): a.op.pool for a in local.assets for k in a.keys}
    assert pools["silver/bnpl_transactions_clean"] == "iceberg_silver_bnpl_transactions_clean"
    assert pools["raw/bnpl_transactions"] is None
    shared = build_definitions(Settings(profile="aws", bucket="b", api_url="https://api.example.test"))
    shared_pools = {k.to_user_string(): a.op.pool for a in shared.assets for k in a.keys}
    # Glue and PostgreSQL arbitrate commits; only SCD2 MERGEs, which conflict with any commit, and bronze, whose
    # first load of a day is an unchecked append, still queue.
    declared = declared_assets()
    assert {k for k, pool in shared_pools.items() if pool} == {k for k in declared if not k.startswith("raw/")}


def test_pipeline_job_is_partitioned_daily_with_a_stopped_schedule():
    job = defs.resolve_job_def("etr_pipeline")
    assert job.partitions_def.get_first_partition_key() == "2025-01-01"
    assert job.executor_def.name == "in_process"
    schedule = defs.resolve_schedule_def("etr_pipeline_daily")
    assert schedule.default_status == DefaultScheduleStatus.STOPPED
    assert schedule.job_name == "etr_pipeline"


def test_each_declared_source_has_its_own_job_and_stopped_schedule_and_etr_pipeline_runs_only_bnpl():
    graph = defs.resolve_asset_graph()
    for declared in SOURCES:
        job = defs.resolve_job_def(f"{declared.name}_ingest")
        keys = {k.to_user_string() for k in job.asset_layer.selected_asset_keys}
        assert keys == {k for k, group in declared_assets().items() if group == declared.name}
        schedule = defs.resolve_schedule_def(f"{declared.name}_ingest_daily")
        assert schedule.default_status == DefaultScheduleStatus.STOPPED and schedule.job_name == job.name
    pipeline = defs.resolve_job_def("etr_pipeline").asset_layer.selected_asset_keys
    bnpl = {k for k, group in declared_assets().items() if group == "bnpl"}
    assert {k.to_user_string() for k in pipeline} == bnpl | set(PIPELINE_ASSETS)
    assert graph.get(AssetKey(["landing", "stores_stores"])).parent_keys == {
        AssetKey(["bronze", "stores_stores"]),
        AssetKey(["landing", "stores_stores"]),
    }


def test_importing_the_definitions_starts_no_jvm():
    probe = (
        "import json, time; t = time.perf_counter(); import etr_assets.definitions as d; "
        "elapsed = time.perf_counter() - t; import pyspark; "
        "print(json.dumps({'gateway': pyspark.SparkContext._gateway is not None, 'seconds': elapsed}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["gateway"] is False  # no JVM until an asset asks for Spark
    print(f"import etr_assets.definitions took {result['seconds']:.2f} s")


def test_deployment_files_point_at_the_definitions_module():
    cloud = yaml.safe_load((ROOT / "dagster_cloud.yaml").read_text())
    assert cloud["locations"] == [
        {"location_name": "etr_assets", "code_source": {"module_name": "etr_assets.definitions"}}
    ]
    workspace = yaml.safe_load((ROOT / "workspace.yaml").read_text())
    assert workspace["load_from"][0]["python_module"]["module_name"] == "etr_assets.definitions"
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    assert tool["dagster"]["module_name"] == "etr_assets.definitions"
    assert tool["dg"]["project"]["root_module"] == "etr_assets"
    assert tool["dg"]["project"]["code_location_target_module"] == "etr_assets.definitions"
