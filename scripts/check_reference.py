#!/usr/bin/env python3
"""Check a reference run against its own ceilings: the figures a closing note reports.

    python scripts/check_reference.py results/RUN.csv [--size 256MiB]

Prints, per path/variant/measure at --size: the median GB/s with its 95% interval, the
fraction of the ceiling measured in the same run, and for every group at every size the
number of samples above its physical bound:
  one copy                      its ceiling's best sample (+2% for kernel copies, per the issue)
  two hops, handoff             1 / (1/d2h + 1/h2d), each hop's best sample (in sequence)
  two hops, stream              min(d2h, h2d) (the hops may overlap)
and the mean number of samples per group (the adaptive stop rule at work).
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from gpuipc_bench import robust
from gpuipc_bench.results import read_results
from gpuipc_bench.sizes import format_size, parse_size


def best_ceiling(df: pd.DataFrame, key: str, nbytes: int) -> float:
    rows = df[(df["path"] == "ceiling") & (df["variant"] == key) & (df["bytes"] == nbytes)
              & (df["metric"] == "bandwidth")]
    return float(rows["bandwidth_gbps"].max()) if len(rows) else float("nan")


def median_ceiling(df: pd.DataFrame, key: str, nbytes: int) -> float:
    rows = df[(df["path"] == "ceiling") & (df["variant"] == key) & (df["bytes"] == nbytes)
              & (df["metric"] == "bandwidth")]
    return float(rows["bandwidth_gbps"].median()) if len(rows) else float("nan")


def bound(df, ceiling: str, measure: str, nbytes: int, of=best_ceiling) -> float:
    if "+" in ceiling:
        a, b = (of(df, key, nbytes) for key in ceiling.split("+"))
        return min(a, b) if measure == "stream" else 1 / (1 / a + 1 / b)
    value = of(df, ceiling, nbytes)
    return value * (1.02 if "-sm@" in ceiling else 1.0)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--size", default="256MiB")
    args = parser.parse_args(argv)
    df, meta = read_results(args.csv)
    size = parse_size(args.size)
    data = df[(df["metric"] == "bandwidth") & (df["path"] != "ceiling") & (df["ceiling"] != "")
              & (df["path"] != "sharing")]
    print(f"{args.csv}: {meta.get('gpu.0.name', '?')}, status {meta.get('status')}")
    print(f"\nat {format_size(size)}: median GB/s [95% interval], fraction of the same-run ceiling (median)")
    keys = ["path", "variant", "measure", "src", "dst", "ceiling"]
    for key, part in data[data["bytes"] == size].groupby(keys, sort=False):
        lo, med, hi = robust.median_ci(part["bandwidth_gbps"])
        ceiling = bound(df, key[5], key[2], size, median_ceiling)
        print(f"  {key[0]}/{key[1]:<16} {key[2]:<8} {med:9.2f} [{lo:.2f}, {hi:.2f}]  "
              f"{med / ceiling:6.1%} of {key[5]} ({ceiling:.1f})")
    over = []
    for key, part in data.groupby(keys + ["bytes"], sort=False):
        limit = bound(df, key[5], key[2], key[6])
        above = part[part["bandwidth_gbps"] > limit]
        if len(above):
            over.append((key, len(above), len(part), float(above["bandwidth_gbps"].max()), limit))
    print(f"\nsamples above their physical bound: {sum(n for _, n, *_ in over)} "
          f"(in {len(over)} of {data.groupby(keys + ['bytes']).ngroups} groups)")
    for key, n, total, worst, limit in over:
        flag = " (L2-resident)" if bool(df[(df["variant"] == key[1]) & (df["bytes"] == key[6])]["l2_resident"].fillna(False).any()) else ""
        print(f"  {key[0]}/{key[1]} {key[2]} {format_size(key[6])}: {n}/{total} samples, up to {worst:.2f} "
              f"> {limit:.2f}{flag}")
    timed = df[df["metric"] != "setup"].groupby(["scenario", "path", "variant", "measure", "metric", "src", "dst",
                                                 "bytes", "workers", "sharing"]).size()
    print(f"\nsamples per group: mean {timed.mean():.1f}, median {timed.median():.0f}, "
          f"{(timed >= 20).mean():.0%} of groups reached 20")
    return 0


if __name__ == "__main__":
    sys.exit(main())
