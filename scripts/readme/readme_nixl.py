"""The README's NIXL figures (NIXL_RENDERERS): host memory to host memory between two CPU
processes, UCX's own choice against UCX forced to tcp, from results/cpu-nixl-host.csv."""

from __future__ import annotations

from collections.abc import Callable

from readme_lib import Runs, fraction, gbps, seconds, source, table

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


NIXL_GPU = "h200x2-nixl-default.csv"  # `-s nixl` on the two-GPU node: same GPU (time-sliced) and across NV18
NIXL_TLS = "h200x2-nixl-default-ucx-tls-cuda-copy-tcp.csv"  # the same with UCX_TLS=cuda_copy,tcp set before it
GPU_SIZES = ((4 << 10, "4 KiB"), (1 << 20, "1 MiB"), (256 << 20, "256 MiB"))
LINKS = (("0", "0", "one GPU"), ("0", "1", "NV18"), ("host", "0", "one GPU"))


def nixl_gpu(runs: Runs) -> str:
    """Per link, variant and measure: µs at 4 KiB, GB/s at 1 and 256 MiB (with the share of the
    link's ceiling measured in the same run), and UCX's report; then the ceilings."""
    run = runs[NIXL_GPU]
    rows = []
    for src, dst, link in LINKS:
        ends = f"{'host' if src == 'host' else 'GPU ' + src} → GPU {dst} ({link})"
        variants = ("write-from-dram", "read-from-dram") if src == "host" else ("write", "read")
        for variant in variants:
            for measure in ("stream", "handoff"):
                cells = []
                for nbytes, _ in GPU_SIZES:
                    keys = dict(scenario="nixl", variant=variant, measure=measure, src=src, dst=dst, bytes=nbytes)
                    if not run.has(**keys):
                        cells.append("—")
                        continue
                    row = run.fig(**keys)
                    cells.append(seconds(row) + " µs" if nbytes < (1 << 20) else
                                 gbps(row) + " GB/s" + (f" ({fraction(row)})" if nbytes > (1 << 20) else ""))
                said = run.frame[(run.frame["variant"] == variant) & (run.frame["src"].astype(str) == src)
                                 & (run.frame["dst"].astype(str) == dst) & (run.frame["bytes"] == 1 << 20)]["transport"]
                rows.append([ends, f"{variant} {measure}"] + cells + [", ".join(dict.fromkeys(said))])
    for key, src, dst in (("d2d@0", "0", "0"), ("peer@0>1", "0", "1"), ("h2d@0", "host", "0")):
        cells = []
        for nbytes, _ in GPU_SIZES:
            keys = dict(scenario="nixl", path="ceiling", variant=key, bytes=nbytes)
            cells.append((seconds(run.fig(**keys)) + " µs" if nbytes < (1 << 20) else gbps(run.fig(**keys)) + " GB/s")
                         if run.has(**keys) else "—")
        rows.append([f"ceiling {key}", "one process's copy"] + cells + ["—"])
    header = ["link", "variant", *[label for _, label in GPU_SIZES], "UCX's report at 1 MiB"]
    gpu = run.meta.get("gpu.0.name", "GPU")
    gaps = any("—" in c for r in rows for c in r[2:-1])
    missing = "; — not measured (the run was stopped in its last group)" if gaps else ""
    return (table(header, rows, right_from=2) + "\n\n"
            + source(NIXL_GPU, note=f"; 2× {gpu}, driver {run.meta.get('driver', '?')}; median [95% interval] "
                     f"(% of the link's ceiling measured in the same run){missing}"))


def nixl_blocks(runs: Runs) -> str:
    """One request of N equal descriptors against one descriptor, streamed (GB/s)."""
    run = runs[NIXL_GPU]
    rows = []
    for src, dst, link in LINKS[:2]:
        for variant in ("write", "write-16blocks", "write-256blocks", "write-4096blocks"):
            cells = []
            for nbytes in (1 << 20, 256 << 20):
                keys = dict(scenario="nixl", variant=variant, measure="stream", src=src, dst=dst, bytes=nbytes)
                cells.append(gbps(run.fig(**keys)) + " GB/s" if run.has(**keys) else "—")
            per = run.fig(scenario="nixl", variant=variant, measure="stream", src=src, dst=dst, bytes=1 << 20)
            blocks = int(variant.split("-")[1].removesuffix("blocks")) if "blocks" in variant else 1
            cells.append(f"{per['median_s'] * 1e6 / blocks:.2f} µs")
            rows.append([f"GPU {src} → GPU {dst} ({link})", variant] + cells)
    header = ["link", "variant", "1 MiB", "256 MiB", "per descriptor at 1 MiB"]
    return table(header, rows, right_from=2) + "\n\n" + source(NIXL_GPU, note="; median [95% interval]")


def gpu_fallback(runs: Runs) -> str:
    """The answer's transport-fallback line with cuda_ipc taken away by UCX_TLS, at 80 columns."""
    from gpuipc_bench.analysis.model import analyse
    from gpuipc_bench.report.answer import fallback_lines, wrap

    run = runs[NIXL_TLS]
    lines = [text for text, _ in wrap(fallback_lines(analyse(run.frame, run.meta)), 80)]
    return ("```text\n" + "\n".join(lines) + "\n```\n\n"
            + source(NIXL_TLS, note="; UCX_TLS=cuda_copy,tcp set before the run"))


NIXL_RENDERERS.update({"nixl-gpu": nixl_gpu, "nixl-blocks": nixl_blocks, "nixl-gpu-fallback": gpu_fallback})
