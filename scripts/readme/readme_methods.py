"""The method pages' parameters (METHOD_RENDERERS), rendered from the code that uses them.

A method page explains a rule ("samples until the median's interval is within ±1%"); the rule's
numbers are constants of the tool's modules. Rendering them here keeps the page and the code one
fact: a constant that changes fails `readme_figures.py --check` until the page is rendered again,
and the prose may quote the values the table shows.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from readme_lib import FigureError, Runs, source, table

from gpuipc_bench.sizes import format_size


def _value(module: str, name: str):
    value = importlib.import_module(module)
    for part in name.split("."):
        try:
            if isinstance(value, tuple):
                value = value[int(part)]
            elif isinstance(value, dict):
                value = value[part]
            else:
                value = getattr(value, part)
        except (AttributeError, IndexError, KeyError, ValueError) as exc:
            raise FigureError(f"{module}.{name}: no such constant ({exc})") from None
    return value


def _shown(value, unit: str) -> str:
    if unit == "%":
        return f"{value * 100:g}%"
    if unit == "ms":
        return f"{value * 1e3:g} ms"
    if unit == "s":
        return f"{value:g} s"
    if unit == "×":
        return f"{value:g}×"
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


Row = tuple[str, str, str, str]  # module, constant (dotted: a tuple's index), unit, what it is


def parameters(rows: list[Row]) -> Callable[[Runs], str]:
    def render(_runs: Runs) -> str:
        body = [[f"`{name}`", f"`{module.removeprefix('gpuipc_bench.')}`", what, _shown(_value(module, name), unit)]
                for module, name, unit, what in rows]
        return table(["constant", "module", "what it sets", "value"], body, right_from=3) + (
            "\n\n<sub>Rendered from the modules named by `scripts/readme/readme_figures.py`.</sub>")
    return render


SAMPLER = "gpuipc_bench.engine.sampler"
ROBUST = "gpuipc_bench.robust"
STATS = "gpuipc_bench.analysis.stats"
DEFAULTS = "gpuipc_bench.defaults"

MEASURING: list[Row] = [
    (SAMPLER, "TARGET_SAMPLE_S", "ms", "the work one calibrated sample aims at"),
    (ROBUST, "PRECISION", "%", "a group stops once its median's 95% interval is this close to the median"),
    (DEFAULTS, "DEFAULT_SAMPLES.0", "", "`--min-samples` by default"),
    (DEFAULTS, "DEFAULT_SAMPLES.1", "", "`--max-samples` by default"),
    (DEFAULTS, "DEFAULT_SAMPLES.2", "", "`--warmup` by default: untimed samples per group"),
    (ROBUST, "WIDE_RANGE", "%", "a range of samples wider than this share of the median is wide ..."),
    (ROBUST, "WIDE_MIN_SAMPLES", "", "... and takes this many samples (or `--max-samples`, if fewer)"),
    (SAMPLER, "BEATEN_BY", "%", "a group slower than a rival in every sample, its median by more than this, stops "
                                "at `--min-samples`"),
    (SAMPLER, "FAR_BEHIND", "×", "a group whose every sample is this many times the best known figure at its size ..."),
    (SAMPLER, "FAR_SAMPLES", "", "... is decided slower after this many samples ..."),
    (SAMPLER, "STILL_FALLING", "%", "... unless each of the last of them ran faster than the one before by more than "
                                    "this (a warm-up still going: it goes on)"),
    (SAMPLER, "SETUP_REPEATS", "", "times each set-up operation is timed, each on fresh objects"),
]

VERDICT: list[Row] = [
    (STATS, "MIN_EFFECT", "%", "δ: medians closer than this are never *faster* (`--min-effect`)"),
    (STATS, "ALPHA", "", "the level of the Mann-Whitney U test, and of each end of a ratio's interval"),
    (STATS, "MIN_RANK_TEST", "", "samples a side before the U test is used"),
    (STATS, "MIN_SAME", "", "samples a side before *the same* may be claimed"),
    (ROBUST, "MIN_SAMPLES", "", "fewer samples than this have no 95% interval of their median: their range stands in"),
    (SAMPLER, "SETUP_REPEATS", "", "fresh objects a set-up cost is the median of"),
    ("gpuipc_bench.analysis.classes", "SAME_COPY_FRACTION", "%",
     "a figure at this share of its ceiling or more is the ceiling's copy: one mechanism"),
    ("gpuipc_bench.analysis.summary", "CALL_BOUND", "×",
     "below this many times a ceiling's per-call floor a figure is call-bound (time per transfer, not GB/s)"),
    ("gpuipc_bench.analysis.breakeven", "AMORTISE_OVER", "",
     "transfers one set-up is charged over (`--amortise-over`)"),
    (DEFAULTS, "PRESETS.quick.0", "", "samples per group under `--quick`"),
]


def covers(runs: Runs) -> str:
    """The chance that the range of n samples holds the median: 1 − 2^(1−n), the reason a few samples decide."""
    rows = [[str(n), f"{1 - 2 ** (1 - n):.1%}"] for n in (3, 4, 5)]
    return table(["samples", "their range holds the median"], rows) + (
        "\n\n<sub>Rendered by `scripts/readme/readme_figures.py`: 1 − 2^(1−n), each sample above or below the "
        "median with even odds.</sub>")


FORK, FRESH = "h100-fork-vs-fresh-fork.csv", "h100-fork-vs-fresh-fresh.csv"
OWN_PROCESSES = ("torch", "nvshmem", "nvshmem-mps", "sharing")  # scenarios with processes of their own in both runs


def fork_vs_fresh(runs: Runs) -> str:
    """Persistent process sets against fresh processes for every scenario: the medians of the groups both runs
    measured (ceilings included, set-up rows left out), within 3% of each other how often."""
    keys = ["scenario", "path", "variant", "measure", "metric", "src", "dst", "bytes", "workers", "sharing"]
    a, b = runs[FORK].summary, runs[FRESH].summary
    both = a[a["metric"] != "setup"].merge(b, on=keys, suffixes=("_fork", "_fresh"))
    both["off"] = (both["median_s_fork"] / both["median_s_fresh"] - 1).abs()
    own = both["scenario"].isin(OWN_PROCESSES)
    parts = []
    for part, what in ((both[~own], "the paths the persistent sets run"),
                       (both[own], f"those with processes of their own in both runs ({', '.join(OWN_PROCESSES)})")):
        parts.append(f"{what}: {(part['off'] <= 0.03).mean():.0%} of {len(part)} groups within 3%, median "
                     f"difference {part['off'].median():.1%}")
    return ("On one H100, the default run with persistent sets (`--launcher fork`) against the same run with fresh "
            "processes for every scenario (`--launcher fork-fresh`), back to back: " + "; ".join(parts)
            + ".\n\n" + source(FORK, FRESH, note="; the medians of the groups both runs measured, ceilings "
                                 "included, set-up rows left out"))


BESIDE_KEYS = ["scenario", "path", "variant", "measure", "metric", "src", "dst", "bytes", "workers", "sharing"]
BESIDE = (  # (call, load, what ran beside the timed scenarios): scripts/device/beside.py
    ("a", "starts", "processes starting, two at a time, over and over: a CUDA context, then 1 GiB set on the GPU "
                    "or torch's CUDA"),
    ("b", "contexts", "processes starting, two at a time, over and over: a CUDA context, no more"),
    ("b", "idle", "eight processes, each holding an idle CUDA context"),
)


def beside_files(call: str, load: str) -> list[str]:
    return [f"h200-beside-{call}-{load}-{i}.csv.gz" for i in (1, 2, 3)]


def _medians(runs: Runs, names: list[str]):
    """Each group's median in each run of `names` (a column a run), the groups all of them measured."""
    import pandas as pd

    columns = [runs[name].summary.set_index(BESIDE_KEYS)["median_s"] for name in names]
    return pd.concat(columns, axis=1, join="inner").dropna()


def beside(runs: Runs) -> str:
    """A load beside the timed scenarios against the same scenarios alone, three runs of each in turn: the
    groups' medians (over the three runs) that left the range of the runs alone by more than 2%, and
    the set-up cost that moved the most."""
    rows, names = [], []
    for call, load, what in BESIDE:
        alone, loaded = beside_files(call, "base"), beside_files(call, load)
        names += ([] if alone[0] in names else alone) + loaded
        both = _medians(runs, alone).join(_medians(runs, loaded), how="inner", lsuffix="_alone")
        a, b = both.iloc[:, :3], both.iloc[:, 3:]
        ratio = b.median(axis=1) / a.median(axis=1)
        setup = both.index.get_level_values("metric") == "setup"
        slower = (b.median(axis=1) > a.max(axis=1) * 1.02) & ~setup
        faster = (b.median(axis=1) < a.min(axis=1) / 1.02) & ~setup
        worst = ratio[setup].idxmax()
        rows.append([what, str(int((~setup).sum())), f"{ratio[~setup].median():.3f}", str(int(slower.sum())),
                     str(int(faster.sum())), f"{worst[2]} at {format_size(worst[7])}: {ratio[setup].max():.1f}x"])
    return ("On one H200, time-sliced, `-s ipc -s latency -s mempool -s staging -n 12`: three runs alone and three "
            "with each load beside them, in turn.\n\n"
            + table(["beside the timed scenarios", "figures", "median, beside / alone", "slower beyond the runs "
                     "alone by over 2%", "faster", "set-up cost moved most"], rows)
            + "\n\n" + source(*names, note="; scripts/device/beside.sh, scripts/device/beside.py"))


ANSWER = "gpuipc_bench.report.answer"
SUMMARY_BUDGET: list[Row] = [
    (ANSWER, "ONE_GPU_LINES", "", "the summary's screen lines at 80 columns: one GPU, both sharing modes"),
    (ANSWER, "NODE_LINES", "", "the same, for a node of several GPUs"),
    (ANSWER, "CHECK_GPU_LINES", "", "more for each further GPU measured on itself alone (a check's health preset)"),
    (ANSWER, "NEIGHBOUR_LINES", "", "more for each busy-neighbour mode's line"),
]


METHOD_RENDERERS: dict[str, Callable[[Runs], str]] = {
    "summary-budget": parameters(SUMMARY_BUDGET),
    "measuring-parameters": parameters(MEASURING),
    "verdict-parameters": parameters(VERDICT),
    "range-covers": covers,
    "fork-vs-fresh": fork_vs_fresh,
    "beside": beside,
}
