"""The bootstrap_lake job creates every table of the specs, and a second run changes nothing."""

from __future__ import annotations

import pytest
from dagster import DagsterInstance

from etr_assets.definitions import build_definitions
from etr_assets.lake.metadata import table_stats
from etr_assets.tables import ALL_SPECS


def run_bootstrap(defs):
    result = defs.get_job_def("bootstrap_lake").execute_in_process(instance=DagsterInstance.ephemeral())
    assert result.success
    [materialized] = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    return result.output_for_node("create_databases_and_tables"), {
        k: v.value for k, v in materialized.event_specific_data.metadata.items()
    }


def test_bootstrap_job_creates_every_table_then_nothing(settings, lake):
    defs = build_definitions(settings)
    assert all(not table_stats(settings, spec).exists for spec in ALL_SPECS)

    _, first = run_bootstrap(defs)
    assert first["tables_created"] == len(ALL_SPECS) and first["tables_existing"] == 0
    assert first["databases_created"] == len({s.namespace for s in ALL_SPECS})
    for spec in ALL_SPECS:
        stats = table_stats(settings, spec)
        assert stats.exists and stats.rows == 0, spec.identifier
        columns = lake.table(spec.qualified(settings.catalog)).columns
        assert columns == spec.column_names, spec.identifier

    _, second = run_bootstrap(defs)
    assert second["tables_created"] == 0 and second["databases_created"] == 0
    assert second["tables_existing"] == len(ALL_SPECS) and second["created"] == "nothing"


@pytest.mark.slow  # every table created on moto's Glue and S3, then again: over 10 s
def test_bootstrap_job_on_glue_needs_no_spark(aws_settings):
    from dataclasses import replace

    settings = replace(aws_settings, api_url="http://127.0.0.1:9/unused")  # the aws profile names a real API
    defs = build_definitions(settings)
    _, first = run_bootstrap(defs)
    assert first["tables_created"] == len(ALL_SPECS) and first["catalog"] == "glue"
    assert all(table_stats(settings, spec).exists for spec in ALL_SPECS)
    _, second = run_bootstrap(defs)
    assert second["tables_created"] == 0 and second["tables_existing"] == len(ALL_SPECS)
