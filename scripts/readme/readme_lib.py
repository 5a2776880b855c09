"""What the page renderers share: the pages, the reference runs read and summarised once, the number formats.

Medians and their 95% intervals are the tool's own (gpuipc_bench.analysis.summarize: robust.median_ci,
order statistics); below 6 samples the interval is the samples' range, marked †, as the analysis does.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent.parent
RESULTS = ROOT / "results"
README = ROOT / "README.md"
DOCS = ROOT / "docs"
BLOCK = re.compile(r"^<!-- figures:(?P<name>[\w-]+) begin -->\n(?P<body>.*?)^<!-- figures:(?P=name) end -->$",
                   re.M | re.S)
RANGE_MARK = "†"  # fewer than 6 samples: the interval is the samples' range
MIB = 1 << 20
KIB = 1 << 10


class FigureError(Exception):
    """A figure a page asks for is not in its CSV (or is there more than once)."""


def pages(root: Path = ROOT) -> list[Path]:
    """The pages whose figure blocks are rendered and checked: README.md, then docs/**/*.md by path."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


class Run:
    """One reference CSV, read and summarised once: its rows, its `#` facts and its summary."""

    def __init__(self, name: str):
        from gpuipc_bench.analysis import summarize
        from gpuipc_bench.paths import from_metadata
        from gpuipc_bench.results import read_results

        self.name = name
        self.frame, self.meta = read_results(RESULTS / name)
        self.summary = summarize(self.frame, paths=from_metadata(self.meta), meta=self.meta)

    def fig(self, **keys) -> pd.Series:
        """The one summary row with these condition values (bytes as int, src/dst as str)."""
        rows = self.summary
        match = pd.Series(True, index=rows.index)
        for key, value in keys.items():  # one mask, then one take: a take per key was most of --check's time
            match &= (rows[key] == value).fillna(False).astype(bool)
        rows = rows[match]
        if len(rows) != 1:
            raise FigureError(f"{self.name}: {len(rows)} figures match {keys}")
        return rows.iloc[0]

    def has(self, **keys) -> bool:
        try:
            self.fig(**keys)
        except FigureError:
            return False
        return True

    def scenario_seconds(self) -> float:
        """The scenarios' wall times summed (`seconds.<scenario>`)."""
        return sum(float(v) for k, v in self.meta.items() if k.startswith("seconds.") and k != "seconds.total")


class Runs:
    """The reference runs the renderers asked for, each loaded on first use; `used` lists them."""

    def __init__(self) -> None:
        self._runs: dict[str, Run] = {}

    def __getitem__(self, name: str) -> Run:
        if name not in self._runs:
            self._runs[name] = Run(name)
        return self._runs[name]

    def text(self, name: str) -> str:
        return (RESULTS / name).read_text()


SHARED = Runs()  # one process reads and summarises each CSV once, however often it renders


# --------------------------------------------------------------------------- formatting


def decimals(x: float) -> int:
    """Decimals that show three significant digits (none from 100 up)."""
    if not math.isfinite(x) or x == 0 or abs(x) >= 100:
        return 0
    return max(0, 2 - math.floor(math.log10(abs(x))))


def num(x: float, places: int | None = None) -> str:
    if x is None or not math.isfinite(x):
        return "—"
    places = decimals(x) if places is None else places
    return f"{x:,.{places}f}"


def with_interval(median: float, lo: float, hi: float, ranged: bool = False) -> str:
    """'26.4 [26.2–26.5]': the median and its interval, with the median's decimals."""
    places = decimals(median)
    mark = RANGE_MARK if ranged else ""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return f"{num(median, places)} (n=1)"
    return f"{num(median, places)} [{num(lo, places)}–{num(hi, places)}]{mark}"


def _interval(row: pd.Series, lo: float, hi: float, lo_range: float, hi_range: float) -> tuple[float, float, bool]:
    if math.isfinite(lo) and math.isfinite(hi):
        return lo, hi, False
    return lo_range, hi_range, int(row["samples"]) > 1


def gbps(row: pd.Series) -> str:
    """Median GB/s [95% interval] of a bandwidth figure."""
    nbytes = float(row["bytes"])
    lo, hi, ranged = _interval(row, row["ci_lo_gbps"], row["ci_hi_gbps"], nbytes / row["max_s"] / 1e9,
                               nbytes / row["min_s"] / 1e9)
    return with_interval(row["median_gbps"], lo, hi, ranged)


def seconds(row: pd.Series, scale: float = 1e6) -> str:
    """Median time [95% interval] of any figure, in µs (scale 1e6) or ms (1e3)."""
    lo, hi, ranged = _interval(row, row["ci_lo_s"], row["ci_hi_s"], row["min_s"], row["max_s"])
    return with_interval(row["median_s"] * scale, lo * scale, hi * scale, ranged)


def fraction(row: pd.Series) -> str:
    f = float(row["fraction_of_ceiling"])
    return f"{f:.0%}" if math.isfinite(f) else "—"


def table(header: list[str], rows: list[list[str]], right_from: int = 1) -> str:
    """A Markdown table, columns from `right_from` on right-aligned ('|' in a cell escaped)."""
    align = ["---" if i < right_from else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in [header, align, *rows]]
    return "\n".join(lines)


def source(*names: str, note: str = "") -> str:
    """The line under a table naming its CSVs (and what † means when the table uses it)."""
    files = ", ".join(f"`results/{n}`" for n in names)
    return f"<sub>Rendered from {files} by `scripts/readme/readme_figures.py`{note}.</sub>"


RANGED = f"; {RANGE_MARK}: fewer than 6 samples, the interval is their range"
