"""The fleet table: one row per node, worst first; each headline figure as a fraction of the
fleet's median and of its expectation (1.00 is as good; below 1 is worse, for a latency too);
outliers marked. In the terminal, as Markdown, as JSON, and as a heatmap (node x figure) PNG
for many nodes."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from gpuipc_bench.check.figures import Figure
from gpuipc_bench.check.judge import FAIL, Event, fleet_medians


def fleet_rows(by_node: dict[str, list[Figure]], events: list[Event], missing: dict[str, str]) -> list[dict]:
    medians = fleet_medians(by_node)
    outliers = {(e.node, e.figure, e.gpus) for e in events if e.kind == "fleet" and e.status == FAIL}
    expected = {(e.node, e.figure, e.gpus): e.expected_value for e in events if e.kind == "figure"}
    failures = Counter(e.node for e in events if e.status == FAIL)  # counted once: linear in the events
    rows: list[dict] = []
    for node, figures in by_node.items():
        cells: dict[str, dict] = {}
        for f in figures:
            key = f"{f.name}@{f.gpus}"
            median, edge = medians.get((f.name, f.gpus)), expected.get((node, f.name, f.gpus))
            cells[key] = {"value": f.value, "unit": f.unit, "of_median": _fraction(f, median),
                          "of_expected": _fraction(f, edge), "outlier": (node, f.name, f.gpus) in outliers,
                          **({"lane": f.lane} if f.lane else {})}
        fractions: list[float] = [c["of_median"] for c in cells.values() if c["of_median"] is not None]
        rows.append({"node": node, "failures": failures[node],
                     "worst": min(fractions) if fractions else None, "figures": cells, "missing": ""})
    for node, why in missing.items():
        rows.append({"node": node, "failures": 1, "worst": None, "figures": {}, "missing": why})
    # worst first: the nodes missing, then by their worst figure's fraction of the fleet median
    rows.sort(key=lambda r: (not r["missing"], r["worst"] if r["worst"] is not None else 9e9, -r["failures"]))
    return rows


def _fraction(f: Figure, reference: float | None) -> float | None:
    if not reference or not f.value:
        return None
    return f.value / reference if f.higher_better else reference / f.value


def _columns(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(k for r in rows for k in r["figures"]))


def _cell(cell: dict | None) -> str:
    if not cell:
        return ""
    text = f"{cell['of_median']:.2f}" if cell["of_median"] is not None else "-"
    if cell["of_expected"] is not None:
        text += f" ({cell['of_expected']:.2f})"
    return text + (" !" if cell["outlier"] else "")


def to_markdown(rows: list[dict]) -> str:
    columns = _columns(rows)
    lines = ["| node | failures | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    for r in rows:
        cells = [r["missing"]] * len(columns) if r["missing"] else [_cell(r["figures"].get(c)) for c in columns]
        lines.append(f"| {r['node']} | {r['failures']} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Each figure as a fraction of the fleet median (of its expectation in brackets); "
                 "below 1 is worse; `!` an outlier.")
    return "\n".join(lines) + "\n"


def to_json(rows: list[dict]) -> str:
    return json.dumps({"nodes": rows}, indent=1, ensure_ascii=False) + "\n"


def render(rows: list[dict], console) -> None:
    from rich.markup import escape
    from rich.table import Table

    columns = _columns(rows)
    table = Table(title="Fleet: each figure as a fraction of the fleet median (of its expectation); ! an outlier",
                  title_justify="left")
    for c in ["node", "failures", *columns]:
        table.add_column(escape(c), overflow="fold")
    for r in rows:
        cells = [r["missing"]] + [""] * (len(columns) - 1) if r["missing"] else \
            [_cell(r["figures"].get(c)) for c in columns]
        style = "bold red" if r["failures"] else ""
        table.add_row(escape(r["node"]), str(r["failures"]), *(escape(c) for c in cells), style=style)
    console.print(table)


def save(rows: list[dict], path: Path) -> list[Path]:
    """The table into PATH by its suffix: .md, .json, or .png / .svg (the heatmaps, one file per
    figure family: PATH's stem, '-', the family). Returns the files written."""
    suffix = Path(path).suffix.lower()
    if suffix in (".png", ".svg"):
        return heatmap(rows, Path(path))
    Path(path).write_text(to_json(rows) if suffix == ".json" else to_markdown(rows), encoding="utf-8")
    return [Path(path)]


def heatmap(rows: list[dict], path: Path) -> list[Path]:
    """Node x figure, one image per figure family (check/heatmap.py): PATH's stem, '-', the family
    (fleet-host-link.png, fleet-memory.png, fleet-pairs.png, ...)."""
    from gpuipc_bench.check import heatmap as drawing

    by_family = drawing.families(_columns(rows)) or {"figures": []}
    return [drawing.draw(rows, columns, path.with_name(f"{path.stem}-{family}{path.suffix}"), family)
            for family, columns in by_family.items()]
