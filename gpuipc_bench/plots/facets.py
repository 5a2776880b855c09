"""How the figures are cut into panels, and what each panel's lines are: pandas only, no drawing.

A panel is one link class (the same GPU; GPU pairs of one NVML link class, e.g. NV18; host
and GPU; host alone), one measure (stream, handoff) and one sharing mode (time-sliced, mps,
exclusive, ...). GPU pairs of one class are drawn together: per size, the median across
the pairs, shaded from the lowest pair's interval to the highest's, so a node with 56
ordered pairs draws one line per path, not 56.

Reads defensively: a summary from an older file may lack `sharing` (one mode), and a
schema-2 `nvshmem-mps` scenario marks its MPS rows by its name only.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

import pandas as pd

from gpuipc_bench.analysis.conditions import ceiling_base, is_gpu, one_hop
from gpuipc_bench.analysis.model import SHARING_ORDER, link_class
from gpuipc_bench.paths import PathInfo, path_order
from gpuipc_bench.results import AGGREGATE_SUFFIX
from gpuipc_bench.report.wording import link

MEASURE_ORDER = ("stream", "handoff", "pingpong", "")
GPU_INITIATED = "device-"  # variants whose hand-off a kernel signals (device-ll, device-pingpong, device-putsig)


@dataclasses.dataclass(frozen=True)
class LinkClass:
    """Where bytes move: `kind` orders the classes (same GPU, GPU pairs, host and GPU, host)."""

    kind: int
    name: str  # the NVML link word for GPU pairs ('NV18'), else a description

    def title(self, links: Sequence[tuple[str, str]]) -> str:
        links = sorted(set(links), key=lambda sd: (int(sd[0]) if is_gpu(sd[0]) else -1,
                                                   int(sd[1]) if is_gpu(sd[1]) else -1))
        if len(links) == 1:
            src, dst = links[0]
            return link(src, dst) + (f" · {self.name}" if self.kind == 1 and self.name else "")
        if self.kind == 0:
            return f"same GPU · {len(links)} GPUs"
        if self.kind == 1:
            return f"{self.name or 'GPU pairs'} · {len(links)} GPU pairs"
        return f"{self.name} · {len(links)} links"


def link_class_of(meta: Mapping[str, str], src: str, dst: str) -> LinkClass:
    src, dst = str(src), str(dst)
    if is_gpu(src) and is_gpu(dst):
        if src == dst:
            return LinkClass(0, "same GPU")
        return LinkClass(1, link_class(meta, src, dst))
    if is_gpu(dst):
        return LinkClass(2, "host → GPU")
    if is_gpu(src):
        return LinkClass(3, "GPU → host")
    return LinkClass(4, link(src, dst))


def mode_of(sharing: str, scenario: str) -> str:
    sharing = str(sharing or "").strip() or "none"
    if sharing == "exclusive" and str(scenario).endswith("-mps"):
        return "mps"  # a schema-2 nvshmem-mps scenario across GPUs: its rows say 'exclusive'
    return sharing


def mode_rank(mode: str) -> int:
    return SHARING_ORDER.index(mode) if mode in SHARING_ORDER else len(SHARING_ORDER)


def measure_rank(measure: str) -> int:
    return MEASURE_ORDER.index(measure) if measure in MEASURE_ORDER else len(MEASURE_ORDER)


def prepared(summary: pd.DataFrame, meta: Mapping[str, str]) -> pd.DataFrame:
    """The summary with its panel keys: `klass` (a LinkClass) and `mode`; missing columns filled."""
    out = summary.copy()
    for col, default in (("sharing", "none"), ("measure", ""), ("scenario", ""), ("workers", 2), ("ceiling", ""),
                         ("verified", pd.NA), ("candidate", True)):
        if col not in out:
            out[col] = default
    out["src"], out["dst"] = out["src"].astype(str), out["dst"].astype(str)
    out["klass"] = [link_class_of(meta, s, d) for s, d in zip(out["src"], out["dst"])]
    out["mode"] = [mode_of(s, sc) for s, sc in zip(out["sharing"], out["scenario"])]
    return out


def drawable(rows: pd.DataFrame, facts: Mapping[str, PathInfo]) -> pd.DataFrame:
    """The rows a figure draws: measured (no ceilings), not failed verification, at a positive
    size, at the path's usual worker count (2 where measured), none of a path's single-process
    references (peer/p2p-off) nor the N-process aggregates; a reference path (NVSHMEM's
    per-call times, the CPU baseline) only on a link class where no ranked path was measured."""
    rows = rows[(rows["path"] != "ceiling") & (rows["bytes"] > 0)]
    rows = rows[~rows["variant"].astype(str).str.endswith(AGGREGATE_SUFFIX)]
    rows = rows[rows["verified"].fillna(True).astype(bool)]
    keep = [not (p in facts and v in facts[p].references) for p, v in zip(rows["path"], rows["variant"])]
    rows = rows[pd.Series(keep, index=rows.index, dtype=bool)]  # (a plain list: [] would pick no columns)
    parts = []
    for _, part in rows.groupby("path", sort=False):
        if part["workers"].nunique() > 1:
            counts = part["workers"].value_counts()
            part = part[part["workers"] == (2 if 2 in counts.index else counts.idxmax())]
        parts.append(part)
    rows = pd.concat(parts) if parts else rows
    ranked = [facts[p].ranked if p in facts else True for p in rows["path"]]
    ranked_classes = set(rows["klass"][ranked])
    return rows[pd.Series([r or k not in ranked_classes for r, k in zip(ranked, rows["klass"])], index=rows.index,
                          dtype=bool)]


@dataclasses.dataclass
class Panel:
    klass: LinkClass
    measure: str
    mode: str
    rows: pd.DataFrame  # drawable rows of this panel

    @property
    def links(self) -> list[tuple[str, str]]:
        return list(dict.fromkeys(zip(self.rows["src"], self.rows["dst"])))

    def title(self, what: str) -> str:
        parts = [p for p in (self.measure, "" if self.mode == "none" else self.mode) if p]
        return self.klass.title(self.links) + "\n" + " · ".join(parts + [what])


def panels(rows: pd.DataFrame, by_measure: bool = True) -> list[list[Panel]]:
    """Drawable rows cut into panels, one list per link class: per measure (when `by_measure`),
    then per sharing mode, so that a class's modes lie side by side."""
    out: list[list[Panel]] = []
    for klass in sorted(set(rows["klass"]), key=lambda k: (k.kind, k.name)):
        part = rows[rows["klass"] == klass]
        keys = {(m if by_measure else "", mode) for m, mode in zip(part["measure"], part["mode"])}
        row = []
        for measure, mode in sorted(keys, key=lambda k: (measure_rank(k[0]), mode_rank(k[1]))):
            here = part[(part["mode"] == mode) & ((part["measure"] == measure) if by_measure else True)]
            row.append(Panel(klass, measure, mode, here))
        out.append(row)
    return out


PAIRS_NOTE = (" (several links of one class: the median of the links, shaded from the lowest one's interval to the "
              "highest's)")


def pairs_note(layout: Sequence[Sequence[Panel]]) -> str:
    """What the shading means where a panel draws several links (GPU pairs) together."""
    return PAIRS_NOTE if any(len(p.links) > 1 for row in layout for p in row) else ""


# --------------------------------------------------------------------------- lines

VALUES = {"gbps": ("median_gbps", "ci_lo_gbps", "ci_hi_gbps"), "s": ("median_s", "ci_lo_s", "ci_hi_s")}


def values(rows: pd.DataFrame, value: str) -> pd.DataFrame:
    """y, lo, hi in the unit drawn (GB/s, or µs for times); an interval that is missing is the median."""
    med, lo, hi = VALUES[value]
    scale = 1e6 if value == "s" else 1.0
    out = rows.copy()
    out["y"] = rows[med].astype(float) * scale
    out["lo"] = rows[lo].astype(float).fillna(rows[med].astype(float)) * scale
    out["hi"] = rows[hi].astype(float).fillna(rows[med].astype(float)) * scale
    return out


def across_links(rows: pd.DataFrame) -> pd.DataFrame:
    """Per size: the median over the links of their figures, shaded from the lowest interval to
    the highest (one link: its own interval). Columns bytes, y, lo, hi, links."""
    grouped = rows.groupby("bytes")
    out = pd.DataFrame({"y": grouped["y"].median(), "lo": grouped["lo"].min(), "hi": grouped["hi"].max(),
                        "links": grouped.size()})
    return out.reset_index().sort_values("bytes")


def best_per_path(rows: pd.DataFrame, facts: Mapping[str, PathInfo], value: str) -> dict[str, pd.DataFrame]:
    """One line per path: at each size and link the path's best variant (highest GB/s, or
    shortest time), then across the links of the panel."""
    higher = value == "gbps"
    rows = values(rows, value)
    rows = rows[rows["y"] > 0]
    out = {}
    for path in path_order(facts, rows["path"]):
        part = rows[rows["path"] == path].sort_values("y", ascending=not higher)
        best = part.drop_duplicates(["src", "dst", "bytes"])
        out[path] = across_links(best)
    return out


def per_variant(rows: pd.DataFrame, facts: Mapping[str, PathInfo], value: str) -> dict[tuple[str, str], pd.DataFrame]:
    """One line per path and variant (and scenario, where one variant was measured by several),
    across the links of the panel."""
    rows = values(rows, value)
    rows = rows[rows["y"] > 0]
    out = {}
    order = path_order(facts, rows["path"])
    for (path, variant), part in sorted(rows.groupby(["path", "variant"], sort=False),
                                        key=lambda kv: (order.index(kv[0][0]), kv[0][1].startswith(GPU_INITIATED))):
        if part["scenario"].nunique() > 1:  # the same figure measured twice: the median of the two
            part = part.groupby(["src", "dst", "bytes"], as_index=False)[["y", "lo", "hi"]].median()
        out[(path, variant)] = across_links(part)
    return out


def ceiling_kind(key: str) -> str:
    """'peer@0>1/producer' -> 'peer', 'd2d-sm@0' -> 'd2d-sm'."""
    return re.sub(r"@.*$", "", ceiling_base(key))


def ceilings(summary: pd.DataFrame, panel: Panel, metric: str, value: str, limit: int = 3) -> dict[str, pd.DataFrame]:
    """The ceilings of the panel's link class that its rows are compared with, one line per kind
    (peer, d2d, d2d-sm), the median over the scenarios and links that measured it; rows of
    the panel's sharing mode where there are, else of any mode."""
    named = [ceiling_base(c) for c in panel.rows["ceiling"].astype(str) if c]
    kinds = list(dict.fromkeys(ceiling_kind(c) for c in named if one_hop(c)))
    if metric == "latency" and not kinds:
        kinds = None  # latency rows name no ceiling: every ceiling ping-pong of the class
    rows = summary[(summary["path"] == "ceiling") & (summary["metric"] == metric) & (summary["bytes"] > 0)]
    rows = rows[rows["klass"] == panel.klass]
    same = rows[rows["mode"] == panel.mode]
    rows = same if not same.empty else rows
    rows = values(rows, value)
    rows = rows.assign(kind=[ceiling_kind(v) for v in rows["variant"]])
    out = {}
    for kind in (kinds if kinds is not None else list(dict.fromkeys(rows["kind"]))):
        part = rows[(rows["kind"] == kind) & (rows["y"] > 0)]
        if not part.empty and len(out) < limit:
            out[kind] = part.groupby("bytes", as_index=False)["y"].median().sort_values("bytes")
    return out
