"""The README documents every setting, and CI runs the README's test command."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_setting_read_by_the_code_is_documented():
    readme = (ROOT / "README.md").read_text()
    code = "\n".join(p.read_text() for p in (ROOT / "etr_assets").rglob("*.py")) + (ROOT / "dev").read_text()
    variables = set(re.findall(r"\b(ETR_[A-Z_]+)\b", code))
    assert variables, "expected ETR_* settings in the code"
    assert sorted(v for v in variables if f"`{v}`" not in readme) == []


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    quick_start = readme.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in quick_start.strip().splitlines()]
    assert commands == ["./dev demo", "./dev test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./dev test" in ci.splitlines()[-1]
