"""The import structure has no arrow pointing back up and no circle: the layers below, in order, each import only
their own and those under them; the library (`lake/`, `sources/`) knows no pipeline, no Dagster layer and no table of
this project; `defs/` never imports `definitions.py`; nothing is hidden in a deferred import (this test reads every
import, top level or inside a function)."""

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


REPO = PACKAGE.parent
# Lowest first. The last: what drives Dagster from outside (the `etr` command, its runs, the instance it prepares).
LAYERS = (
    ("errors",),
    ("settings", "run_days"),
    ("sources",),
    ("lake",),
    ("tables",),
    ("pipeline",),
    ("remote",),
    ("defs",),
    ("definitions",),
    ("instance", "run_progress", "run_request", "cli"),
)


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(REPO).with_suffix("").parts)
    return name.removesuffix(".__init__")


def internal_imports(folder: Path) -> dict[str, set[str]]:
    """{module: the modules of the same package it imports}, each import resolved to the module holding the name."""
    modules = {module_name(path): path for path in folder.rglob("*.py")}

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    return {
        name: {m for i in imports_of(path) if (m := owner(i)) is not None and m != name}
        for name, path in modules.items()
    }


def layer_of(module: str) -> int:
    part = module.split(".")[1] if "." in module else ""
    return next(i for i, layer in enumerate(LAYERS) if part in layer) if part else -1


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import graph's strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while (popped := stack.pop()) != module:
                component.append(popped)
            if component:
                found.append(sorted([module, *component]))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_import_runs_up_the_layers():
    graph = internal_imports(PACKAGE)
    assert {layer_of(m) for m in graph} >= set(range(len(LAYERS))), "a layer names a module that is gone"
    upward = {f"{m} -> {i}" for m, imported in graph.items() for i in imported if layer_of(i) > layer_of(m)}
    assert sorted(upward) == []


def test_no_import_circle_in_the_package_or_the_benchmarks():
    assert circles(internal_imports(PACKAGE)) == []
    assert circles(internal_imports(REPO / "bench")) == []


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
    """`except EtrError` catches whatever the package raises on purpose, and each is defined in errors.py. A private
    error (named `_...`) never leaves its module and is exempt."""
    errors = {
        f"{info.name}.{name}": value
        for info in pkgutil.walk_packages(etr_assets.__path__, "etr_assets.")
        for name, value in vars(importlib.import_module(info.name)).items()
        if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == info.name
    }
    assert len(errors) > 10  # the walk found the package's errors
    assert [name for name, error in errors.items() if not issubclass(error, EtrError) and "._" not in name] == []
    # One hierarchy, in one module: a reader finds every error the package raises in errors.py.
    assert [name for name in errors if not name.startswith("etr_assets.errors.") and "._" not in name] == []
