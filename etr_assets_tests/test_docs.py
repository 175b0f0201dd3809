"""The documentation: a short README, every setting documented, links that resolve, CI running the README's command."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SETTINGS_PAGE = ROOT / "docs" / "production.md"
MAX_README_LINES = 200
MAX_BENCHMARKS_LINES = 400  # a page of the present: earlier runs live in its git history
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def markdown_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def without_code_blocks(text: str) -> str:
    """The text outside fenced code blocks."""
    return re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.MULTILINE | re.DOTALL)


def without_code(text: str) -> str:
    """The text outside fenced code blocks and inline code spans (where `[x](y)` is not a link)."""
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", without_code_blocks(text), flags=re.DOTALL)


def links(text: str) -> list[str]:
    """Targets of inline links and images: `[text](target)` and `![alt](target "title")`."""
    return [m.group(1) for m in LINK.finditer(without_code(text))]


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").replace("*", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a markdown page, with GitHub's -1, -2 suffixes for repeated headings."""
    seen: dict[str, int] = {}
    result = set()
    for line in without_code_blocks(page.read_text()).splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = github_slug(match.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def test_github_slug_follows_github():
    assert github_slug("Raw zone, markers and retries") == "raw-zone-markers-and-retries"
    assert github_slug("Write-audit-publish and blocking checks") == "write-audit-publish-and-blocking-checks"
    assert (
        github_slug("2. SCD2: one MERGE against requirement R2's four statements (`scd2`)")
        == "2-scd2-one-merge-against-requirement-r2s-four-statements-scd2"
    )
    assert links("[a](x.md) `[b](y.md)` ![c](img/c.png)\n```\n[d](z.md)\n```\n") == ["x.md", "img/c.png"]


def test_every_setting_read_by_the_code_is_documented():
    page = SETTINGS_PAGE.read_text()
    code = "\n".join(p.read_text() for p in (ROOT / "etr_assets").rglob("*.py")) + (ROOT / "dev").read_text()
    variables = set(re.findall(r"\b(ETR_[A-Z_]+)\b", code))
    assert variables, "expected ETR_* settings in the code"
    assert sorted(v for v in variables if f"`{v}`" not in page) == []
    assert "## Settings" in page or "### Settings" in page
    readme = (ROOT / "README.md").read_text()
    assert f"docs/{SETTINGS_PAGE.name}#settings" in readme, "the README should point at the settings table"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    quick_start = readme.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in quick_start.strip().splitlines()]
    assert commands == ["./dev demo", "./dev test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./dev test" in ci.splitlines()[-1]


def test_readme_is_short_and_links_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= MAX_README_LINES
    read_more = readme.split("## Read more", 1)[1]
    linked = {target.split("#")[0] for target in links(read_more)}
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert sorted(pages - linked) == []
    assert "./dev test --fast" in readme.split("## Tests", 1)[1]


def test_the_benchmarks_page_states_the_present_in_a_readable_length():
    assert len((ROOT / "docs" / "benchmarks.md").read_text().splitlines()) <= MAX_BENCHMARKS_LINES


@pytest.mark.parametrize("page", markdown_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path):
    broken = []
    for target in links(page.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.IGNORECASE):  # https:, mailto:, ...
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() or not linked.is_relative_to(ROOT):
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.relative_to(ROOT)}")
    assert broken == []


# Documents and folders that do not exist in this repository, and whether case matters (docs/stack.md exists);
# split so this file does not match itself.
STALE = (("STACK" + ".md", True), ("../" + "shared", False), ("DESIGN" + ".md", True), ("seed" + " 00", False))


def test_no_file_mentions_documents_that_do_not_exist():
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"not a git checkout: {error}")
    found = []
    for name in filter(None, listed.decode().split("\0")):
        path = ROOT / name
        if not path.is_file():  # deleted in the working tree
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        found += [f"{name}: {s}" for s, case in STALE if (s in text if case else s.lower() in text.lower())]
    assert found == []
