"""`./dev` trusts no jar it did not check: each jar's sha256 against etr_assets/conf/jars.sha256."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

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
