"""The least-privilege IAM policy of the pipeline, generated from the specs (docs/production.md);
`deployment/iam-policy.json` is its output for the defaults below (a test keeps them equal)."""

from __future__ import annotations

import json
from collections.abc import Iterable

from etr_assets.lake.bootstrap import namespaces
from etr_assets.lake.feeds import RawFeed
from etr_assets.lake.specs import TableSpec
from etr_assets.sources.raw_zone import OPEN_INDEX

DEFAULT_BUCKET = "etr-lake"
DEFAULT_REGION = "ap-southeast-5"
DEFAULT_GLUE_JOB = "etr-assets"
RAW_PREFIX = "raw"
WAREHOUSE_PREFIX = "warehouse"
CODE_PREFIX = "code"  # the Glue/EMR entry script and the package's wheel
PIPES_PREFIX = "pipes"  # Dagster Pipes context and messages exchanged with remote jobs

OBJECT_READ = ["s3:GetObject"]
OBJECT_WRITE = ["s3:PutObject", "s3:AbortMultipartUpload"]
OBJECT_DELETE = ["s3:DeleteObject"]
GLUE_CATALOG_ACTIONS = [
    f"glue:{action}"
    for action in "GetDatabase GetDatabases CreateDatabase GetTable GetTables CreateTable UpdateTable".split()
]
GLUE_JOB_ACTIONS = ["glue:StartJobRun", "glue:GetJobRun", "glue:GetJobRuns", "glue:BatchStopJobRun"]


def _allow(sid: str, actions: list[str], resources: list[str], **condition) -> dict:
    return {"Sid": sid, "Effect": "Allow", "Action": actions, "Resource": resources} | (
        {"Condition": condition} if condition else {}
    )


def iam_policy(
    specs: Iterable[TableSpec],
    feeds: Iterable[RawFeed],
    bucket: str = DEFAULT_BUCKET,
    region: str = DEFAULT_REGION,
    account: str = "*",
    glue_job: str = DEFAULT_GLUE_JOB,
) -> dict:
    """The policy of the pipeline's role; under `raw/` it deletes only each endpoint's index of open batches."""
    specs = sorted(specs, key=lambda s: s.identifier)
    s3, glue = f"arn:aws:s3:::{bucket}", f"arn:aws:glue:{region}:{account}"
    tables = [f"{WAREHOUSE_PREFIX}/{s.namespace}.db/{s.name}" for s in specs]
    listed = sorted(p for prefix in (RAW_PREFIX, CODE_PREFIX, PIPES_PREFIX, *tables) for p in (prefix, f"{prefix}/*"))
    open_indexes = sorted(f"{s3}/{RAW_PREFIX}/{f.source}/{f.endpoint}/{OPEN_INDEX}/*" for f in feeds)
    everything = OBJECT_READ + OBJECT_WRITE + OBJECT_DELETE
    catalog = [f"{glue}:catalog", *(f"{glue}:database/{ns}" for ns in namespaces(specs))]
    statements = [
        _allow("ListOnlyTheLakePrefixes", ["s3:ListBucket"], [s3], StringLike={"s3:prefix": listed}),
        _allow("LocateTheBucket", ["s3:GetBucketLocation"], [s3]),
        _allow("RawZoneReadWriteNeverDelete", OBJECT_READ + OBJECT_WRITE, [f"{s3}/{RAW_PREFIX}/*"]),
        _allow("RawZoneOpenBatchIndexEntries", OBJECT_DELETE, open_indexes),
        _allow("IcebergTableFiles", everything, [f"{s3}/{table}/*" for table in tables]),
        _allow("JobCodeReadOnly", OBJECT_READ, [f"{s3}/{CODE_PREFIX}/*"]),
        _allow("PipesExchange", everything, [f"{s3}/{PIPES_PREFIX}/*"]),
        _allow(
            "GlueCatalogDatabasesAndTables",
            GLUE_CATALOG_ACTIONS,
            catalog + [f"{glue}:table/{s.namespace}/{s.name}" for s in specs],
        ),
        _allow("RunTheGlueJob", GLUE_JOB_ACTIONS, [f"{glue}:job/{glue_job}"]),
    ]
    return {"Version": "2012-10-17", "Statement": statements}


def render(policy: dict) -> str:
    return json.dumps(policy, indent=2) + "\n"
