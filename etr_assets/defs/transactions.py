"""The transaction assets: bronze -> silver -> gold, one daily partition per business day.

Each asset is a thin call into `etr_assets.lake.transactions`; a run over a partition range (a single-run
backfill) rebuilds all of its days in one Spark job and one Iceberg commit per table.
"""

from dagster import AssetExecutionContext, AssetsDefinition, Failure, MaterializeResult, MetadataValue

from etr_assets.defs.common import check_results, days_of, table_asset, table_key, table_result
from etr_assets.defs.raw import raw_key
from etr_assets.defs.resources import LakeResource, RawZoneResource
from etr_assets.lake import transactions as pipeline
from etr_assets.lake.wap import AuditFailed, branch_name
from etr_assets.settings import Settings
from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, GOLD_DAILY_SUMMARY, SILVER_TRANSACTIONS


def build_transaction_assets(settings: Settings) -> list[AssetsDefinition]:
    @table_asset(
        settings,
        BRONZE_TRANSACTIONS,
        [raw_key("transactions")],
        "Each day's newest raw batch, validated with the spec: accepted records as received with lineage "
        "columns, refused ones in bronze.quarantine_transactions. Marks the batch complete once committed.",
    )
    def bronze_bnpl_transactions_raw(
        context: AssetExecutionContext, lake: LakeResource, raw_zone: RawZoneResource
    ) -> MaterializeResult:
        layer = pipeline.load_bronze(
            lake.session(), lake.catalog, raw_zone.zone(), days_of(context), raw_zone.max_reject_rate
        )
        return table_result(context, lake, BRONZE_TRANSACTIONS, layer)

    @table_asset(
        settings,
        SILVER_TRANSACTIONS,
        [table_key(BRONZE_TRANSACTIONS)],
        "Typed and validated transactions, one row per transaction id (latest update wins); each day replaced "
        "atomically, written to an audit branch and published only when the blocking checks pass.",
    )
    def silver_bnpl_transactions_clean(context: AssetExecutionContext, lake: LakeResource):
        yield from audited(context, lake, SILVER_TRANSACTIONS, pipeline.build_silver)

    @table_asset(
        settings,
        GOLD_DAILY_SUMMARY,
        [table_key(SILVER_TRANSACTIONS)],
        "Daily summary per currency: counts by outcome, approved and refunded amounts, distinct customers; "
        "published through write-audit-publish.",
    )
    def gold_bnpl_daily_summary(context: AssetExecutionContext, lake: LakeResource):
        yield from audited(context, lake, GOLD_DAILY_SUMMARY, pipeline.build_gold)

    return [bronze_bnpl_transactions_raw, silver_bnpl_transactions_clean, gold_bnpl_daily_summary]


def audited(context: AssetExecutionContext, lake: LakeResource, spec, build):
    """Write-audit-publish: checks are reported either way; a failure leaves main as it was and names the branch."""
    branch = branch_name(context.run.run_id)
    try:
        layer = build(lake.session(), lake.catalog, days_of(context), audit_branch=branch)
    except AuditFailed as failed:
        yield from check_results(failed.results)
        raise Failure(
            description=str(failed),
            metadata={"audit_branch": failed.branch, "inspect": MetadataValue.md(
                f"`etr sql \"SELECT * FROM {spec.identifier} VERSION AS OF '{failed.branch}'\"`")},
        ) from None
    yield table_result(context, lake, spec, layer)
