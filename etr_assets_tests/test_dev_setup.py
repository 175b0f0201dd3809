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

    yesterday = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)
    assert demo_range().stdout.split() == [str(yesterday - dt.timedelta(days=2)), str(yesterday)]
    assert demo_range("5", "2025-01-10").stdout.split() == ["2025-01-06", "2025-01-10"]
    assert demo_range("1", "2025-03-01").stdout.split() == ["2025-03-01", "2025-03-01"]
    bad_day, bad_count = demo_range("3", "2025-13-40"), demo_range("three")
    assert bad_day.returncode != 0 and "LAST_DAY '2025-13-40' is not a date" in bad_day.stderr
    assert bad_count.returncode != 0 and "DAYS 'three' is not a positive number" in bad_count.stderr
