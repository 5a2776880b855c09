#!/usr/bin/env python3
"""Print the one-screen summary that `gpuipc-bench run` prints at its end, for a CSV it wrote.

    python scripts/render_summary.py results/RUN.csv [--width 80] [--source NAME]

The summary is rendered from the CSV alone (its rows and `#` facts), so a reference run's
summary can be shown by the current version's rules (verdict, ties, warnings) with the
figures of that run. --source: the file name the last line tells `gpuipc-bench report` to
read (default: the CSV's path as given).
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from gpuipc_bench.report import render_run_summary
from gpuipc_bench.results import read_results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--width", type=int, default=80)
    parser.add_argument("--source", default=None)
    args = parser.parse_args(argv)
    df, meta = read_results(args.csv)
    console = Console(width=args.width, color_system=None, highlight=False, soft_wrap=False)
    render_run_summary(df, meta, console, source=args.source or args.csv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
