"""`etr draft-source`: a declaration drafted from one sample response parses as printed, with the records' selector,
the columns' types and paths, and the key the sample suggests; a sample it cannot use is one line naming the file."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from etr_assets.cli import main
from etr_assets.errors import DraftError
from etr_assets.sources.declaration import ResourceKind, SourceDeclaration, load_declaration
from etr_assets.sources.draft import draft_source
from etr_assets.sources.synthetic_stores import StoresConfig, encode_cursor, stores_as_of
from etr_assets.tables.declared import OBSERVED_AT, derive

BNPL_LIKE = {
    "data": [
        {
            "transaction_id": 1,
            "customer_id": 100001,
            "amount": "12.50",
            "instalments": 3,
            "payment_method": None,
            "status": "APPROVED",
            "transaction_date": "2025-01-01",
            "created_at": "2025-01-01T10:00:00Z",
            "updated_at": "2025-01-01T10:05:00.123+08:00",
        },
        {
            "transaction_id": 2,
            "customer_id": 100001,
            "amount": "99.00",
            "instalments": 6,
            "payment_method": "CARD",
            "status": "PENDING",
            "transaction_date": "2025-01-01",
            "created_at": "2025-01-01T11:00:00Z",
            "updated_at": "2025-01-01 11:00:00",
        },
    ],
    "next_page": 2,
}


def drafted(tmp_path: Path, sample: object, source: str, resource: str, path: str | None = None) -> tuple[str, Path]:
    """The draft's text, written as a component file."""
    sample_file = tmp_path / "sample.json"
    sample_file.write_text(json.dumps(sample))
    text = draft_source(str(sample_file), source, resource, path=path)
    component = tmp_path / source / "defs.yaml"
    component.parent.mkdir(exist_ok=True)
    component.write_text(text)
    return text, component


def columns(declaration: SourceDeclaration) -> dict[str, tuple[str, tuple[str, ...], bool]]:
    """Each column's (type, path, required)."""
    [resource] = declaration.resources
    return {c.name: (c.type, c.path, c.required) for c in resource.columns}


def test_a_bnpl_like_sample_drafts_entities_with_the_id_key_and_the_update_time_as_sequence(tmp_path):
    text, component = drafted(tmp_path, BNPL_LIKE, "shop", "transactions", "/v1/transactions")
    declaration = load_declaration(component)  # as printed: the TODOs left as they are
    [resource] = declaration.resources
    assert declaration.name == "shop" and declaration.client.data_selector == ("data",)
    assert declaration.client.paginator.type == "single_page" and declaration.client.auth.type == "none"
    assert declaration.client.base_url.variable == "SHOP_API_URL"
    assert resource.path == "/v1/transactions" and resource.day_param is None
    assert resource.kind == ResourceKind.ENTITIES and resource.key == "transaction_id"
    assert resource.sequence == "updated_at"  # a timestamp with an offset and one with a space both read as such
    assert columns(declaration) == {
        "transaction_id": ("bigint", (), True),
        "customer_id": ("bigint", (), True),  # an id, but not unique: not the key
        "amount": ("string", (), True),  # decimal text stays text
        "instalments": ("bigint", (), True),
        "payment_method": ("string", (), False),  # null in one record: not required
        "status": ("string", (), True),
        "transaction_date": ("date", (), True),
        "created_at": ("timestamp", (), True),
        "updated_at": ("timestamp", (), True),
    }
    # What a person must decide is marked, with the sample's hints: the paging field, the events alternative.
    assert "e.g. paginator: {type: cursor, cursor_path: next_page, cursor_param: page}" in text
    assert "day_column: transaction_date" in text and "e.g. subject: customer_id" in text
    assert text.count("# TODO") >= 10
    source = derive(declaration)
    assert {spec.identifier for spec in source.specs} == {
        "bronze.shop_transactions",
        "bronze.quarantine_shop_transactions",
        "landing.shop_transactions",
    }


def test_the_draft_turned_into_events_as_its_todo_says_parses(tmp_path):
    text, component = drafted(tmp_path, BNPL_LIKE, "shop", "transactions")
    events = (
        text.replace("      kind: entities\n", "      kind: events\n      day_column: transaction_date\n")
        .replace("      mode: full\n", "")
        .replace("      sequence: updated_at", "      # sequence: updated_at")
        .replace('        # day: {param: date, format: "%Y-%m-%d"}', '        day: {param: date, format: "%Y-%m-%d"}')
        .replace("      # checks:\n      #   - ", "      checks:\n        - ")
    )
    component.write_text(events)
    [resource] = load_declaration(component).resources
    assert resource.kind == ResourceKind.EVENTS and resource.day_column == "transaction_date"
    assert resource.day_value(dt.date(2025, 1, 31)) == "2025-01-31" and resource.path == "/transactions"
    assert [c.sql for c in resource.checks] == ["transaction_id > 0"]


def test_a_stores_like_sample_finds_nested_records_and_flattens_nested_fields_into_paths(tmp_path):
    day = dt.date(2025, 1, 1)
    items = stores_as_of(StoresConfig(), day)[:5]  # what the synthetic stores API serves
    sample = {"result": {"items": items, "next_cursor": encode_cursor("stores", day, 5)}}
    text, component = drafted(tmp_path, sample, "stores", "stores", "/api/v2/stores")
    declaration = load_declaration(component)
    [resource] = declaration.resources
    assert declaration.client.data_selector == ("result", "items")
    assert resource.key == "store_id" and resource.sequence is None  # no update time in the sample
    assert columns(declaration) == {
        "store_id": ("bigint", (), True),
        "name": ("string", (), True),
        "address_city": ("string", ("address", "city"), True),
        "address_country": ("string", ("address", "country"), True),
        "format": ("string", (), True),
        "opened_on": ("date", (), True),
    }
    assert "e.g. paginator: {type: cursor, cursor_path: result.next_cursor, cursor_param: cursor}" in text
    history = derive(declaration).feeds["stores"].landing
    assert history.identifier == "landing.stores_stores" and history.scd2.sequence == OBSERVED_AT.name


def test_a_top_level_array_has_no_selector_and_every_level_of_nesting_becomes_a_column(tmp_path):
    sample = [
        {"id": 7, "shopId": 3, "score": 1, "active": True, "geo": {"point": {"lat": 3.1, "lng": 101}}, "tags": ["a"]},
        {"id": 8, "shopId": 3, "score": 2.5, "active": False, "geo": {"point": {"lat": 3.2, "lng": 101.5}}},
        {"id": 9, "shopId": 4, "score": None, "active": True, "geo": None, "tags": [], "2fa": True},
    ]
    text, component = drafted(tmp_path, sample, "shop", "items")
    declaration = load_declaration(component)
    [resource] = declaration.resources
    assert declaration.client.data_selector == () and "\n    data_selector:" not in text
    assert resource.key == "id" and resource.path == "/items"
    assert columns(declaration) == {
        "id": ("bigint", (), True),
        "shop_id": ("bigint", ("shopId",), True),  # camelCase named in snake_case, read by its key
        "score": ("double", (), False),  # integers and fractions: double
        "active": ("boolean", (), True),
        "geo_point_lat": ("double", ("geo", "point", "lat"), False),  # absent where geo is null
        "geo_point_lng": ("double", ("geo", "point", "lng"), False),
        "tags": ("string", (), False),  # a list: its JSON text
    }
    assert '"2fa" has a key no path can name' in text


def test_the_key_prefers_the_resources_own_id_and_is_required_even_when_only_a_guess(tmp_path):
    sample = {"items": [{"shop_id": 1, "order_id": 10}, {"shop_id": 1, "order_id": 11}]}
    assert load_declaration(drafted(tmp_path, sample, "shop", "orders")[1]).resources[0].key == "order_id"
    guess = {"items": [{"code": "A", "label": None}, {"code": "A", "label": "x"}]}  # nothing unique
    text, component = drafted(tmp_path, guess, "shop", "codes")
    [resource] = load_declaration(component).resources
    assert resource.key == "code" and "TODO no id-like column unique and never null" in text


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "not JSON: Expecting property name enclosed in double quotes (line 1, column 2)"),
        ('{"data": [1, 2], "meta": {"links": []}}', "no records found"),
        ('{"rate": NaN}', "not JSON: NaN is not a JSON value"),
    ],
)
def test_a_sample_it_cannot_use_is_one_line_naming_the_file_and_exit_2(tmp_path, capsys, content, expected):
    sample = tmp_path / "response.json"
    sample.write_text(content)
    assert main(["draft-source", "shop", "orders", str(sample)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.endswith("\n") and "\n" not in err[:-1]
    assert err.startswith(f"etr draft-source: {sample}: {expected}"), err


def test_the_command_prints_the_draft_and_reads_standard_input(tmp_path, capsys, monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(BNPL_LIKE)))
    assert main(["draft-source", "shop", "transactions", "-", "--path", "/v1/transactions"]) == 0
    out, err = capsys.readouterr()
    component = tmp_path / "defs.yaml"
    component.write_text(out)
    assert err == "" and load_declaration(component).resources[0].path == "/v1/transactions"
    assert "from standard input: 2 records at data" in out
    with pytest.raises(DraftError, match="NAME 'Shop' is not a lower-case identifier"):
        draft_source("-", "Shop", "transactions")
