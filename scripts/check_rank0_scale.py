"""Rank 0's work in a fleet check, offline: N node reports fed through `check`'s own callbacks.

    python scripts/check_rank0_scale.py 1000:2 200:8

Each argument is NODES:GPUS, a fleet of NODES simulated nodes of GPUS GPUs (2 or 8):

  2  each report a real node's: the rows, facts and figures of results/h200x2-check.csv
  8  built from it and a 4-GPU run's per-pair rows (results/h200x4-pairs-all.csv): GPU 0's rows
     of the 2-GPU check, its staging and ipc rows at 256 MiB again on GPUs 1-7 (as the check
     measures every GPU), and for each of the 56 ordered pairs the peer rows at the check's
     sizes of a pair of the 4-GPU run that swept peer (one per link class), in turn, renumbered

What is timed is rank 0's part, as `fleet.run` does it (fleet.run is replaced by a loop): for
each report, unpickling it as MPI's recv does (each node packed and pickled its own report:
not timed, the node's work) and the CLI's on_report (its rows appended to the CSV as the text
the node formatted); then the fleet's outliers (the `again` callback), and the end: the fleet
judgement, the final header, the JSON lines. Prints one line per fleet, within 80 columns.
"""

from __future__ import annotations

import pickle
import re
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHECK_SIZES = (0, 4 << 10, 256 << 20)  # the check's GPU sizes (0: set-up rows)
BIG = 256 << 20


def _rows(path: Path):
    from gpuipc_bench.results import read_results

    frame, meta = read_results(path)
    rows = [{k: (None if v != v else v) for k, v in r.items()} for r in frame.to_dict("records")]
    return rows, meta


def _renumber(row: dict, to: dict[str, str]) -> dict:
    """The row with its GPU indices (src, dst, and those in variant and ceiling) mapped by `to`."""
    def sub(text):
        return re.sub(r"(?<=[@>])(\d+)", lambda m: to.get(m.group(1), m.group(1)), str(text or ""))

    return dict(row, src=to.get(str(row["src"]), row["src"]), dst=to.get(str(row["dst"]), row["dst"]),
                variant=sub(row["variant"]), ceiling=sub(row["ceiling"]))


def two_gpu_node():
    """(rows, facts) of one 2-GPU node: the committed check."""
    rows, meta = _rows(REPO / "results" / "h200x2-check.csv")
    node = meta["check.nodes"]
    facts = {k[len(f"node.{node}."):]: v for k, v in meta.items() if k.startswith(f"node.{node}.")}
    return [dict(r, node="") for r in rows], facts


def eight_gpu_node():
    """(rows, facts) of one 8-GPU node, built as the module says."""
    rows, facts = two_gpu_node()
    mine = [r for r in rows if r["scenario"] != "peer" and str(r["src"]) in ("0", "host")
            and str(r["dst"]) in ("0", "host")]
    out = list(mine)
    for gpu in range(1, 8):
        again = [r for r in mine if r["scenario"] in ("staging", "ipc") and r["bytes"] in (0, BIG)]
        out += [_renumber(r, {"0": str(gpu)}) for r in again]
    pairs, _ = _rows(REPO / "results" / "h200x4-pairs-all.csv")
    by_pair: dict[tuple[str, str], list[dict]] = {}
    for r in pairs:
        if r["scenario"] == "peer" and r["bytes"] in CHECK_SIZES:
            by_pair.setdefault((str(r["src"]), str(r["dst"])), []).append(dict(r, node=""))
    measured = sorted(by_pair)  # the pairs whose peer path the 4-GPU run swept (one per link class)
    ordered = [(a, b) for a in range(8) for b in range(8) if a != b]
    for k, (a, b) in enumerate(ordered):
        src, dst = measured[k % len(measured)]
        out += [_renumber(r, {src: str(a), dst: str(b)}) for r in by_pair[(src, dst)]]
    facts = dict(facts, gpu_count="8")
    for gpu in range(2, 8):
        facts.update({k.replace("gpu.1.", f"gpu.{gpu}.", 1): v for k, v in facts.items() if k.startswith("gpu.1.")})
    facts.update({f"link.{a}-{b}": facts.get("link.0-1", "NV18") for a in range(8) for b in range(a + 1, 8)})
    return out, facts


def fleet_of(nodes: int, gpus: int):
    """(node names, one report's rows and facts, its figures, a function giving node k's pickled report)."""
    import pandas as pd

    from gpuipc_bench.check.figures import figures_of
    from gpuipc_bench.check.node import NodeReport
    from gpuipc_bench.results import COLUMNS, new_row, typed_frame
    from gpuipc_bench.results.writing import format_rows

    rows, facts = two_gpu_node() if gpus == 2 else eight_gpu_node()
    checked = [new_row(**r) for r in rows]
    figures = figures_of(typed_frame(pd.DataFrame.from_records(checked, columns=list(COLUMNS))))
    names = [f"n{k:04d}" for k in range(nodes)]
    text = format_rows(dict(r, node="@NODE@") for r in checked)

    def pickled(k: int) -> bytes:  # the node's work: its report packed (rows formatted) and pickled
        name = names[k]
        return pickle.dumps(NodeReport(name, dict(facts, host=name), [], [], list(figures),
                                       csv=text.replace("@NODE@", name), row_count=len(rows)))

    return names, len(rows), pickled


def measure(nodes: int, gpus: int) -> str:
    from gpuipc_bench.check import expect, fleet
    from gpuipc_bench.cli import check as cli_check

    names, row_count, pickled = fleet_of(nodes, gpus)
    timing = {"node": 0.0}

    def fake_run(expectations, tolerance, deadline, timeout, on_start, on_report, again=None, on_own_report=None):
        outcome = fleet.Fleet({}, {}, names)
        on_start(names, {})
        for k in range(len(names)):
            start = time.perf_counter()
            data = pickled(k)
            timing["node"] += time.perf_counter() - start  # not rank 0's
            report = pickle.loads(data)
            outcome.reports[report.node] = report
            on_report(report)
        if again is not None:
            again({n: [r] for n, r in outcome.reports.items()})
        return outcome

    fleet.run = fake_run
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        cli_check._check(expect.load(), None, "json", Path(tmp) / "fleet.csv", None, 600.0, 60.0, True,
                         Path(tmp) / "fleet.jsonl")
        total = time.perf_counter() - start - timing["node"]
        size = (Path(tmp) / "fleet.csv").stat().st_size
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return (f"{nodes} x {gpus}-GPU nodes, {row_count} rows each: rank 0 {total:.1f} s; "
            f"CSV {size / 1e6:.0f} MB; max RSS {rss:.0f} MiB")


def main(args: list[str]) -> None:
    for arg in args or ["100:2"]:
        nodes, _, gpus = arg.partition(":")
        if not nodes.isdigit() or gpus not in ("", "2", "8"):
            sys.exit(f"Error: {arg}: give NODES:GPUS, GPUS 2 or 8 (1000:2, 200:8)")
        print(measure(int(nodes), int(gpus or 2)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
