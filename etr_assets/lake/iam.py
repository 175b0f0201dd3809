"""The least-privilege IAM policy of the pipeline, generated from the specs: named actions on the prefixes and
Glue tables it owns only (what each statement grants: docs/production.md). `deployment/iam-policy.json` is this
module's output for the defaults below (a test keeps them equal)."""

from __future__ import annotations

import json
from collections.abc import Iterable

from etr_assets.lake.bootstrap import namespaces
from etr_assets.lake.specs import TableSpec
from etr_assets.sources.fetch import ENDPOINTS, SOURCE
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
    "glue:GetDatabase",
    "glue:GetDatabases",
    "glue:CreateDatabase",
    "glue:GetTable",
    "glue:GetTables",
    "glue:CreateTable",
    "glue:UpdateTable",
]
GLUE_JOB_ACTIONS = ["glue:StartJobRun", "glue:GetJobRun", "glue:GetJobRuns", "glue:BatchStopJobRun"]


def table_prefix(spec: TableSpec) -> str:
    """The table's folder under the bucket: `warehouse/<db>.db/<table>` (bootstrap's and GlueCatalog's layout)."""
    return f"{WAREHOUSE_PREFIX}/{spec.namespace}.db/{spec.name}"


def open_batch_index(endpoint: str) -> str:
    """An endpoint's index of open batches: the one place under `raw/` the pipeline deletes (an entry per batch,
    removed once the batch is complete)."""
    return f"{RAW_PREFIX}/{SOURCE}/{endpoint}/{OPEN_INDEX}"


def owned_prefixes(specs: Iterable[TableSpec]) -> list[str]:
    return [RAW_PREFIX, CODE_PREFIX, PIPES_PREFIX] + [table_prefix(s) for s in specs]


def iam_policy(
    specs: Iterable[TableSpec],
    bucket: str = DEFAULT_BUCKET,
    region: str = DEFAULT_REGION,
    account: str = "*",
    glue_job: str = DEFAULT_GLUE_JOB,
) -> dict:
    """The policy document for the pipeline's role (the code location's and the Glue job's)."""
    specs = sorted(specs, key=lambda s: s.identifier)
    bucket_arn = f"arn:aws:s3:::{bucket}"
    glue = f"arn:aws:glue:{region}:{account}"
    tables = [f"{bucket_arn}/{table_prefix(s)}/*" for s in specs]
    prefixes = owned_prefixes(specs)
    statements = [
        {
            "Sid": "ListOnlyTheLakePrefixes",
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": [bucket_arn],
            "Condition": {
                "StringLike": {"s3:prefix": sorted(p for prefix in prefixes for p in (prefix, f"{prefix}/*"))}
            },
        },
        {"Sid": "LocateTheBucket", "Effect": "Allow", "Action": ["s3:GetBucketLocation"], "Resource": [bucket_arn]},
        {
            "Sid": "RawZoneReadWriteNeverDelete",
            "Effect": "Allow",
            "Action": OBJECT_READ + OBJECT_WRITE,
            "Resource": [f"{bucket_arn}/{RAW_PREFIX}/*"],
        },
        {
            "Sid": "RawZoneOpenBatchIndexEntries",
            "Effect": "Allow",
            "Action": OBJECT_DELETE,
            "Resource": [f"{bucket_arn}/{open_batch_index(endpoint)}/*" for endpoint in ENDPOINTS],
        },
        {
            "Sid": "IcebergTableFiles",
            "Effect": "Allow",
            "Action": OBJECT_READ + OBJECT_WRITE + OBJECT_DELETE,
            "Resource": tables,
        },
        {
            "Sid": "JobCodeReadOnly",
            "Effect": "Allow",
            "Action": OBJECT_READ,
            "Resource": [f"{bucket_arn}/{CODE_PREFIX}/*"],
        },
        {
            "Sid": "PipesExchange",
            "Effect": "Allow",
            "Action": OBJECT_READ + OBJECT_WRITE + OBJECT_DELETE,
            "Resource": [f"{bucket_arn}/{PIPES_PREFIX}/*"],
        },
        {
            "Sid": "GlueCatalogDatabasesAndTables",
            "Effect": "Allow",
            "Action": GLUE_CATALOG_ACTIONS,
            "Resource": [f"{glue}:catalog"]
            + [f"{glue}:database/{ns}" for ns in namespaces(specs)]
            + [f"{glue}:table/{s.namespace}/{s.name}" for s in specs],
        },
        {"Sid": "RunTheGlueJob", "Effect": "Allow", "Action": GLUE_JOB_ACTIONS, "Resource": [f"{glue}:job/{glue_job}"]},
    ]
    return {"Version": "2012-10-17", "Statement": statements}


def render(policy: dict) -> str:
    return json.dumps(policy, indent=2) + "\n"
