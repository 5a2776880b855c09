#!/usr/bin/env python3
"""Render the pages' figures from the reference runs in results/, or check that the pages hold them.

    python scripts/readme/readme_figures.py --check     exit 1 where a page differs or its prose has a stray number
    python scripts/readme/readme_figures.py --write     rewrite the figure blocks of every page
    ... --page docs/pairs.md                            only the pages given (repeatable)

The pages are README.md and every docs/**/*.md (readme_lib.pages), in one pass. Every figure block
sits between two marker lines,

    <!-- figures:NAME begin -->
    ...
    <!-- figures:NAME end -->

and is produced by the renderer NAME (readme_tables.RENDERERS) from the files in results/ it names
(each block ends with a line saying which). A name is used at most once per page, and may be used on
several pages (the README's answer is also the one docs/answer.md explains); every renderer has a
block on some page. Medians and their 95% intervals are the tool's own
(gpuipc_bench.analysis.summarize: robust.median_ci, order statistics); below 6 samples the interval
is the samples' range, marked †, as the analysis does (stats.median_interval). Each CSV is read and
summarised once, however many pages use it.

--check also runs the numeric-token check (readme_numbers.py): a number in a page's prose must be a
value rendered on that page, a message size, a GPU index or on its short allowlist. CI runs --check
(.ci/run, tests/test_readme_figures.py, tests/test_readme_numbers.py).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Callable
from pathlib import Path

from readme_lib import BLOCK, ROOT, SHARED, FigureError, Runs, pages
from readme_numbers import strays
from readme_tables import RENDERERS


def render(text: str, renderers: dict[str, Callable[[Runs], str]], runs: Runs | None = None) -> str:
    """The page with each figure block replaced by what its renderer gives now."""
    runs = runs or SHARED
    names = [m["name"] for m in BLOCK.finditer(text)]
    unknown = sorted(set(names) - set(renderers))
    if unknown:
        raise FigureError(f"blocks with no renderer: {', '.join(unknown)}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise FigureError(f"blocks used twice on one page: {', '.join(twice)}")

    def body(match: re.Match) -> str:
        name = match["name"]
        out = renderers[name](runs).strip("\n")
        return f"<!-- figures:{name} begin -->\n{out}\n<!-- figures:{name} end -->"

    return BLOCK.sub(body, text)


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 with a diff where a page differs")
    mode.add_argument("--write", action="store_true", help="rewrite the pages' figure blocks")
    parser.add_argument("--page", type=Path, action="append",
                        help="a page to render or check (repeatable; default: README.md and docs/**/*.md)")
    args = parser.parse_args(argv)
    every_page = not args.page
    paths = pages() if every_page else args.page
    failed = False
    used: set[str] = set()
    for path in paths:
        text = path.read_text()
        used.update(m["name"] for m in BLOCK.finditer(text))
        try:
            new = render(text, RENDERERS)
        except FigureError as exc:
            print(f"Error: {_shown(path)}: {exc}", file=sys.stderr)
            failed = True
            continue
        if args.write and new != text:
            path.write_text(new)
            print(f"rewrote {_shown(path)}")
        elif args.check and new != text:
            sys.stdout.writelines(difflib.unified_diff(
                text.splitlines(keepends=True), new.splitlines(keepends=True),
                f"{_shown(path)} (committed)", f"{_shown(path)} (from results/)"))
            print(f"\n{_shown(path)} differs from the figures in results/: run "
                  "`python scripts/readme/readme_figures.py --write` and commit the result", file=sys.stderr)
            failed = True
        loose = strays(new)
        for stray in loose:
            print(f"{_shown(path)}: {stray}: a number in the prose that no figure block of the page "
                  "renders (scripts/readme/readme_numbers.py)", file=sys.stderr)
        failed = failed or bool(loose)
    missing = sorted(set(RENDERERS) - used) if every_page else []
    if missing:
        print(f"renderers with no block on any page: {', '.join(missing)}", file=sys.stderr)
        failed = True
    if not failed and args.check:
        print(f"{len(paths)} pages: every figure block matches results/, no stray number in the prose")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
