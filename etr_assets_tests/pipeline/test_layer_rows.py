"""What a layer's materialization reports about rows: an SCD2 step's rows written are the versions it inserted and
closed (not 0 on a first load), and the table's rows are what `SELECT count(*)` returns, deletion vectors applied."""

from __future__ import annotations

import datetime as dt

import pytest

from etr_assets.lake.metadata import load_table
from etr_assets.pipeline.layers import LAYERS, run_layer
from etr_assets.sources.fetch import fetch_day
from etr_assets.sources.raw_zone import local_raw_zone
from etr_assets.tables.entities import LANDING_CUSTOMERS
from etr_assets_tests.sources.clients import bnpl_client

DAYS = [dt.date(2024, 1, 20), dt.date(2024, 2, 10)]


@pytest.mark.slow  # 21 s: two days through bronze and landing
def test_an_scd2_step_reports_the_versions_it_wrote_and_the_rows_count_star_returns(lake, settings, api):
    raw = local_raw_zone(settings.raw_root)
    client = bnpl_client(api.url, api.config.token, page_size=500)
    table = LANDING_CUSTOMERS.qualified(settings.catalog)

    def load(day: dt.date) -> dict[str, object]:
        fetch_day(client, raw, "customers", day)
        for layer in ("bronze/bnpl_customers_raw", "landing/customers"):
            finished = run_layer(lake, settings.catalog, lambda: raw, LAYERS[layer].request([day.isoformat()]), "run")
        return finished.figures

    first = load(DAYS[0])
    assert first["versions_inserted"] > 0 and first["versions_updated"] == 0
    assert first["rows_written"] == first["versions_inserted"]  # a first load wrote every version
    assert first["dagster/row_count"] == first["table_rows"] == lake.sql(f"SELECT count(*) FROM {table}").first()[0]

    second = load(DAYS[1])
    assert second["versions_updated"] > 0  # versions closed: rows deleted from their files by the MERGE
    assert second["rows_written"] == second["versions_inserted"] + second["versions_updated"]
    rows = lake.sql(f"SELECT count(*) FROM {table}").first()[0]
    assert second["dagster/row_count"] == second["table_rows"] == rows
    assert rows == first["dagster/row_count"] + second["versions_inserted"]
    summary = load_table(settings, LANDING_CUSTOMERS).current_snapshot().summary.additional_properties
    assert int(summary["total-position-deletes"]) > 0  # the count had deletes to apply
