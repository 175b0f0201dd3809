"""The import structure has no arrow pointing back up: the library (`lake/`, `sources/`) knows no pipeline, no
Dagster layer and no table of this project; `defs/` never imports `definitions.py`; nothing is hidden in a deferred
import (this test reads every import, top level or inside a function)."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import etr_assets
from etr_assets.errors import EtrError

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
    assert sorted(i for i in imports_of(PACKAGE / "errors.py") if i.startswith("etr_assets")) == []


def test_the_dagster_layer_never_imports_the_definitions_back():
    assert offending("defs", ("etr_assets.definitions", "etr_assets.instance", "etr_assets.cli")) == {}


def test_the_pipeline_and_the_tables_know_no_dagster():
    dagster = ("dagster", "etr_assets.defs", "etr_assets.definitions")
    assert offending("pipeline", dagster) == {} and offending("tables", dagster + ("etr_assets.pipeline",)) == {}


def test_every_project_error_derives_from_etr_error():
    """`except EtrError` catches whatever the package raises on purpose. A private error (named `_...`) never
    leaves its module and is exempt."""
    errors = {
        f"{info.name}.{name}": value
        for info in pkgutil.walk_packages(etr_assets.__path__, "etr_assets.")
        for name, value in vars(importlib.import_module(info.name)).items()
        if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == info.name
    }
    assert len(errors) > 10  # the walk found the package's errors
    assert [name for name, error in errors.items() if not issubclass(error, EtrError) and "._" not in name] == []
