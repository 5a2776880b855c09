"""How far repeated runs agree (issue 33's bar), from their `report --format json` files.

    python scripts/agreement.py run-1.json run-2.json run-3.json [--reference run-20.json]

For each run: its decisions, how many are open at the class level (outcome undecided) and how many
stand on two replicas. For each pair of runs: the decisions whose mechanism class, and whose chosen
API, are the same (the bar: every class and at least 95% of the APIs). With --reference (a run of
the same version on the same machine with 20 samples per group, `-n 20`): for each decision of
each run that has a next class, whether its runner-up ratio lies inside the reference's ratio
interval for that decision widened by its delta ([lo / (1 + delta), hi x (1 + delta)]); a
decision whose next class differs from the reference's is counted apart. Exit 1 when a bar is
missed (any class changed, API agreement under 95%, over 10% open, a ratio outside), else 0.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys

API_BAR, OPEN_BAR = 0.95, 0.10


def decisions(path: str) -> dict[tuple, dict]:
    """A `report --format json` file's first run's decisions by (src, dst, sharing, measure, bytes)."""
    with open(path) as f:
        found = json.load(f)["runs"][0]["decisions"]
    return {(d["src"], d["dst"], d["sharing"], d["measure"], d["bytes"]): d for d in found}


def runner_up(run: dict[tuple, dict], reference: dict[tuple, dict]) -> tuple[int, int, int, list[str]]:
    """(inside, outside, next class differs, the lines naming those outside) for the decisions of
    `run` with a next class that `reference` decided too."""
    inside = outside = other = 0
    lines = []
    for key, d in run.items():
        ref = reference.get(key)
        if ref is None or not d.get("next") or not _finite(d.get("ratio")):
            continue
        if ref.get("next") != d["next"] or not (_finite(ref.get("ratio_lo")) and _finite(ref.get("ratio_hi"))):
            other += 1
            continue
        widen = 1 + float(ref.get("delta") or 0)
        lo, hi = ref["ratio_lo"] / widen, ref["ratio_hi"] * widen
        if lo <= d["ratio"] <= hi:
            inside += 1
        else:
            outside += 1
            lines.append(f"  {_name(key)}: next {d['next']} {d['ratio']:.3f}x, reference [{lo:.3f}, {hi:.3f}]")
    return inside, outside, other, lines


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _name(key: tuple) -> str:
    src, dst, sharing, measure, nbytes = key
    link = f" {src}>{dst}" if src != dst else ""
    return f"{sharing} {measure} {nbytes} B{link}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="report --format json files of repeated runs")
    parser.add_argument("--reference", help="report --format json of a 20-sample run of the same version")
    args = parser.parse_args(argv)
    runs = [decisions(p) for p in args.runs]
    ok = True
    for n, run in enumerate(runs, 1):
        found = list(run.values())
        opened = sum(d["outcome"] == "undecided" for d in found)
        within = sum(d["outcome"] == "within" for d in found)
        twice = sum((d.get("replicas") or 1) > 1 for d in found)
        share = opened / max(1, len(found))
        ok &= share <= OPEN_BAR
        print(f"run {n}: {len(found)} decisions, {opened} open at the class level ({share:.0%}), "
              f"{within} within X%, {twice} on two replicas")
    for (i, a), (j, b) in itertools.combinations(enumerate(runs, 1), 2):
        keys = sorted(set(a) & set(b), key=str)
        cls = sum(a[k]["class"] == b[k]["class"] for k in keys)
        api = sum(a[k]["choice"] == b[k]["choice"] for k in keys)
        ok &= cls == len(keys) and api >= API_BAR * len(keys)
        print(f"runs {i}-{j}: class agrees in {cls}/{len(keys)}, API in {api}/{len(keys)} "
              f"({api / max(1, len(keys)):.0%})")
        for k in keys:
            if a[k]["choice"] != b[k]["choice"]:
                print(f"  {_name(k)}: {a[k]['choice']} ({a[k]['class']}) | {b[k]['choice']} ({b[k]['class']})")
    if args.reference:
        reference = decisions(args.reference)
        for n, run in enumerate(runs, 1):
            inside, outside, other, lines = runner_up(run, reference)
            ok &= outside == 0
            print(f"run {n} against the reference: runner-up ratio inside {inside}, outside {outside}, "
                  f"next class differs {other}")
            print("\n".join(lines)) if lines else None
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
