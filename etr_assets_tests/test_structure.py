"""The import structure has no arrow pointing back up: the library (`lake/`, `sources/`) knows no pipeline, no
Dagster layer and no table of this project; `defs/` never imports `definitions.py`; nothing is hidden in a deferred
import (this test reads every import, top level or inside a function)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "etr_assets"
ABOVE_THE_LIBRARY = (
    "etr_assets.tables",
    "etr_assets.pipeline",
    "etr_assets.defs",
    "etr_assets.definitions",
    "etr_assets.remote",
    "etr_assets.cli",
    "etr_assets.instance",
)


def imports_of(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def offending(folder: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    result = {}
    for path in sorted((PACKAGE / folder).rglob("*.py")):
        bad = sorted(i for i in imports_of(path) if i.startswith(forbidden))
        if bad:
            result[str(path.relative_to(PACKAGE))] = bad
    return result


def test_the_library_imports_nothing_above_it():
    assert offending("lake", ABOVE_THE_LIBRARY) == {}
    assert offending("sources", ABOVE_THE_LIBRARY + ("etr_assets.lake",)) == {}


def test_the_dagster_layer_never_imports_the_definitions_back():
    assert offending("defs", ("etr_assets.definitions", "etr_assets.instance", "etr_assets.cli")) == {}


def test_the_pipeline_and_the_tables_know_no_dagster():
    dagster = ("dagster", "etr_assets.defs", "etr_assets.definitions")
    assert offending("pipeline", dagster) == {} and offending("tables", dagster + ("etr_assets.pipeline",)) == {}
