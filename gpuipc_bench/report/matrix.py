"""GPU-pair matrices, like NVIDIA's p2pBandwidthLatencyTest: a row per producer GPU, a column
per consumer GPU. Drawn only for a run that measured a path on two or more pairs of GPUs
(`run --pairs`): per path, the bandwidth of its best streamed variant at one size, the time
per message of its best handoff variant at 4 KiB, and the NVML link of each pair beside them.
"""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from gpuipc_bench.report.tables import Column, Table
from gpuipc_bench.report.wording import DASH, fmt_num, fmt_pm
from gpuipc_bench.sizes import format_size

HANDOFF_BYTES = 4096


def _gpu_pairs(part: pd.DataFrame) -> set[tuple[int, int]]:
    return {(int(s), int(d)) for s, d in zip(part["src"], part["dst"]) if str(s).isdigit() and str(d).isdigit()}


def pair_matrices(summary: pd.DataFrame, meta: Mapping[str, str], nbytes: int = 256 << 20) -> list[Table]:
    """The matrices of every path measured on two GPU pairs or more (none otherwise)."""
    rows = summary[(summary["path"] != "ceiling") & (summary["metric"] == "bandwidth")]
    if "candidate" in rows:  # a path's own ways to move a message, not its references (peer/bidir's two-way total)
        rows = rows[rows["candidate"].astype(bool)]
    tables: list[Table] = []
    gpus: set[int] = set()
    for path, part in rows.groupby("path", sort=False):
        pairs = _gpu_pairs(part)
        if len({p for p in pairs if p[0] != p[1]}) < 2:
            continue
        devices = sorted({d for p in pairs for d in p})
        gpus |= set(devices)
        stream = part[(part["measure"] == "stream") & (part["bytes"] == nbytes)]
        tables.append(_matrix(f"{path} · GB/s at {format_size(nbytes)}, best streamed variant ± its 95% interval",
                              devices, stream, lambda r: (r.median_gbps, r.ci_lo_gbps, r.ci_hi_gbps), best="max"))
        handoff = part[(part["measure"] == "handoff") & (part["bytes"] == HANDOFF_BYTES)]
        if not handoff.empty:
            tables.append(_matrix(f"{path} · µs per message at {format_size(HANDOFF_BYTES)}, best handoff variant "
                                  "± its 95% interval", devices, handoff,
                                  lambda r: (r.median_s * 1e6, r.ci_lo_s * 1e6, r.ci_hi_s * 1e6), best="min"))
    if tables:
        tables.append(link_matrix(sorted(gpus), meta))
    return tables


def _matrix(title: str, devices: list[int], part: pd.DataFrame, value, best: str) -> Table:
    columns = [Column("src \\ dst", "left")] + [Column(f"GPU {d}") for d in devices]
    cells: dict[tuple[int, int], str] = {}
    for (src, dst), group in part.groupby(["src", "dst"]):
        if not (str(src).isdigit() and str(dst).isdigit()):
            continue
        key = "median_gbps" if best == "max" else "median_s"
        row = group.sort_values(key, ascending=best != "max").iloc[0]
        median, lo, hi = value(row)
        pm = fmt_pm(lo, median, hi)
        cells[(int(src), int(dst))] = fmt_num(median) + ("" if pm == DASH else f" {pm}")
    rows = [[f"GPU {s}"] + [cells.get((s, d), DASH) for d in devices] for s in devices]
    return Table(title, "matrix", columns, rows, [None] * len(rows))


def link_matrix(devices: list[int], meta: Mapping[str, str]) -> Table:
    """The link of each pair as NVML reported it ('NV18', 'PCIe (same switch)', ...)."""
    columns = [Column("src \\ dst", "left")] + [Column(f"GPU {d}", "left") for d in devices]
    rows = [[f"GPU {s}"] + [DASH if s == d else meta.get(f"link.{min(s, d)}-{max(s, d)}", "?") for d in devices]
            for s in devices]
    return Table("links between the GPUs (NVML)", "matrix", columns, rows, [None] * len(rows))
