"""Did each figure's bytes take its lane, in the amount it moved? (issue 36's bar, from a run's CSV)

    python scripts/lane_check.py RUN.csv

Per bandwidth figure whose samples were read (the `lane_*_bytes` columns): the lane it took, the
lane it should take (analysis.lanes.expected_lane), the samples read, and per lane the median of
bytes counted over bytes moved. A sample moves its batch, and the untimed warm-up transfers
queued before its start event (gpu.timing.warmup_ops) where they cross the same lane (a push
figure's do not: they run before the producer's batch on the consumer's side; a pipelined
staging figure's move one chunk each, a large transfer's over PCIe 1 MiB: gpu.timing.host_warm_bytes;
NCCL's sendrecv moves its bytes both ways); a figure's sample passes where one of these is met.

  NVLink expected  NVLink bytes within 2% + 1 MiB of the bytes moved; no more than 1 MiB on PCIe
                   beyond its floor (PCIe carries the launches and the counters' own reads);
  PCIe expected    PCIe bytes (scaled by the overhead proved at the start) within 2% of the bytes
                   moved, and no NVLink bytes;
  none expected    no lane crossed (a copy within one GPU).

Exit 1 when a figure fails (a wrong lane, or bytes outside the bar), else 0; exit 2 on a file
without lane columns."""

from __future__ import annotations

import math
import sys

import pandas as pd

from gpuipc_bench.analysis.lanes import expected_lane
from gpuipc_bench.gpu.timing import host_warm_bytes, warmup_ops
from gpuipc_bench.results import read_results

SHARE, SLACK = 0.02, 1 << 20
PCIE_FLOOR = 8 << 20  # PCIe bytes a sample of NVLink traffic still shows (launches, the readings themselves)
FIGURE = ["scenario", "path", "variant", "measure", "src", "dst", "sharing", "bytes"]


def moved_options(row, chunk: int = 0) -> tuple[float, ...]:
    """The bytes a sample moved: its batch alone, and with its warm-up transfers (a pipelined
    variant's warm-up moves one chunk, `chunk`: the header's chunk_bytes)."""
    nbytes, batch = float(row["bytes"]), float(row["batch"])
    if str(row.get("variant")).partition(":")[0] == "sendrecv":  # NCCL's sendrecv: its bytes both ways at once
        nbytes *= 2
    warm = warmup_ops(int(row["bytes"]))
    found = (nbytes * batch, nbytes * (batch + warm), nbytes * batch + warm * host_warm_bytes(int(row["bytes"])))
    if chunk and str(row.get("variant")) == "pipelined":
        found += (nbytes * batch + warm * min(float(chunk), nbytes),)
    return found


def sample_ok(expected: str, row, chunk: int = 0) -> bool:
    nv, pcie = row["lane_nvlink_bytes"], row["lane_pcie_bytes"]
    nv = 0.0 if pd.isna(nv) else float(nv)
    options = moved_options(row, chunk)
    if expected == "nvlink":
        return any(abs(nv - m) <= SHARE * m + SLACK for m in options) and \
            (pd.isna(pcie) or float(pcie) <= PCIE_FLOOR + SLACK)
    if expected == "pcie":
        return not pd.isna(pcie) and any(abs(float(pcie) - m) <= SHARE * m for m in options) and nv <= SLACK
    if expected == "none":
        return row["lane"] == "none"
    return True


def check(frame: pd.DataFrame, meta) -> tuple[pd.DataFrame, int]:
    rows = frame[(frame["metric"] == "bandwidth") & frame["lane_pcie_bytes"].notna()].copy()
    chunk = int(meta.get("chunk_bytes") or 0)
    out = []
    for key, part in rows.groupby(FIGURE, sort=False, dropna=False):
        fields = dict(zip(FIGURE, key))
        expected = expected_lane(str(fields["path"]), str(fields["variant"]), str(fields["src"]),
                                 str(fields["dst"]), meta)
        lanes = ",".join(sorted(set(map(str, part["lane"]))))
        moved = part.apply(lambda r: moved_options(r)[1], axis=1)
        nv = (part["lane_nvlink_bytes"].fillna(0) / moved).median()
        pcie = (part["lane_pcie_bytes"] / moved).median()
        passed = sum(sample_ok(expected, r, chunk) for _, r in part.iterrows())
        out.append({**fields, "lane": lanes, "expected": expected or "?", "read": len(part),
                    "nvlink/moved": nv, "pcie/moved": pcie, "ok": f"{passed}/{len(part)}"})
    table = pd.DataFrame(out)
    failed = int(sum(1 for r in out if int(r["ok"].split("/")[0]) < r["read"]))
    return table, failed


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    frame, meta = read_results(argv[0])
    if "lane_pcie_bytes" not in frame.columns or frame["lane_pcie_bytes"].notna().sum() == 0:
        print(f"Error: {argv[0]} has no lane readings (a run with the counters off, or none proven)",
              file=sys.stderr)
        return 2
    table, failed = check(frame, meta)
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(table.to_string(index=False, float_format=lambda x: "nan" if math.isnan(x) else f"{x:.4f}"))
    print(f"{len(table)} figures read, {failed} outside the bar")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
