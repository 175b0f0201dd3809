"""The freshness checks through Dagster: judged from each table's newest commit, recorded as metrics."""

from __future__ import annotations

from dagster import DagsterInstance

from etr_assets.definitions import build_definitions
from etr_assets.lake.evolve import ensure_table
from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, SILVER_TRANSACTIONS


def test_the_freshness_job_warns_for_tables_never_written_and_passes_fresh_ones(lake, settings):
    ensure_table(lake, settings.catalog, SILVER_TRANSACTIONS)  # created: no commit of data yet
    ensure_table(lake, settings.catalog, BRONZE_TRANSACTIONS)
    lake.sql(
        f"INSERT INTO {BRONZE_TRANSACTIONS.qualified(settings.catalog)} "
        "SELECT 1, 2, 3, '1.00', 'MYR', 3, 'CARD', 'APPROVED', DATE'2025-01-01', current_timestamp(), "
        "current_timestamp(), 'b', 'f', current_timestamp()"
    )

    defs = build_definitions(settings)
    result = defs.resolve_job_def("freshness_checks").execute_in_process(instance=DagsterInstance.ephemeral())

    assert result.success  # a warning is not a failed run
    verdicts = {e.asset_key.to_user_string(): e for e in result.get_asset_check_evaluations()}
    assert len(verdicts) == 9 and {e.check_name for e in verdicts.values()} == {"freshness"}
    assert verdicts["bronze/bnpl_transactions_raw"].passed
    assert 0 <= verdicts["bronze/bnpl_transactions_raw"].metadata["hours_since_last_commit"].value < 1
    assert not verdicts["silver/bnpl_transactions_clean"].passed
    assert verdicts["silver/bnpl_transactions_clean"].severity.value == "WARN"
    recorded = {
        r[0]: r[1]
        for r in lake.sql(
            f"SELECT table_name, passed FROM {settings.catalog}.monitoring.data_quality_metrics "
            "WHERE metric = 'freshness'"
        ).collect()
    }
    assert recorded["bronze.bnpl_transactions_raw"] is True and recorded["silver.bnpl_transactions_clean"] is False
    assert len(recorded) == 9
