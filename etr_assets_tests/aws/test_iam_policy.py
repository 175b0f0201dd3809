"""The IAM policy grants exactly what the pipeline owns, with named actions, and the committed file is current."""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
from pathlib import Path

from etr_assets.lake import iam
from etr_assets.lake.bootstrap import bootstrap_catalog
from etr_assets.lake.metadata import catalog
from etr_assets.tables import ALL_SPECS
from etr_assets.tables.feeds import RAW_FEEDS
from etr_assets_tests.aws.conftest import REGION
from etr_assets_tests.infra import list_keys, s3_client

COMMITTED = Path(__file__).resolve().parents[2] / "deployment" / "iam-policy.json"


def statements(policy: dict) -> dict[str, dict]:
    return {s["Sid"]: s for s in policy["Statement"]}


def allowed(policy: dict, action: str, resource: str) -> bool:
    """Does an Allow statement (without a condition) grant `action` on `resource`? IAM's wildcard matching."""
    return any(
        s["Effect"] == "Allow"
        and "Condition" not in s
        and action in s["Action"]
        and any(fnmatch.fnmatchcase(resource, pattern) for pattern in s["Resource"])
        for s in policy["Statement"]
    )


def test_the_committed_policy_is_the_generators_output_for_the_shipped_sources():
    """`etr iam-policy` with only the shipped declarations (the suite adds a source of its own)."""
    env = {**os.environ, "ETR_SOURCE_DIRS": ""}
    out = subprocess.run(
        [sys.executable, "-m", "etr_assets.cli", "iam-policy"], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert COMMITTED.read_text() == out.stdout, (
        "deployment/iam-policy.json is stale: etr iam-policy > deployment/iam-policy.json"
    )


def test_the_policy_covers_every_declared_source_without_a_list_kept_by_hand():
    policy = statements(iam.iam_policy(ALL_SPECS, RAW_FEEDS, bucket="b"))
    for feed in RAW_FEEDS:  # the suite's second API too
        assert (
            f"arn:aws:s3:::b/raw/{feed.source}/{feed.endpoint}/_pending/*"
            in policy["RawZoneOpenBatchIndexEntries"]["Resource"]
        )
    tables = policy["IcebergTableFiles"]["Resource"]
    assert all(f"arn:aws:s3:::b/warehouse/{s.namespace}.db/{s.name}/*" in tables for s in ALL_SPECS)
    assert "arn:aws:s3:::b/warehouse/landing.db/stores_stores/*" in tables


def test_only_named_actions_on_named_resources():
    policy = iam.iam_policy(ALL_SPECS, RAW_FEEDS, bucket="b", region="ap-southeast-5", account="123456789012")
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow"
        for action in statement["Action"]:
            assert "*" not in action and action.split(":")[0] in ("s3", "glue"), action
        for resource in statement["Resource"]:
            assert resource != "*" and "*" not in resource.removesuffix("/*"), resource
    actions = {a for s in policy["Statement"] for a in s["Action"]}
    assert not {"glue:DeleteTable", "glue:DeleteDatabase", "s3:DeleteBucket", "s3:PutBucketPolicy"} & actions


def test_glue_grants_cover_exactly_the_specs_databases_and_tables():
    policy = iam.iam_policy(ALL_SPECS, RAW_FEEDS, account="123456789012")
    glue = statements(policy)["GlueCatalogDatabasesAndTables"]["Resource"]
    prefix = f"arn:aws:glue:{iam.DEFAULT_REGION}:123456789012:"
    assert prefix + "catalog" in glue
    assert {r.removeprefix(prefix + "database/") for r in glue if ":database/" in r} == {s.namespace for s in ALL_SPECS}
    assert {r.removeprefix(prefix + "table/") for r in glue if ":table/" in r} == {
        f"{s.namespace}/{s.name}" for s in ALL_SPECS
    }
    assert len(glue) == 1 + len({s.namespace for s in ALL_SPECS}) + len(ALL_SPECS)
    # S3: one folder per table, the raw zone, code and pipes; listing limited to the same prefixes.
    tables = statements(policy)["IcebergTableFiles"]["Resource"]
    assert sorted(tables) == sorted(f"arn:aws:s3:::etr-lake/warehouse/{s.namespace}.db/{s.name}/*" for s in ALL_SPECS)
    listed = statements(policy)["ListOnlyTheLakePrefixes"]["Condition"]["StringLike"]["s3:prefix"]
    assert "warehouse/*" not in listed and "*" not in listed


def test_every_object_bootstrap_writes_is_covered_and_nothing_else_is(aws_settings, moto_endpoint):
    """On moto: each table's location and files fall under the policy; a table outside the specs would not."""
    bootstrap_catalog(catalog(aws_settings), ALL_SPECS, aws_settings.warehouse, aws_settings.format_version)
    policy = iam.iam_policy(ALL_SPECS, RAW_FEEDS, bucket=aws_settings.bucket, region=REGION)
    keys = list_keys(s3_client(moto_endpoint, REGION), aws_settings.bucket)
    assert keys
    for key in keys:
        arn = f"arn:aws:s3:::{aws_settings.bucket}/{key}"
        for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
            assert allowed(policy, action, arn), (action, key)
    raw = f"arn:aws:s3:::{aws_settings.bucket}/raw/bnpl/transactions/2025-01-01_x/part-00000.jsonl"
    assert allowed(policy, "s3:PutObject", raw) and not allowed(policy, "s3:DeleteObject", raw)
    elsewhere = f"arn:aws:s3:::{aws_settings.bucket}/warehouse/silver.db/someone_elses_table/data/x.parquet"
    assert not allowed(policy, "s3:GetObject", elsewhere)
    assert not allowed(policy, "glue:GetTable", f"arn:aws:glue:{REGION}:1:table/silver/someone_elses_table")
    assert json.loads(iam.render(policy)) == policy


def test_in_the_raw_zone_only_open_batch_index_entries_can_be_deleted():
    """Loading removes an open batch's index entry once the batch is complete; raw files and markers stay."""
    from etr_assets.tables.declared import source

    policy = iam.iam_policy(ALL_SPECS, RAW_FEEDS, bucket="b")
    for endpoint in source("bnpl").declaration.names:
        entry = f"arn:aws:s3:::b/raw/bnpl/{endpoint}/_pending/2025-01-01_20250102T020000000000Z_a1b2c3"
        assert allowed(policy, "s3:DeleteObject", entry) and allowed(policy, "s3:PutObject", entry)
        for kept in (".pending", "_manifest.json", ".complete", "part-00001.jsonl"):
            batch_file = f"arn:aws:s3:::b/raw/bnpl/{endpoint}/2025-01-01_20250102T020000000000Z_a1b2c3/{kept}"
            assert allowed(policy, "s3:PutObject", batch_file) and not allowed(policy, "s3:DeleteObject", batch_file)
    assert not allowed(policy, "s3:DeleteObject", "arn:aws:s3:::b/raw/_gdpr_requests/ref.json")
