"""A source declaration: what it derives (tables, feeds), and every mistake as one line naming file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from etr_assets.errors import DeclarationError
from etr_assets.lake.feeds import EntityFeed, FeedMode
from etr_assets.sources.declaration import load_declaration
from etr_assets.tables.declared import OBSERVED_AT, SHIPPED_SOURCES, derive, load_sources

STORES = Path(__file__).parent / "declared" / "stores" / "defs.yaml"

MINIMAL = """\
type: etr_assets.defs.api_source.ApiSource
attributes:
  name: shop
  client:
    base_url: https://shop.example.test
    auth: {type: bearer, token: {env: SHOP_TOKEN}}
    paginator: {type: offset, limit_param: limit}
    data_selector: result.items
    page_size: {param: limit, value: 100}
  resources:
    - name: orders
      endpoint: {path: /orders, day: {param: day}}
      kind: events
      day_column: day
      key: id
      columns:
        - {name: id, type: bigint, required: true}
        - {name: day, type: date, required: true}
        - {name: city, type: string, path: address.city}
    - name: shops
      endpoint: {path: /shops}
      kind: entities
      key: shop_id
      columns:
        - {name: shop_id, type: bigint, required: true}
        - {name: name, type: string}
"""


def declare(folder: Path, text: str, name: str = "shop") -> Path:
    path = folder / name / "defs.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def mistake(tmp_path: Path, old: str, new: str) -> str:
    assert old in MINIMAL, old
    path = declare(tmp_path, MINIMAL.replace(old, new))
    with pytest.raises(DeclarationError) as raised:
        load_sources((tmp_path,))
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"{path}:")
    return message.removeprefix(f"{path}:")


def test_a_minimal_declaration_derives_bronze_quarantine_and_an_scd2_history(tmp_path):
    [source] = load_sources((declare(tmp_path, MINIMAL).parent.parent,))
    orders, shops = source.feeds["orders"], source.feeds["shops"]
    assert (
        orders.bronze.identifier == "bronze.shop_orders"
        and orders.quarantine.identifier == "bronze.quarantine_shop_orders"
    )
    assert orders.bronze.partition_by == ("days(day)",) and orders.record_day_column == "day"
    assert orders.bronze.column("city").path == ("address", "city")
    assert isinstance(shops, EntityFeed) and shops.mode == FeedMode.FULL
    assert shops.landing.identifier == "landing.shop_shops"
    # No update time in the source: versions are ordered by the snapshot's own time, a column of the history only.
    assert shops.landing.scd2.sequence == OBSERVED_AT.name and OBSERVED_AT.name not in shops.raw.bronze.column_names
    assert shops.landing.scd2.tracked == ("name",)
    assert source.declaration.client.data_selector == ("result", "items")


def test_the_shipped_bnpl_declaration_keeps_every_table_name_of_the_lake():
    [bnpl] = [s for s in load_sources((SHIPPED_SOURCES,)) if s.name == "bnpl"]
    assert {spec.identifier for spec in bnpl.specs} == {
        "bronze.bnpl_transactions_raw",
        "bronze.bnpl_customers_raw",
        "bronze.bnpl_merchants_raw",
        "bronze.quarantine_transactions",
        "bronze.quarantine_customers",
        "bronze.quarantine_merchants",
        "landing.customers",
        "landing.merchants",
    }
    customers = bnpl.feeds["customers"].landing
    assert customers.column("credit_limit").type == "decimal(12,2)" and customers.scd2.sequence == "updated_at"


def test_the_test_suites_second_api_declares_entities_without_update_times_and_events():
    source = derive(load_declaration(STORES))
    assert source.feeds["stores"].landing.scd2.sequence == OBSERVED_AT.name
    assert source.raw_feed("checkins").bronze.subject_column == "customer_id"


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "{name: day, type: date, required: true}",
            "{name: day, type: dat}",
            "18: .*columns\\[1\\].type: unknown type 'dat'",
        ),
        ("type: bearer", "type: kerberos", "6: attributes.client.auth.type: 'kerberos' is not one of none, bearer"),
        ("{type: offset,", "{type: scroll,", "7: attributes.client.paginator.type: 'scroll' is not one of"),
        ("      key: shop_id", "      key: shop", "23: attributes.resources\\[1\\].key: 'shop' is not a column"),
        ("token: {env: SHOP_TOKEN}", "token: s3cr3t", "6: attributes.client.auth.token: a secret is never written"),
        (
            "      kind: entities",
            "      kind: entities\n      colour: red",
            "23: attributes.resources\\[1\\].colour: unknown",
        ),
        ("      day_column: day\n", "", "11: attributes.resources\\[0\\]: an events resource needs day_column"),
        (
            "{name: city, type: string, path: address.city}",
            "{name: city, type: string, pii: true}",
            "11: attributes.resources\\[0\\]: columns city hold personal data: name the subject",
        ),
        (
            "    page_size: {param: limit, value: 100}\n",
            "",
            "7: attributes.client.paginator: an offset paginator needs",
        ),
        ("    data_selector: result.items", "    synthetic: shop", "8: attributes.client.synthetic: 'shop' is not a"),
        (
            "      key: shop_id\n",
            "      key: shop_id\n      history: {columns: [name]}\n",
            "24: attributes.resources\\[1\\].history: history columns must include shop_id",
        ),
    ],
)
def test_each_mistake_is_one_line_naming_the_file_line_and_field(tmp_path, old, new, expected):
    import re

    assert re.match(expected, mistake(tmp_path, old, new)), mistake(tmp_path, old, new)


def test_two_resources_writing_one_table_name_both_places_and_nothing_loads(tmp_path):
    declare(tmp_path, MINIMAL)
    other = (
        MINIMAL.replace("name: shop\n", "name: shop2\n")
        .replace("name: orders", "name: sales")
        .replace("      day_column: day\n", "      day_column: day\n      bronze: {table: shop_orders}\n")
    )
    declare(tmp_path, other, "shop2")
    with pytest.raises(
        DeclarationError, match=r"shop2/defs.yaml:\d+: .*writes table bronze.shop_orders, which .*shop/defs.yaml"
    ):
        load_sources((tmp_path,))


def test_two_sources_of_one_name_are_refused(tmp_path):
    declare(tmp_path, MINIMAL)
    declare(tmp_path, MINIMAL, "copy")
    with pytest.raises(DeclarationError, match="source shop is declared twice"):
        load_sources((tmp_path,))


@pytest.mark.slow
def test_dg_check_defs_reports_the_same_line(tmp_path):
    """`dg check defs` on the project with a folder of declarations holding a mistake: it fails with the line."""
    import os
    import subprocess
    import sys

    path = declare(tmp_path, MINIMAL.replace("{name: day, type: date, required: true}", "{name: day, type: dat}"))
    with pytest.raises(DeclarationError) as raised:
        load_sources((tmp_path,))
    dg = Path(sys.executable).parent / "dg"
    env = {**os.environ, "ETR_SOURCE_DIRS": str(tmp_path), "PYTHONWARNINGS": "ignore"}
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([dg, "check", "defs"], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and str(raised.value) in done.stdout + done.stderr
    assert str(raised.value).startswith(f"{path}:18: ")
