"""Rank 0's work in a fleet check, offline: N node reports fed through `check`'s own callbacks.

    python scripts/check_rank0_scale.py 100 200 1000

Each report is a real node's: the rows and facts of results/h200x2-check.csv (a 2-GPU node),
its figures. fleet.run is replaced by a loop that hands rank 0's callbacks the reports, so
what is timed is rank 0's part: appending each report to the CSV and the JSON lines, then the
fleet judgement and the outputs (JSON lines; no heatmap). Prints one line per N.
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main(counts: list[int]) -> None:
    from gpuipc_bench.check import expect, fleet
    from gpuipc_bench.check.figures import figures_of
    from gpuipc_bench.check.node import NodeReport
    from gpuipc_bench.cli import check as cli_check
    from gpuipc_bench.results import read_results

    frame, meta = read_results(REPO / "results" / "h200x2-check.csv")
    node = meta["check.nodes"]
    facts = {k[len(f"node.{node}."):]: v for k, v in meta.items() if k.startswith(f"node.{node}.")}
    rows = [{k: (None if v != v else v) for k, v in r.items()} for r in frame.to_dict("records")]
    figures = figures_of(frame)
    for n in counts:
        names = [f"n{k:04d}" for k in range(n)]
        timing = {}

        def fake_run(expectations, tolerance, deadline, timeout, on_start, on_report, again=None,
                     on_own_report=None):
            on_start(names, {})
            start = time.perf_counter()
            for name in names:
                on_report(NodeReport(name, dict(facts, host=name), [dict(r, node=name) for r in rows], [],
                                     list(figures)))
            timing["reports"] = time.perf_counter() - start
            return fleet.Fleet({}, {}, names)

        reports: dict = {}

        def keep_reports(expectations, tolerance, deadline, timeout, on_start, on_report, again=None,
                         on_own_report=None):
            def on_report_kept(report):
                reports[report.node] = report
                on_report(report)

            outcome = fake_run(expectations, tolerance, deadline, timeout, on_start, on_report_kept)
            outcome.reports = reports
            return outcome

        fleet.run = keep_reports
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            cli_check._check(expect.load(), None, "json", Path(tmp) / "fleet.csv", None, 600.0, 60.0, True,
                             Path(tmp) / "fleet.jsonl")
            total = time.perf_counter() - start
            size = (Path(tmp) / "fleet.csv").stat().st_size
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{n} nodes x {len(rows)} rows: reports {timing['reports']:.1f} s, after them "
              f"{total - timing['reports']:.1f} s, total {total:.1f} s; CSV {size / 1e6:.0f} MB; "
              f"max RSS {rss:.0f} MiB", flush=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [100])
