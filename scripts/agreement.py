"""How far repeated runs agree (issue 33's bar), from their `report --format json` files.

    python scripts/agreement.py run-1.json run-2.json run-3.json [--reference run-20.json]

For each run: its decisions, how many are open at the class level (outcome undecided) and how many
stand on two replicas. For each pair of runs: the decisions whose mechanism class, and whose chosen
API, are the same (the bar: every class and at least 95% of the APIs). With --reference (a run of
the same version on the same machine with 20 samples per group, `-n 20`): for each decision of
each run that has a next class, whether its runner-up ratio lies inside the reference's ratio
interval for that decision widened by delta ([lo / (1 + delta), hi x (1 + delta)]). delta is the
larger of the reference decision's and the run decision's own: each is the effect floor its run
measured for that comparison (the offsets between its process sets), and the run's ratio claims
no more than its own; the count with the reference's delta alone is printed beside it. A
decision whose next class differs from the reference's is counted apart, and with
--reference-csv (that run's CSV) checked against the reference's own samples of the same two
APIs: their ratio interval and delta as the analysis compares them (analysis.verdict.decide:
state by state where a time-sliced hand-off's samples sit in two states; delta from the two
figures' ceilings, process sets and replicas). Exit 1 when a bar is missed (any class changed,
API agreement under 95%, over 10% open, a ratio outside), else 0.

    python scripts/agreement.py run-{1,2,3}.json --reference ref.json --reference-csv ref.csv
"""

from __future__ import annotations

import argparse
import dataclasses
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


PairInterval = Callable[[tuple, str, str], "tuple[float, float, float] | None"]


@dataclasses.dataclass
class RunnerUp:
    """One run's runner-up check against the reference: counts by the reference's delta alone
    (`strict`) and by the larger of the two runs' (the bar), the decisions whose next class is
    the reference's (`same`) and those checked against the reference's samples of their two
    APIs (`pair`), and the lines naming those outside."""

    same_in: int = 0
    same_out: int = 0
    other: int = 0  # next class differs from the reference's
    pair_in: int = 0
    pair_out: int = 0
    strict_out: int = 0  # outside by the reference's delta alone, either kind
    lines: list[str] = dataclasses.field(default_factory=list)


def runner_up(run: dict[tuple, dict], reference: dict[tuple, dict], pair: PairInterval | None = None) -> RunnerUp:
    """The runner-up check of `run`'s decisions with a next class that `reference` decided too."""
    found = RunnerUp()
    for key, d in run.items():
        ref = reference.get(key)
        if ref is None or not d.get("next") or not _finite(d.get("ratio")):
            continue
        own = float(d.get("delta") or 0)
        same = ref.get("next") == d["next"] and _finite(ref.get("ratio_lo")) and _finite(ref.get("ratio_hi"))
        if same:
            lo, hi, delta, what = ref["ratio_lo"], ref["ratio_hi"], float(ref.get("delta") or 0), "reference"
        else:
            found.other += 1
            nxt = (d.get("next_members") or [None])[0]
            got = pair(key, d["choice"], nxt) if pair is not None and nxt else None
            if got is None:
                continue
            (lo, hi, delta), what = got, f"the reference's {nxt} against {d['choice']}"
        widen = 1 + max(delta, own)
        inside = lo / widen <= d["ratio"] <= hi * widen
        found.strict_out += not lo / (1 + delta) <= d["ratio"] <= hi * (1 + delta)
        if same:
            found.same_in += inside
            found.same_out += not inside
        else:
            found.pair_in += inside
            found.pair_out += not inside
        if not inside:
            found.lines.append(f"  {_name(key)}: next {d['next']} {d['ratio']:.3f}x, {what} "
                               f"[{lo / widen:.3f}, {hi * widen:.3f}]")
    return found


def pair_intervals(path: str) -> PairInterval:
    """From a run's CSV: f(decision key, choice, other) -> (lo, hi, delta): the ratio interval of
    other's time over choice's at that size and the delta of that comparison, as the analysis
    compares the two figures (analysis.verdict.decide: delta from their ceilings, process sets and
    replicas; state by state where a time-sliced hand-off's samples sit in two states; the
    interval spanning each process set's, ratio_span); None where
    either was not measured there."""
    from gpuipc_bench.analysis import stats, verdict
    from gpuipc_bench.analysis.model import figures_by_size
    from gpuipc_bench.analysis.summary import samples_by_condition, samples_by_replica, summarize
    from gpuipc_bench.paths import from_metadata
    from gpuipc_bench.results import read_results

    frame, meta = read_results(path)
    paths = from_metadata(meta)
    samples = samples_by_condition(frame)
    replicas = samples_by_replica(frame)
    summary = summarize(frame, samples=samples, paths=paths, meta=meta)
    rows = verdict.candidates(summary, paths)
    ceilings = verdict.ceiling_times(summary)
    figures = {key: {f.label: f for f in found} for key, found in figures_by_size(rows, samples, replicas).items()}

    def interval(key: tuple, choice: str, other: str) -> tuple[float, float, float] | None:
        here = figures.get(key, {})
        if choice not in here or other not in here:
            return None
        a, b = here[choice], here[other]
        step = verdict.states_step(list(here.values()))
        delta = verdict.figures_delta(a, b, ceilings)
        found = stats.compare_prepared(stats.Prepared(a.samples), stats.Prepared(b.samples), delta, step=step)
        lo, hi = verdict.ratio_span(found, a, b, step)
        return (lo, hi, delta) if _finite(lo) and _finite(hi) else None

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
            got = runner_up(run, reference, pair)
            ok &= got.same_out == 0 and got.pair_out == 0
            told = (f" (the same two APIs in the reference: inside {got.pair_in}, outside {got.pair_out})"
                    if pair else "")
            print(f"run {n} against the reference: runner-up ratio inside {got.same_in}, outside {got.same_out}, "
                  f"next class differs {got.other}{told}; outside by the reference's delta alone "
                  f"{got.strict_out}")
            print("\n".join(got.lines)) if got.lines else None
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
