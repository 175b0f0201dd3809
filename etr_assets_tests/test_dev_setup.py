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
