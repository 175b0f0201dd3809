"""Write-audit-publish: write to an Iceberg branch, check it, fast-forward main only if every check passes; a
failed audit leaves main unchanged and the branch for inspection. Its tables set `write.wap.enabled=true`."""

from __future__ import annotations

import datetime as dt
import re
from typing import TYPE_CHECKING

from etr_assets.errors import AuditFailed
from etr_assets.lake.quality import CheckOutcome, expectation_outcomes, uniqueness_outcome
from etr_assets.lake.specs import TableSpec
from etr_assets.lake.writes import iceberg_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


AUDIT_BRANCH_PREFIX = "audit_"


def branch_name(run_id: str) -> str:
    return AUDIT_BRANCH_PREFIX + re.sub(r"[^A-Za-z0-9_]", "_", run_id)[:36]


def evaluate(
    spark: SparkSession, qualified: str, spec: TableSpec, branch: str, days: list[dt.date]
) -> list[CheckOutcome]:
    """Each expectation over the rebuilt days, and their keys' uniqueness in the whole table, as seen on the branch."""
    table = spark.read.format("iceberg").option("branch", branch).load(qualified)
    outcomes = expectation_outcomes(table, spec, days)
    if spec.unique_key:
        outcomes.append(uniqueness_outcome(table, spec, days))
    return outcomes


def write_audit_publish(spark: SparkSession, catalog: str, spec: TableSpec, branch: str, days: list[dt.date], write):
    """`write(branch)` writes to the branch; check it; publish. Returns (write's result, outcomes)."""
    qualified = spec.qualified(catalog)
    # a branch of main, written as `<table>.branch_<name>` so no session-wide setting leaks
    spark.sql(f"ALTER TABLE {qualified} CREATE BRANCH IF NOT EXISTS `{branch}`")
    result = write(branch)
    outcomes = evaluate(spark, qualified, spec, branch, days)
    if failed := [o for o in outcomes if not o.passed]:
        raise AuditFailed(
            f"{spec.identifier}: {len(failed)} blocking check(s) failed, main is unchanged; the data is kept on branch "
            f"'{branch}' (SELECT * FROM {qualified} VERSION AS OF '{branch}'). Failed: "
            + "; ".join(f"{o.description} ({o.violations} rows)" for o in failed),
            branch,
            outcomes,
        )
    # main fast-forwarded to the branch and the branch dropped in one commit (a metadata file fewer each day than
    # the fast_forward procedure and DROP BRANCH); fails if main moved meanwhile: nothing published, the branch kept
    iceberg_table(spark, qualified).manageSnapshots().fastForwardBranch("main", branch).removeBranch(branch).commit()
    return result, outcomes
