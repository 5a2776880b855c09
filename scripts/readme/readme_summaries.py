"""The README's one-screen answers (SUMMARY_RENDERERS): what `gpuipc-bench run` prints at its
end, rendered at 80 columns from a reference run by this version's rules, as
`python scripts/render_summary.py results/RUN.csv` prints it."""

from __future__ import annotations

import io
from collections.abc import Callable

from readme_lib import Runs


def answer(name: str) -> Callable[[Runs], str]:
    def render(runs: Runs) -> str:
        from rich.console import Console

        from gpuipc_bench.report import render_run_summary

        run = runs[name]
        out = io.StringIO()
        console = Console(file=out, width=80, color_system=None, highlight=False, soft_wrap=False)
        render_run_summary(run.frame, run.meta, console, source=f"results/{name}")
        return f"```text\n{out.getvalue().rstrip()}\n```"

    return render


SUMMARY_RENDERERS: dict[str, Callable[[Runs], str]] = {
    "answer-h100-modes": answer("h100-both-modes-default.csv"),
    "answer-h100x2-pairs": answer("h100x2-nvlink-pairs-all.csv"),
}
