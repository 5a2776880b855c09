"""The README's NIXL figures (NIXL_RENDERERS): host memory to host memory between two CPU
processes, UCX's own choice against UCX forced to tcp, from results/cpu-nixl-host.csv."""

from __future__ import annotations

from collections.abc import Callable

from readme_figures import Runs, gbps, seconds, source, table

NIXL_HOST = "cpu-nixl-host.csv"
FALLBACK = "cpu-nixl-host-ucx-tls-tcp.csv"
SIZES = ((4 << 10, "4 KiB"), (1 << 20, "1 MiB"), (16 << 20, "16 MiB"))


def nixl_host(runs: Runs) -> str:
    """Per variant and measure: the median [interval] at three sizes (µs at 4 KiB, GB/s above),
    and the transport UCX reported."""
    run = runs[NIXL_HOST]
    frame = run.frame
    rows = []
    for scenario in ("nixl-host", "nixl-host-tcp"):
        suffix = "" if scenario == "nixl-host" else ":tcp"
        for variant in ("read", "write"):
            for measure in ("handoff", "stream"):
                cells = []
                for nbytes, _ in SIZES:
                    row = run.fig(scenario=scenario, variant=variant + suffix, measure=measure, bytes=nbytes)
                    cells.append(seconds(row) + " µs" if nbytes < (1 << 20) else gbps(row) + " GB/s")
                said = frame[(frame["scenario"] == scenario) & (frame["variant"] == variant + suffix)
                             & (frame["bytes"] == 1 << 20)]["transport"]
                rows.append([f"{variant + suffix} {measure}"] + cells + [", ".join(dict.fromkeys(said))])
    ceiling = [run.fig(scenario="nixl-host", path="ceiling", variant="memcpy@host", bytes=n) for n, _ in SIZES]
    rows.append(["memcpy@host (one process)"] + [seconds(c) + " µs" if n < (1 << 20) else gbps(c) + " GB/s"
                                                 for c, (n, _) in zip(ceiling, SIZES)] + ["—"])
    header = ["nixl-host variant"] + [label for _, label in SIZES] + ["UCX's report at 1 MiB"]
    machine = f"{run.meta.get('cpu', 'CPU')}, {run.meta.get('cpu_count', '?')} CPUs, no GPU"
    return (table(header, rows) + "\n\n"
            + source(NIXL_HOST, note=f"; {machine}; median [95% interval]"))


def fallback(runs: Runs) -> str:
    """The answer's transport-fallback line of a run with UCX_TLS=tcp set before it, at 80 columns."""
    from gpuipc_bench.analysis.model import analyse
    from gpuipc_bench.report.answer import fallback_lines, wrap

    run = runs[FALLBACK]
    lines = [text for text, _ in wrap(fallback_lines(analyse(run.frame, run.meta)), 80)]
    return "```text\n" + "\n".join(lines) + "\n```\n\n" + source(FALLBACK, note="; UCX_TLS=tcp set before the run")


NIXL_RENDERERS: dict[str, Callable[[Runs], str]] = {"nixl-host": nixl_host, "nixl-fallback": fallback}
