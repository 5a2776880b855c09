"""Which lane carried a figure's bytes, from its rows' `lane` column (NVML's byte counters, read
around its samples: gpuipc_bench.machine.lanes), and the lane it should have taken.

A figure's lane is the proven lane most of its samples took ('nvlink', 'pcie', 'nvlink+pcie',
'none': no lane crossed); where none was proven, why: 'unproven' (no trusted counter here),
'other-traffic', or 'small' (its samples moved too few bytes to be read) unless a larger size
of the same path, variant, measure, ends and sharing mode was proven, whose lane it then takes.
'' where its rows carry no lane (a schema-3 file written before the counters, or a run that
read none): nothing is said.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

import pandas as pd

from gpuipc_bench.analysis.conditions import column_values
from gpuipc_bench.machine.lanes import NOT_PROVEN, OTHER_TRAFFIC, PROVEN_LANES, SMALL

FAMILY = ["path", "variant", "measure", "src", "dst", "sharing"]  # a figure's sizes; with bytes, the figure
# Paths and variants whose bytes cross pinned host memory: PCIe is their lane, whatever a library reports.
THROUGH_HOST_PATHS = ("staging", "mmap", "hostpool", "host")
_THROUGH_HOST = re.compile(r"p2p-off|host", re.IGNORECASE)


def expected_lane(path: str, variant: str, src: str, dst: str, meta: Mapping[str, str]) -> str:
    """The lane a figure's bytes should take: 'pcie' through host memory (a host end, a staged
    path, a P2P-off copy), 'none' within one GPU, between two GPUs 'nvlink' where the header's
    link says NV<k> and 'pcie' where it names a PCIe level; '' where the header does not say.
    A library's reported transport does not change it: one that fell back to TCP or shared
    memory between NVLink GPUs took the wrong lane (issue 36: the lane alarm)."""
    if "host" in (str(src), str(dst)) or path in THROUGH_HOST_PATHS or _THROUGH_HOST.search(str(variant)):
        return "pcie"
    if str(src) == str(dst):
        return "none"
    link = str(meta.get(f"link.{src}-{dst}") or meta.get(f"link.{dst}-{src}") or "")
    return "nvlink" if link.startswith("NV") else ("pcie" if link else "")


def wrong_lane(expected: str, seen: str) -> bool:
    """Whether bytes that should take `expected` went over `seen` instead: NVLink expected and
    PCIe or nothing seen; through host memory and NVLink seen; within a GPU and a lane seen."""
    if seen not in PROVEN_LANES:
        return False
    if expected == "nvlink":
        return seen in ("pcie", "none")
    if expected == "pcie":
        return "nvlink" in seen
    if expected == "none":
        return seen != "none"
    return False


def lane_of(seen: Sequence[str]) -> str:
    """A figure's lane from its samples' lanes (the module's docstring), before a small figure
    takes its family's."""
    proven = [lane for lane in seen if lane in PROVEN_LANES]
    if proven:
        return max(dict.fromkeys(proven), key=proven.count)
    return next((word for word in (NOT_PROVEN, OTHER_TRAFFIC, SMALL) if word in seen), "")


def lanes_by_group(rows: pd.DataFrame, keys: list[str]) -> list[tuple[tuple, list[str]]]:
    """(key, its rows' lanes as text) of each group of rows by `keys`, as groupby(keys, sort=False,
    dropna=False) iterates them: the rows numbered by group in one pass, not a frame per group."""
    grouped = rows.groupby(keys, sort=False, dropna=False)
    seen: list[list[str]] = [[] for _ in range(grouped.ngroups)]
    for g, lane in zip(grouped.ngroup().tolist(), column_values(rows["lane"])):
        seen[g].append(str(lane))
    return list(zip(grouped.size().index, seen))


def figure_lanes(frame: pd.DataFrame) -> dict[tuple, str]:
    """(path, variant, measure, src, dst, sharing, bytes) -> the lane of each bandwidth figure whose
    rows carry one; {} where none does (nothing is computed for a file without lanes)."""
    if "lane" not in frame.columns or frame.empty:
        return {}
    wanted = (frame["metric"] == "bandwidth") & (frame["lane"].astype(str) != "")
    if not wanted.any():
        return {}
    rows = frame.loc[wanted, [*FAMILY, "bytes", "lane"]]  # only the columns read: the cut copies fewer
    out = {tuple(key): lane_of(seen) for key, seen in lanes_by_group(rows, [*FAMILY, "bytes"])}
    largest: dict[tuple, tuple[int, str]] = {}  # a family -> its largest proven size and lane there
    for key, lane in out.items():
        if lane in PROVEN_LANES and int(key[-1]) > largest.get(key[:-1], (-1, ""))[0]:
            largest[key[:-1]] = (int(key[-1]), lane)
    return {key: largest[key[:-1]][1] if lane == SMALL and key[:-1] in largest else lane
            for key, lane in out.items()}


def with_lanes(decisions: Sequence, frame: pd.DataFrame) -> list:
    """The decisions (verdict.Decision) with `lane`: their choice's figure's lane ('' without); a
    decision the answer remakes with another choice (as_choice) takes that choice's."""
    lanes = figure_lanes(frame)
    if not lanes:
        return list(decisions)

    def laned(d):
        path, _, variant = d.choice.partition("/")
        lane = lanes.get((path, variant, d.measure, d.src, d.dst, d.sharing, d.bytes), "")
        again = d.again

        def remade(label: str, why: str):
            found = again(label, why)
            return None if found is None else laned(found)

        return dataclasses.replace(d, lane=lane, again=None if again is None else remade)

    return [laned(d) for d in decisions]
