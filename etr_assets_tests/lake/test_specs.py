"""Table specs: validation, and everything derived from them."""

import pytest

from etr_assets.errors import SpecError
from etr_assets.lake.specs import DEFAULT_PROPERTIES, Column, TableSpec
from etr_assets.tables import ALL_SPECS, personal_data_specs, spec_for
from etr_assets.tables.transactions import BRONZE_TRANSACTIONS, GOLD_DAILY_SUMMARY, SILVER_TRANSACTIONS


def test_the_seed_tables_are_declared():
    assert {s.identifier for s in ALL_SPECS} >= {
        "bronze.bnpl_transactions_raw",
        "silver.bnpl_transactions_clean",
        "gold.bnpl_daily_summary",
        "audit.gdpr_actions",
        "monitoring.data_quality_metrics",
    }


@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda s: s.identifier)
def test_every_table_gets_the_house_properties(spec):
    props = spec.table_properties
    assert "format-version" not in props or spec.format_version  # the profile's, unless the spec pins one
    assert props["write.parquet.compression-codec"] == "zstd"
    assert int(props["write.target-file-size-bytes"]) > 0
    assert int(props["commit.retry.num-retries"]) >= 3
    assert props["write.metadata.delete-after-commit.enabled"] == "true"
    # Daily data is partitioned by day; SCD2 histories by the month a version closed (current versions apart).
    assert (
        spec.partition_by[0].startswith("days(") if spec.scd2 is None else spec.partition_by == ("months(_valid_to)",)
    )


def test_transaction_tables_partition_by_day_of_transaction():
    for spec in (BRONZE_TRANSACTIONS, SILVER_TRANSACTIONS, GOLD_DAILY_SUMMARY):
        assert spec.partition_by == ("days(transaction_date)",)


def test_erasure_list_is_derived_from_personal_data_columns():
    erasable = {s.identifier for s in personal_data_specs()}
    declared = {s.identifier for s in ALL_SPECS if s.subject_column and s.pii_columns}
    assert erasable == declared
    assert erasable >= {"bronze.stores_checkins", "bronze.quarantine_stores_checkins"}  # the suite's second API
    assert erasable >= {
        "bronze.bnpl_transactions_raw",
        "bronze.bnpl_customers_raw",
        "bronze.quarantine_transactions",
        "bronze.quarantine_customers",
        "landing.customers",
        "silver.bnpl_transactions_clean",
        "silver.quarantine_transactions",
        "gold.customer_activity",
        "gold.customer_profiles",
    }
    assert "bronze.bnpl_merchants_raw" not in erasable and "gold.bnpl_daily_summary" not in erasable
    assert SILVER_TRANSACTIONS.pii_columns == ["customer_id"] and SILVER_TRANSACTIONS.subject_column == "customer_id"
    # The audit trail must survive the erasures it records: it holds a keyed hash, not personal data.
    assert not spec_for("audit.gdpr_actions").holds_personal_data


def test_ddl_is_derived_from_the_spec():
    ddl = SILVER_TRANSACTIONS.create_ddl("lake")
    assert ddl.startswith("CREATE TABLE lake.silver.bnpl_transactions_clean (")
    assert "amount decimal(10,2) NOT NULL COMMENT 'Purchase amount'" in ddl
    assert "PARTITIONED BY (days(transaction_date))" in ddl
    assert "'write.parquet.compression-codec' = 'zstd'" in ddl
    assert "LOCALLY ORDERED BY transaction_date, status, customer_id" in SILVER_TRANSACTIONS.write_order_ddl("lake")
    assert set(DEFAULT_PROPERTIES) <= set(SILVER_TRANSACTIONS.table_properties)


def test_spec_overrides_win_over_defaults():
    assert GOLD_DAILY_SUMMARY.target_file_size_bytes == 32 * 1024 * 1024


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"columns": (Column("a", "varchar"),)}, "column 'a' has unsupported type 'varchar'"),
        ({"columns": (Column("a", "int"), Column("a", "int"))}, "duplicate column names ['a', 'a']"),
        ({"partition_by": ("days(missing)",)}, "names unknown column 'missing'"),
        ({"partition_by": ("weeks(a)",)}, "partition transform 'weeks(a)' is not understood"),
        ({"columns": (Column("a", "int", pii=True),)}, "has personal data ['a'] but no subject column"),
        ({"name": "Bad-Name"}, "'Bad-Name' is not a lower-case identifier"),
        ({"write_order": ("zzz",)}, "write order names unknown column 'zzz'"),
    ],
)
def test_malformed_specs_are_refused_with_the_table_and_field_named(kwargs, message):
    base = {"namespace": "x", "name": "t", "description": "d", "columns": (Column("a", "int"),)}
    with pytest.raises(SpecError) as failure:
        TableSpec(**{**base, **kwargs})
    assert message in str(failure.value)
    assert "table spec x." in str(failure.value)


def test_unknown_table_lists_the_known_ones():
    with pytest.raises(KeyError, match="known tables: bronze.bnpl_transactions_raw"):
        spec_for("silver.nope")


def test_scd2_tables_declare_how_their_state_hash_is_computed_and_keep_its_bounds_out_of_manifests():
    from etr_assets.lake.specs import METRICS_COLUMN_PROPERTY, PERSONAL_DATA_METRICS, STATE_HASH_PROPERTY
    from etr_assets.tables.entities import LANDING_CUSTOMERS

    properties = LANDING_CUSTOMERS.table_properties
    expression = LANDING_CUSTOMERS.state_hash_sql
    assert properties[STATE_HASH_PROPERTY] == expression
    # Every tracked column, typed as the table types it and preceded by its NULL marker, in the spec's order.
    tracked = LANDING_CUSTOMERS.scd2.tracked
    assert expression.startswith("xxhash64(") and expression.count(" IS NULL") == len(tracked)
    assert expression.index("`first_name`") < expression.index("`credit_limit` AS decimal(12,2))")
    # A hash of personal values: counts only in manifests, as for the personal columns themselves.
    assert properties[METRICS_COLUMN_PROPERTY.format("_state_hash")] == PERSONAL_DATA_METRICS
    assert SILVER_TRANSACTIONS.state_hash_sql is None
    assert STATE_HASH_PROPERTY not in SILVER_TRANSACTIONS.table_properties
