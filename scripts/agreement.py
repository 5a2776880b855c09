"""How far repeated runs agree (issue 33's bar), from their `report --format json` files.

    python scripts/agreement.py run-1.json run-2.json run-3.json [--reference run-20.json]

For each run: its decisions, how many are open at the class level (outcome undecided) and how many
stand on two replicas. For each pair of runs: the decisions whose mechanism class, and whose chosen
API, are the same (the bar: every class and at least 95% of the APIs). With --reference (a run of
the same version on the same machine with 20 samples per group, `-n 20`): for each decision of
each run that has a next class, whether its runner-up ratio lies inside the reference's ratio
interval for that decision widened by its delta ([lo / (1 + delta), hi x (1 + delta)]); a
decision whose next class differs from the reference's is counted apart, and with
--reference-csv (that run's CSV) checked against the reference's own samples of the same two
APIs: their ratio interval as the analysis compares them (state by state where a time-sliced
hand-off's samples sit in two states), widened by the reference decision's delta. Exit 1 when a
bar is missed (any class changed, API agreement under 95%, over 10% open, a ratio outside), else 0.

    python scripts/agreement.py run-{1,2,3}.json --reference ref.json --reference-csv ref.csv
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections.abc import Callable

API_BAR, OPEN_BAR = 0.95, 0.10


def decisions(path: str) -> dict[tuple, dict]:
    """A `report --format json` file's first run's decisions by (src, dst, sharing, measure, bytes)."""
    with open(path) as f:
        found = json.load(f)["runs"][0]["decisions"]
    return {(d["src"], d["dst"], d["sharing"], d["measure"], d["bytes"]): d for d in found}


PairInterval = Callable[[tuple, str, str, float], "tuple[float, float] | None"]


def runner_up(run: dict[tuple, dict], reference: dict[tuple, dict],
              pair: PairInterval | None = None) -> tuple[int, int, int, list[str], int, int]:
    """(inside, outside, next class differs, the lines naming those outside, and of those that
    differ: inside, outside the reference's interval for the same two APIs, `pair`) for the
    decisions of `run` with a next class that `reference` decided too."""
    inside = outside = other = other_in = other_out = 0
    lines = []
    for key, d in run.items():
        ref = reference.get(key)
        if ref is None or not d.get("next") or not _finite(d.get("ratio")):
            continue
        delta = float(ref.get("delta") or 0)
        widen = 1 + delta
        if ref.get("next") != d["next"] or not (_finite(ref.get("ratio_lo")) and _finite(ref.get("ratio_hi"))):
            other += 1
            nxt = (d.get("next_members") or [None])[0]
            found = pair(key, d["choice"], nxt, delta) if pair is not None and nxt else None
            if found is None:
                continue
            lo, hi = found[0] / widen, found[1] * widen
            if lo <= d["ratio"] <= hi:
                other_in += 1
            else:
                other_out += 1
                lines.append(f"  {_name(key)}: next {d['next']} {d['ratio']:.3f}x, the reference's "
                             f"{nxt} against {d['choice']} [{lo:.3f}, {hi:.3f}]")
            continue
        lo, hi = ref["ratio_lo"] / widen, ref["ratio_hi"] * widen
        if lo <= d["ratio"] <= hi:
            inside += 1
        else:
            outside += 1
            lines.append(f"  {_name(key)}: next {d['next']} {d['ratio']:.3f}x, reference [{lo:.3f}, {hi:.3f}]")
    return inside, outside, other, lines, other_in, other_out


def pair_intervals(path: str) -> PairInterval:
    """From a run's CSV: f(decision key, choice, other, delta) -> the ratio interval of other's time
    over choice's at that size (None where either was not measured there), as the analysis
    compares two figures (analysis.verdict.decide: state by state where a time-sliced hand-off's
    samples sit in two states)."""
    import numpy as np

    from gpuipc_bench.analysis import stats
    from gpuipc_bench.analysis.summary import samples_by_condition, summarize
    from gpuipc_bench.analysis.verdict import HANDOFF, candidates
    from gpuipc_bench.paths import from_metadata
    from gpuipc_bench.results import read_results
    from gpuipc_bench.results.rows import base_mode

    frame, meta = read_results(path)
    paths = from_metadata(meta)
    samples = samples_by_condition(frame)
    rows = candidates(summarize(frame, samples=samples, paths=paths, meta=meta), paths)
    figures: dict[tuple, dict[str, stats.Prepared]] = {}
    for r in rows.itertuples(index=False):
        key = (str(r.src), str(r.dst), str(r.sharing), str(r.measure), int(r.bytes))
        figures.setdefault(key, {})[str(r.label)] = stats.Prepared(np.asarray(samples.get(r.condition, ()), float))

    def interval(key: tuple, choice: str, other: str, delta: float) -> tuple[float, float] | None:
        here = figures.get(key, {})
        if choice not in here or other not in here:
            return None
        switches = base_mode(key[2]) == "time-sliced" and key[3] == HANDOFF  # as decide() takes the states
        step = stats.state_step(list(here.values())) if switches else 0.0
        found = stats.compare_prepared(here[choice], here[other], delta, step=step)
        return (found.ratio_lo, found.ratio_hi) if _finite(found.ratio_lo) and _finite(found.ratio_hi) else None

    return interval


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
    parser.add_argument("--reference-csv", help="that run's CSV: checks the decisions whose next class differs too")
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
        pair = pair_intervals(args.reference_csv) if args.reference_csv else None
        for n, run in enumerate(runs, 1):
            inside, outside, other, lines, other_in, other_out = runner_up(run, reference, pair)
            ok &= outside == 0 and other_out == 0
            told = f" (the same two APIs in the reference: inside {other_in}, outside {other_out})" if pair else ""
            print(f"run {n} against the reference: runner-up ratio inside {inside}, outside {outside}, "
                  f"next class differs {other}{told}")
            print("\n".join(lines)) if lines else None
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
