"""Write a large, synthetic but valid results file, to time and profile `gpuipc-bench report`.

The rows are a committed run's (results/h100-default-modes.csv unless --source says),
repeated: copy k keeps every column but `iteration` (shifted past the copies before it, so
each condition reads as one long run of k times the samples), `seq` (shifted likewise) and
`node` ('<host>-k': as if k nodes had each measured the run). The figures are the committed
run's own, so the report reads like that run with more samples; nothing was measured.

    python scripts/make_large_results.py BIG.csv --mb 256      # 109 copies, 2.0 M rows
    /usr/bin/time -v gpuipc-bench report BIG.csv > /dev/null
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpuipc_bench.results import format_results, read_results  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the file to write")
    parser.add_argument("--mb", type=float, default=256, help="about this many MB (default 256)")
    parser.add_argument("--copies", type=int, help="this many copies of the run (instead of --mb)")
    parser.add_argument("--source", type=Path, default=ROOT / "results" / "h100-default-modes.csv",
                        help="the committed run whose rows are repeated")
    args = parser.parse_args(argv)

    import pandas as pd

    frame, meta = read_results(args.source)
    host = meta.get("host", "node")
    one = format_results(frame.assign(node=f"{host}-00"), meta)  # a copy's size, its node named
    copies = args.copies or max(1, round(args.mb * 1e6 / len(one.encode())))
    step_iter = int(frame["iteration"].max()) + 1
    step_seq = int(frame["seq"].max()) + 1
    parts = []
    for k in range(copies):
        part = frame.copy()
        part["iteration"] += k * step_iter
        part["seq"] = part["seq"].where(part["seq"] < 0, part["seq"] + k * step_seq)
        part["node"] = f"{host}-{k}"
        parts.append(part)
    big = pd.concat(parts, ignore_index=True)
    meta = {**meta, "command": f"scripts/make_large_results.py: {args.source.name} x {copies} (synthetic)"}
    with open(args.out, "w", encoding="utf-8", newline="") as fh:
        fh.write(format_results(big, meta))
    print(f"{args.out}: {len(big)} rows ({copies} copies of {args.source.name}), "
          f"{args.out.stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
