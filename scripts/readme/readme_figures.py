#!/usr/bin/env python3
"""Render the README's figures from the reference runs in results/, or check that it holds them.

    python scripts/readme/readme_figures.py --check     exit 1 and print a diff where README.md differs
    python scripts/readme/readme_figures.py --write     rewrite the figure blocks of README.md

Every figure block of the README sits between two marker lines,

    <!-- figures:NAME begin -->
    ...
    <!-- figures:NAME end -->

and is produced by the renderer NAME of scripts/readme/readme_tables.py from the CSVs it names (each
block ends with a line saying which). Medians and their 95% intervals are the tool's own
(gpuipc_bench.analysis.summarize: robust.median_ci, order statistics); below 6 samples the
interval is the samples' range, marked †, as the analysis does (stats.median_interval).
Each CSV is read and summarised once. CI runs --check (.ci/run, tests/test_readme_figures.py).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Callable
from pathlib import Path

from readme_lib import BLOCK, README, SHARED, FigureError, Runs
from readme_tables import RENDERERS

# --------------------------------------------------------------------------- README blocks


def render(text: str, renderers: dict[str, Callable[[Runs], str]], runs: Runs | None = None) -> str:
    """The README with each figure block replaced by what its renderer gives now."""
    runs = runs or SHARED
    names = [m["name"] for m in BLOCK.finditer(text)]
    unknown = sorted(set(names) - set(renderers))
    if unknown:
        raise FigureError(f"README blocks with no renderer: {', '.join(unknown)}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise FigureError(f"README blocks used twice: {', '.join(twice)}")

    def body(match: re.Match) -> str:
        name = match["name"]
        out = renderers[name](runs).strip("\n")
        return f"<!-- figures:{name} begin -->\n{out}\n<!-- figures:{name} end -->"

    return BLOCK.sub(body, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 with a diff where README.md differs")
    mode.add_argument("--write", action="store_true", help="rewrite README.md's figure blocks")
    parser.add_argument("--readme", type=Path, default=README)
    args = parser.parse_args(argv)
    text = args.readme.read_text()
    try:
        new = render(text, RENDERERS)
    except FigureError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    missing = sorted(set(RENDERERS) - {m["name"] for m in BLOCK.finditer(text)})
    if args.write:
        if new != text:
            args.readme.write_text(new)
            print(f"rewrote {args.readme}")
        if missing:
            print(f"renderers with no block in the README: {', '.join(missing)}", file=sys.stderr)
        return 0
    diff = list(difflib.unified_diff(text.splitlines(keepends=True), new.splitlines(keepends=True),
                                     f"{args.readme.name} (committed)", f"{args.readme.name} (from results/)"))
    if diff or missing:
        sys.stdout.writelines(diff)
        if missing:
            print(f"renderers with no block in the README: {', '.join(missing)}")
        print(f"\n{args.readme} differs from the figures in results/: run "
              "`python scripts/readme/readme_figures.py --write` and commit the result", file=sys.stderr)
        return 1
    print(f"{args.readme}: every figure block matches results/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
