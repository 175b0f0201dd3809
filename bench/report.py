"""Write a benchmark's result: `<name>.json` (everything), `<name>.md` (the tables) and PNG charts when
matplotlib is installed (the `bench` extra; without it the charts are skipped and the JSON says so)."""

from __future__ import annotations

import json
from pathlib import Path


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value).replace("|", "\\|")


def markdown_table(rows: list[dict], columns: list[str] | None = None) -> str:
    if not rows:
        return "(no rows)\n"
    columns = columns or list(dict.fromkeys(key for row in rows for key in row))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def render_markdown(result: dict) -> str:
    machine = result["machine"]
    parts = [
        f"# {result['title']}\n",
        f"Command: `{result['command']}`\n",
        f"Data: {result['data_description']}\n",
        (
            f"Machine: {machine['cores']} cores, {machine['memory_gib']} GiB, {machine['platform']}, Python "
            f"{machine['python']}; load average (1, 5, 15 min) {machine['load_average_start']} at start, "
            f"{machine['load_average_end']} at end (a shared machine). Wall time of the whole run: "
            f"{result['seconds']:.0f} s.\n"
        ),
        f"Counters: {result['counters_description']}\n",
    ]
    for table in result["tables"]:
        parts.append(f"## {table['title']}\n")
        parts.append(markdown_table(table["rows"], table.get("columns")))
    if result["ratios"]:
        parts.append("## Ratios\n")
        parts.append(markdown_table([{"ratio": k, "value": v} for k, v in result["ratios"].items()]))
    for chart in result.get("charts", []):
        parts.append(f"![{chart['title']}]({chart['file']})\n")
    if result.get("notes"):
        parts.append("## Notes\n")
        parts.extend(f"- {note}\n" for note in result["notes"])
    return "\n".join(parts)


def draw_chart(chart: dict, path: Path) -> bool:
    """A grouped horizontal bar chart: one group per label, one bar per series. False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    labels = chart["labels"]
    # A method the run skipped (no value at any label) gets neither a bar nor a legend entry; each keeps its colour.
    series = [(f"C{n}", name, values) for n, (name, values) in enumerate(chart["series"].items()) if any(values)]
    height = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(9, 0.5 + 0.45 * len(labels) * max(1, len(series)) ** 0.5 + 0.6))
    for index, (colour, name, values) in enumerate(series):
        positions = [i + index * height for i in range(len(labels))]
        ax.barh(positions, [v or 0 for v in values], height=height, label=name, color=colour)
    ax.set_yticks([i + height * (len(series) - 1) / 2 for i in range(len(labels))], labels)
    ax.invert_yaxis()
    ax.set_xlabel(chart["xlabel"])
    if chart.get("log"):
        ax.set_xscale("log")
    ax.set_title(chart["title"])
    if len(series) > 1:
        ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def write(result: dict, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    name = result["benchmark"]
    drawn = []
    for chart in result.get("charts", []):
        if draw_chart(chart, out_dir / chart["file"]):
            drawn.append(chart)
    if len(drawn) < len(result.get("charts", [])):
        result.setdefault("notes", []).append("charts skipped: matplotlib is not installed (pip install -e '.[bench]')")
    result["charts"] = drawn
    json_path, md_path = out_dir / f"{name}.json", out_dir / f"{name}.md"
    json_path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    md_path.write_text(render_markdown(result))
    return [json_path, md_path] + [out_dir / c["file"] for c in drawn]
