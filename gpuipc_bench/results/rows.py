"""The rows of the results table: the columns, their types and defaults, and new_row.
(The schema's history is in gpuipc_bench.results.)"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pandas is imported where a frame is made: `run` and `list` start faster
    import pandas as pd

SCHEMA_VERSION = 3
MAGIC = "# gpuipc-bench results"
# The sharing scenario names the rows of all N workers together '<transfer>-aggregate'; their
# bytes are N x the message, and no ceiling bounds what N processes move together.
AGGREGATE_SUFFIX = "-aggregate"

COLUMNS: tuple[str, ...] = (
    "scenario",  # scenario module name, e.g. 'ipc'
    "path",  # staging, ipc, mmap, peer, host, barrier, ceiling
    "variant",  # pinned, ce, sm, push, ...; ceiling rows: 'd2d@0', 'd2d-sm@0', 'peer@0>1'; setup rows: the operation
    "measure",  # stream | handoff | pingpong | '' (setup rows); see MEASURES
    "metric",  # bandwidth | latency | setup
    "src",  # '0', '1', ... or 'host'
    "dst",
    "bytes",  # bytes moved by one transfer
    "iteration",  # 0-based sample index
    "batch",  # transfers timed together in this sample
    "seconds",  # per transfer (sample time / batch); latency: one-way; setup: the operation
    "bandwidth_gbps",  # bytes / seconds / 1e9, one direction; NaN unless metric is bandwidth
    "verified",  # True/False; empty (NA) for setup rows
    "workers",  # processes in the run
    "sharing",  # exclusive, time-sliced, mps, mig, none
    "ceiling",  # the variant of the ceiling rows this row is compared with; '' if none
    "l2_resident",  # True: this sample's source and destination rings fit the GPU's L2 together; empty: n/a
    # schema 3
    "mps_thread_pct",  # MPS active thread percentage (1..100); empty unless sharing is mps
    "transport",  # what a library really used (NCCL 'P2P/CUMEM', 'SHM', 'NET/Socket'; UCX 'cuda_ipc'); ''
    "node",  # host name of the node that measured the row (the writer fills in the header's host)
    "seq",  # the order in which the sample was taken within its worker set (drift); -1: unknown
    "sm_clock_mhz",  # SM clock sampled through NVML for the group; NaN: unknown
    # optional in schema 3 (a file without it reads 1: FILLED)
    "replica",  # the process set behind the sample: 1 (the first pass), 2 (the resampling pass's fresh set)
    # schema 3, optional (a file without them reads them empty): which lane carried the sample's bytes,
    # from NVML's byte counters proven at the start (gpuipc_bench.machine.lanes); '': not measured
    "lane",  # nvlink, pcie, nvlink+pcie, none, other-traffic, small, unproven
    "lane_nvlink_bytes",  # payload bytes over NVLink during the sample (summed over the links); NaN: unknown
    "lane_pcie_bytes",  # payload bytes over PCIe during the sample (its protocol overhead taken out); NaN: unknown
)
# Columns a schema-3 file may lack (written by a tool that did not have them): read as empty.
OPTIONAL_COLUMNS: tuple[str, ...] = ("lane", "lane_nvlink_bytes", "lane_pcie_bytes")

METRICS: tuple[str, ...] = ("bandwidth", "latency", "setup")
# How a figure was taken:
#   stream    transfers queued back to back after one hand-off: pipelined throughput (GB/s)
#   handoff   every transfer signalled from producer to consumer, the consumer's copy ordered
#             after it: the time per transfer a program pays (and the GB/s that gives)
#   pingpong  round trip / 2 (latency rows)
#   ''        setup rows (one operation, timed alone)
MEASURES: tuple[str, ...] = ("stream", "handoff", "pingpong", "")

STR_COLUMNS = ("scenario", "path", "variant", "measure", "metric", "src", "dst", "sharing", "ceiling", "transport",
               "node", "lane")
INT_COLUMNS = ("bytes", "iteration", "batch", "workers", "seq", "replica")
INT_LEAST = {"batch": 1, "seq": -1, "replica": 1}  # an integer column's least value (the others: 0)
# Columns a file of any schema may lack, with the cell they read as there (added within schema 3)
FILLED = {"replica": "1"}
OPTIONAL_INT_COLUMNS = ("mps_thread_pct",)  # nullable integers (pandas Int64): empty where they do not apply
FLOAT_COLUMNS = ("seconds", "bandwidth_gbps", "sm_clock_mhz", "lane_nvlink_bytes", "lane_pcie_bytes")
BOOL_COLUMNS = ("verified", "l2_resident")

_DEFAULTS: dict[str, Any] = {
    "scenario": "",
    "path": "",
    "variant": "",
    "measure": "",
    "metric": "bandwidth",
    "src": "",
    "dst": "",
    "bytes": 0,
    "iteration": 0,
    "batch": 1,
    "seconds": math.nan,
    "bandwidth_gbps": None,  # None: computed for bandwidth rows, NaN otherwise
    "verified": None,
    "workers": 1,
    "sharing": "none",
    "ceiling": "",
    "l2_resident": None,
    "mps_thread_pct": None,
    "transport": "",
    "node": "",  # '': the writer fills in the header's host
    "seq": -1,
    "sm_clock_mhz": math.nan,
    "replica": 1,
    "lane": "",
    "lane_nvlink_bytes": math.nan,
    "lane_pcie_bytes": math.nan,
}


_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def base_mode(sharing: Any) -> str:
    """The sharing mode a `sharing` value names without its busy neighbour: 'mps' for 'mps+copy'
    (gpuipc_bench.modes.neighbour), the value itself otherwise."""
    return str(sharing).partition("+")[0]


def new_row(**fields: Any) -> dict[str, Any]:
    """One result row with every column, in COLUMNS order.

    `seconds` is required. Unknown keys, an unknown metric, a non-integral byte count and the like raise
    ValueError (a bug in the scenario, not a user error). `src`/`dst` may be given
    as device indices (0 -> '0'). For metric 'bandwidth', bandwidth_gbps is computed
    from bytes / seconds when not given.
    """
    unknown = sorted(set(fields) - set(COLUMNS))
    if unknown:
        raise ValueError(f"unknown result column(s): {', '.join(unknown)} (known: {', '.join(COLUMNS)})")
    row = {**_DEFAULTS, **fields}

    for col in STR_COLUMNS:
        value = row[col]
        row[col] = "" if value is None else str(value)
        if _CONTROL_RE.search(row[col]):
            raise ValueError(f"{col} must be one line of printable text, not {row[col]!r}")
    if row["metric"] not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, not {row['metric']!r}")
    if row["measure"] not in MEASURES:
        raise ValueError(f"measure must be one of {', '.join(m or repr(m) for m in MEASURES)}, "
                         f"not {row['measure']!r}")
    for col in INT_COLUMNS:
        row[col] = _as_int(col, row[col])
    if row["batch"] < 1:
        raise ValueError(f"batch must be at least 1, not {row['batch']}")
    if row["iteration"] < 0 or row["bytes"] < 0 or row["workers"] < 0:
        raise ValueError("bytes, iteration and workers must not be negative")
    if row["replica"] < 1:
        raise ValueError(f"replica must be 1 or more, not {row['replica']}")
    if row["seq"] < -1:
        raise ValueError(f"seq must be -1 (unknown) or more, not {row['seq']}")
    pct = row["mps_thread_pct"]
    if pct is not None and not is_na(pct) and not (isinstance(pct, float) and math.isnan(pct)):
        pct = _as_int("mps_thread_pct", pct)
        if not 1 <= pct <= 100:
            raise ValueError(f"mps_thread_pct must be 1 to 100, not {pct}")
        if base_mode(row["sharing"]) != "mps":  # MPS, with a busy neighbour or not
            raise ValueError(f"mps_thread_pct is only for rows shared under MPS, not {row['sharing']!r}")
        row["mps_thread_pct"] = pct
    else:
        row["mps_thread_pct"] = None
    row["sm_clock_mhz"] = _as_float("sm_clock_mhz", math.nan if row["sm_clock_mhz"] is None else row["sm_clock_mhz"])
    if not (math.isnan(row["sm_clock_mhz"]) or (math.isfinite(row["sm_clock_mhz"]) and row["sm_clock_mhz"] > 0)):
        raise ValueError(f"sm_clock_mhz must be a clock (more than 0) or NaN, not {row['sm_clock_mhz']!r}")
    for col in OPTIONAL_COLUMNS[1:]:
        row[col] = _as_float(col, math.nan if row[col] is None else row[col])
        if row[col] < 0:
            raise ValueError(f"{col} must be 0 or more, or NaN, not {row[col]!r}")
    row["seconds"] = _as_float("seconds", row["seconds"])
    if math.isnan(row["seconds"]):
        raise ValueError("seconds is required (per transfer; latency: one-way; setup: the operation)")

    gbps = row["bandwidth_gbps"]
    if row["metric"] == "bandwidth":
        if gbps is None or (isinstance(gbps, float) and math.isnan(gbps)):
            seconds = row["seconds"]
            gbps = row["bytes"] / seconds / 1e9 if seconds > 0 and math.isfinite(seconds) else math.nan
        row["bandwidth_gbps"] = _as_float("bandwidth_gbps", gbps)
    else:
        if gbps is not None and not (isinstance(gbps, float) and math.isnan(gbps)):
            raise ValueError(f"bandwidth_gbps is only for bandwidth rows, not {row['metric']} rows")
        row["bandwidth_gbps"] = math.nan

    for col in BOOL_COLUMNS:
        flag = row[col]
        if flag is not None and not is_na(flag):
            if not isinstance(flag, (bool, np.bool_)):
                raise ValueError(f"{col} must be True, False or None, not {flag!r}")
            flag = bool(flag)
        row[col] = None if is_na(flag) else flag
    return {col: row[col] for col in COLUMNS}


def _as_int(col: str, value: Any) -> int:
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{col} must be an integer, not {value!r}")
    try:
        out = int(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{col} must be an integer, not {value!r}") from None
    if out != value:
        raise ValueError(f"{col} must be a whole number, not {value!r}")
    return out


def _as_float(col: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{col} must be a number, not {value!r}") from None


def pandas_module():
    import pandas

    return pandas


def is_na(value: Any) -> bool:
    """pandas.NA, without importing pandas."""
    return type(value).__name__ == "NAType"


def empty_frame() -> pd.DataFrame:
    """A results frame with no rows and the right columns and dtypes."""
    return typed_frame(pandas_module().DataFrame({col: [] for col in COLUMNS}))


def typed_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Give the COLUMNS their dtypes (str, int64, nullable Int64, float64, nullable boolean) and order;
    extra columns are kept after them, unchanged."""
    out = pandas_module().DataFrame(index=range(len(df)))
    values = df.reset_index(drop=True)
    for col in STR_COLUMNS:
        out[col] = values[col].fillna("").astype(str) if len(values) else pandas_module().Series([], dtype=str)
    for col in INT_COLUMNS:
        out[col] = values[col].astype("int64")
    for col in OPTIONAL_INT_COLUMNS:
        out[col] = values[col].astype("Int64")
    for col in FLOAT_COLUMNS:
        out[col] = values[col].astype("float64")
    for col in BOOL_COLUMNS:
        out[col] = values[col].astype("boolean")
    extra = [c for c in values.columns if c not in COLUMNS]
    out = out[list(COLUMNS)]
    for col in extra:
        out[col] = values[col]
    return out
