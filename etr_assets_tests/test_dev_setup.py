"""`./dev` trusts no jar it did not check (each jar's sha256 against etr_assets/conf/jars.sha256) and no Python package
(uv.lock: every file's hash); its helpers for the demo's days."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def verify(jar: Path, name: str | None = None) -> subprocess.CompletedProcess:
    """Run dev's own `verify_jar` (its definition cut out of the script, with what it needs)."""
    script = (REPO / "dev").read_text()
    needed = [line for line in script.splitlines() if line.startswith(("die()", "ROOT=", "JAR_SUMS="))]
    body = script[script.index("verify_jar() {") :]
    body = body[: body.index("\n}\n") + 3]
    program = "\n".join(
        [
            f"cd {REPO}",
            "ROOT=$PWD",
            *[line for line in needed if not line.startswith("ROOT=")],
            body,
            f"verify_jar {jar} {name or ''}",
        ]
    )
    return subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=60)


def test_the_pinned_iceberg_jar_passes_and_a_tampered_copy_fails_naming_both_hashes(tmp_path):
    from etr_assets.lake.session import iceberg_runtime_jar

    jar = Path(iceberg_runtime_jar())
    assert verify(jar).returncode == 0

    tampered = tmp_path / jar.name
    shutil.copyfile(jar, tampered)
    with tampered.open("ab") as handle:
        handle.write(b"\0")
    failed = verify(tampered)
    assert failed.returncode == 1
    (line,) = failed.stderr.splitlines()
    assert line.startswith(f"dev: {tampered}: sha256 ") and "expected c562d482" in line and "Delete it" in line

    unknown = verify(jar, "some-other.jar")
    assert unknown.returncode == 1 and "some-other.jar has no sha256" in unknown.stderr


def demo_range(*args: str) -> subprocess.CompletedProcess:
    """Run dev's own `demo_range` (its definition cut out of the script)."""
    script = (REPO / "dev").read_text()
    die = next(line for line in script.splitlines() if line.startswith("die()"))
    body = script[script.index("demo_range() {") :]
    body = body[: body.index("\n}\n") + 3]
    program = "\n".join([die, body, "demo_range " + " ".join(args)])
    return subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=60)


def test_the_demo_runs_the_most_recent_complete_days_unless_told_otherwise():
    import datetime as dt

    def last_three(yesterday: dt.date) -> list[str]:
        return [str(yesterday - dt.timedelta(days=2)), str(yesterday)]

    before = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)
    shown = demo_range().stdout.split()
    assert shown in (last_three(before), last_three(dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)))  # midnight
    assert demo_range("5", "2025-01-10").stdout.split() == ["2025-01-06", "2025-01-10"]
    assert demo_range("1", "2025-03-01").stdout.split() == ["2025-03-01", "2025-03-01"]
    bad_day, bad_count = demo_range("3", "2025-13-40"), demo_range("three")
    assert bad_day.returncode != 0 and "LAST_DAY '2025-13-40' is not a date" in bad_day.stderr
    assert bad_count.returncode != 0 and "DAYS 'three' is not a positive number" in bad_count.stderr


def dev_function(name: str, call: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run dev's own function `name` (its definition cut out of the script), then `call`, in `env`."""
    script = (REPO / "dev").read_text()
    body = script[script.index(f"{name}() {{") :]
    body = body[: body.index("\n}\n") + 3]
    return subprocess.run(["bash", "-c", f"{body}\n{call}"], capture_output=True, text=True, timeout=60, env=env)


def test_the_demos_partitions_start_at_its_first_day_unless_etr_start_date_is_set(tmp_path):
    """A fresh demo's partitions are its own days (the UI's asset pages filled, not 3 of ~700); a later demo of
    earlier days moves the start back, never forward; a set ETR_START_DATE (a deployment's) stands and nothing is
    recorded; ./dev ui reads the recorded day, so its partitions, `etr run`'s and the demo's agree."""
    import os

    home = tmp_path / "etr"
    env = {k: v for k, v in os.environ.items() if k != "ETR_START_DATE"} | {"ETR_HOME": str(home)}
    recorded = home / "start_date"

    assert dev_function("demo_start", "demo_start 2026-11-23", env).stdout == "2026-11-23\n"
    assert recorded.read_text() == "2026-11-23\n"
    assert dev_function("demo_start", "demo_start 2026-11-24", env).stdout == "2026-11-23\n"  # never forward
    assert dev_function("demo_start", "demo_start 2025-01-06", env).stdout == "2025-01-06\n"  # earlier days: back
    assert recorded.read_text() == "2025-01-06\n"
    ui = 'use_recorded_start; echo "${ETR_START_DATE:-unset}"'
    assert dev_function("use_recorded_start", ui, env).stdout == "2025-01-06\n"

    deployment = env | {"ETR_START_DATE": "2024-06-01"}
    assert dev_function("demo_start", "demo_start 2026-11-23", deployment).stdout == "2024-06-01\n"
    assert recorded.read_text() == "2025-01-06\n"  # untouched
    assert dev_function("use_recorded_start", ui, deployment).stdout == "2024-06-01\n"
    recorded.unlink()  # no demo ran here: the setting's default
    assert dev_function("use_recorded_start", ui, env).stdout == "unset\n"


# The lock: uv.lock pins every Python package, with every file's hash; ./dev installs .venv from it (uv sync).

LOCK = REPO / "uv.lock"
UV = Path(sys.executable).parent / "uv"  # the venv's, at the version uv.lock pins (./dev's ensure_uv)


def locked_packages(python: tuple[int, int], extras: set[str]) -> dict[str, dict]:
    """The packages uv.lock installs for this project with `extras` and its dev group, on CPython `python` and this
    machine's platform: read from the lock's graph alone (markers evaluated here, not by uv). Name -> lock entry."""
    from packaging.markers import Marker, default_environment

    version = "{}.{}".format(*python)
    environment = default_environment() | {
        "python_version": version,
        "python_full_version": f"{version}.0",
        "implementation_version": f"{version}.0",
    }
    entries: dict[str, list[dict]] = {}
    for entry in tomllib.loads(LOCK.read_text())["package"]:
        entries.setdefault(entry["name"], []).append(entry)
    (project,) = entries["etr-assets"]
    wanted = list(project["dependencies"]) + [d for group in project["dev-dependencies"].values() for d in group]
    wanted += [d for extra in extras for d in project["optional-dependencies"][extra]]
    found: dict[str, dict] = {}
    done: set[tuple[str, str]] = set()
    while wanted:
        dependency = wanted.pop()
        if "marker" in dependency and not Marker(dependency["marker"]).evaluate(environment):
            continue
        (entry,) = [e for e in entries[dependency["name"]] if dependency.get("version", e["version"]) == e["version"]]
        found[entry["name"]] = entry
        for extra in [None, *dependency.get("extra", [])]:
            if (entry["name"], extra) not in done:
                done.add((entry["name"], extra))
                more = entry.get("dependencies", []) if extra is None else entry["optional-dependencies"][extra]
                wanted.extend(more)
    return found


def installed_extras() -> set[str]:
    """The extras ./dev syncs into this venv: test always, bench once ./dev bench asked for it."""
    return {"test"} | ({"bench"} if (Path(sys.prefix) / ".etr-bench").exists() else set())


def test_the_lock_pins_every_declared_requirement_and_every_file_by_hash():
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = pyproject["project"]
    lock = tomllib.loads(LOCK.read_text())
    assert lock["requires-python"].replace(" ", "") == project["requires-python"]
    assert set(project["optional-dependencies"]) == {"test", "bench"}

    versions = {(e["name"], e["version"]) for e in lock["package"] if "version" in e}
    declared = [*project["dependencies"], *[r for extra in project["optional-dependencies"].values() for r in extra]]
    declared += [r for group in pyproject["dependency-groups"].values() for r in group]
    for text in declared:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert any(n == name and v in requirement.specifier for n, v in versions), f"{text}: not in uv.lock"
    assert {"uv", "pip"} <= {canonicalize_name(Requirement(r).name) for r in pyproject["dependency-groups"]["dev"]}

    unhashed = []
    for entry in lock["package"]:
        if "registry" not in entry["source"]:
            assert entry["source"] == {"editable": "."}, entry["name"]  # only the project itself, from the work tree
            continue
        files = ([entry["sdist"]] if "sdist" in entry else []) + entry.get("wheels", [])
        if not files or any(not f.get("hash", "").startswith("sha256:") for f in files):
            unhashed.append(entry["name"])
    assert unhashed == []


def test_the_lock_serves_python_3_11_and_3_12_on_this_platform():
    """Every package the project installs has a file for CPython 3.11 and 3.12 here (a wheel these tags take, or
    an sdist); building from source is left to the few that ship no wheel (pyspark), the same on both."""
    from packaging import tags
    from packaging.utils import parse_wheel_filename

    platforms = list(tags.platform_tags())
    built = {}
    for python in ((3, 11), (3, 12)):
        accepted = {*tags.cpython_tags(python, platforms=platforms)}
        accepted |= {*tags.compatible_tags(python, "cp{}{}".format(*python), platforms)}
        packages = locked_packages(python, {"test", "bench"})
        assert {"pyspark", "dagster", "uv", "pip", "pytest", "matplotlib"} <= set(packages)
        without_wheel = set()
        for name, entry in packages.items():
            if name == "etr-assets":
                continue
            wheels = [parse_wheel_filename(w["url"].rsplit("/", 1)[1])[3] for w in entry.get("wheels", [])]
            if not any(accepted & set(wheel_tags) for wheel_tags in wheels):
                assert "sdist" in entry, f"{name} {entry['version']}: no file for CPython {python} on {platforms[0]}"
                without_wheel.add(name)
        built[python] = without_wheel
    assert built[(3, 11)] == built[(3, 12)] == {"pyspark"}


def test_the_venv_holds_exactly_what_the_lock_pins():
    """What `./dev` installed (pip's list: pip freeze --all's) is the lock's set for this Python and the venv's
    extras, version for version, and nothing else; the project itself is editable, from this work tree."""
    import json

    from packaging.utils import canonicalize_name

    listed = json.loads(
        subprocess.run(
            [sys.executable, "-m", "pip", "list", "--format=json"],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
    )
    editable = [(p["name"], p["editable_project_location"]) for p in listed if "editable_project_location" in p]
    assert editable == [("etr_assets", str(REPO))]
    installed = {canonicalize_name(p["name"]): p["version"] for p in listed if "editable_project_location" not in p}
    locked = {
        name: entry["version"]
        for name, entry in locked_packages(sys.version_info[:2], installed_extras()).items()
        if name != "etr-assets"
    }
    refresh = "rm .venv/.etr-installed && ./dev setup (an exact sync to uv.lock)"
    assert {n: v for n, v in installed.items() if locked.get(n) != v} == {}, f"not what uv.lock pins: {refresh}"
    assert sorted(set(locked) - set(installed)) == [], f"missing: {refresh}"


def test_the_lock_agrees_with_pyproject():
    """`uv lock --check`, offline: what `./dev`'s `uv sync --locked` checks before it installs."""
    current = subprocess.run(
        [UV, "lock", "--check", "--offline"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert current.returncode == 0, current.stderr


@pytest.mark.slow  # uv resolves again, from PyPI (index pages a fresh machine's cache lacks): ~15 s
def test_a_pin_changed_without_dev_lock_is_caught_and_named(tmp_path):
    """pyproject.toml changed alone makes uv say what `./dev` looks for to tell the developer to run ./dev lock."""
    assert "needs to be updated" in (REPO / "dev").read_text()
    for name in ("pyproject.toml", "uv.lock", "README.md"):
        shutil.copyfile(REPO / name, tmp_path / name)
    text = (tmp_path / "pyproject.toml").read_text()
    assert "\ndev = [" in text
    (tmp_path / "pyproject.toml").write_text(text.replace("\ndev = [", '\nprobe = ["pytest"]\ndev = [', 1))
    stale = subprocess.run([UV, "lock", "--check"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert stale.returncode != 0 and "needs to be updated" in stale.stderr, stale.stderr
