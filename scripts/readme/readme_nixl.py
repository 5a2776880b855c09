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


SWEEP = (("h100-nixl-256m.csv", "as UCX chooses"),
         ("h100-nixl-256m-ucx-cuda-ipc-max-streams-1.csv", "`UCX_CUDA_IPC_MAX_STREAMS=1`"),
         ("h100-nixl-256m-ucx-cuda-ipc-cache-n.csv", "`UCX_CUDA_IPC_CACHE=n`"))
GET_ZCOPY = "h100-nixl-read-ucx-get-zcopy-y.csv"


def _transport(run, variant: str, nbytes: int) -> str:
    said = run.frame[(run.frame["variant"] == variant) & (run.frame["bytes"] == nbytes)
                     & (run.frame["src"].astype(str) == "0")]["transport"]
    return ", ".join(t for t in dict.fromkeys(said) if t) or "—"


def nixl_ucx_sweep(runs: Runs) -> str:
    """One H100, 256 MiB on one GPU: the WRITE under three cuda_ipc settings, the READ's transport, and the
    READ with get-zcopy forced on."""
    rows = []
    for name, setting in SWEEP:
        run = runs[name]
        keys = dict(scenario="nixl", src="0", dst="0", bytes=256 << 20)
        hand = run.fig(**keys, variant="write", measure="handoff")
        stream = run.fig(**keys, variant="write", measure="stream")
        ceiling = run.fig(scenario="nixl", path="ceiling", variant="d2d@0", bytes=256 << 20)
        read = run.fig(**keys, variant="read", measure="stream")
        rows.append([setting, f"{seconds(hand)} µs ({fraction(hand)})", f"{seconds(stream)} µs ({fraction(stream)})",
                     f"{seconds(ceiling)} µs", f"{gbps(read)} GB/s, {_transport(run, 'read', 256 << 20)}"])
    header = ["one H100, 256 MiB, GPU 0 → GPU 0", "write hand-off", "write stream", "ceiling d2d@0",
              "read stream, UCX's report"]
    run = runs[GET_ZCOPY]
    cells = [run.fig(scenario="nixl-read", variant="read", measure="stream", src="0", dst="0", bytes=n)
             for n in (1 << 20, 256 << 20)]
    zcopy = (f"With `UCX_CUDA_IPC_ENABLE_GET_ZCOPY=y` set before the run (`results/{GET_ZCOPY}`) the READ took "
             f"{_transport(run, 'read', 256 << 20)}: {gbps(cells[0])} GB/s at 1 MiB and {gbps(cells[1])} GB/s at "
             f"256 MiB ({fraction(cells[1])} of `d2d@0`).")
    return (table(header, rows) + "\n\n" + zcopy + "\n\n"
            + source(*(n for n, _ in SWEEP), GET_ZCOPY, note="; median [95% interval] (% of the d2d@0 ceiling "
                     "measured in the same run); each setting its own run, `note.nixl.ucx_settings` in its header"))


def nixl_gap(runs: Runs) -> str:
    """The gap to the link in figures: the fixed cost per request, 1 MiB, and 256 MiB against the copy."""
    run = runs[NIXL_GPU]
    links = (("0", "0", "d2d@0"), ("0", "1", "peer@0>1"))

    def fig(variant, measure, src, dst, nbytes):
        return run.fig(scenario="nixl", variant=variant, measure=measure, src=src, dst=dst, bytes=nbytes)

    def ceiling(key, nbytes):
        return run.fig(scenario="nixl", path="ceiling", variant=key, bytes=nbytes)

    figures = [(fig(v, m, s, d, n), k) for s, d, k in links for v in ("write", "read") for m in ("stream", "handoff")
               for n in (4 << 10, 1 << 20)]
    small = [f["median_s"] * 1e6 for f, _ in figures if f["bytes"] == 4 << 10]
    copies = [ceiling(k, 4 << 10)["median_s"] * 1e6 for _, _, k in links]
    mid = [f for f, _ in figures if f["bytes"] == 1 << 20]
    shares = [f["median_gbps"] / ceiling(k, 1 << 20)["median_gbps"] for f, k in figures if f["bytes"] == 1 << 20]

    def at(variant, src, dst, key):
        f = fig(variant, "stream", src, dst, 256 << 20)
        c = ceiling(key, 256 << 20)
        return f"{f['median_s'] * 1e6:.0f} µs", f"{c['median_s'] * 1e6:.0f} µs", f"{fraction(f)}"

    nv_read, nv_write = at("read", "0", "1", "peer@0>1"), at("write", "0", "1", "peer@0>1")
    one_write, one_read = at("write", "0", "0", "d2d@0"), at("read", "0", "0", "d2d@0")
    return (f"Every request pays a fixed cost of {min(small):.1f}–{max(small):.1f} µs (the 4 KiB figures, against a "
            f"copy of {min(copies):.2f}–{max(copies):.2f} µs in one process), which holds 1 MiB to "
            f"{min(f['median_gbps'] for f in mid):.1f}–{max(f['median_gbps'] for f in mid):.1f} GB/s "
            f"({min(shares):.0%}–{max(shares):.0%} of the link). At 256 MiB, streamed: the NV18 READ {nv_read[0]} "
            f"against the peer copy's {nv_read[1]} ({nv_read[2]}), the NV18 WRITE {nv_write[0]} ({nv_write[2]}); on "
            f"one GPU, time-sliced, the WRITE {one_write[0]} against the device copy's {one_write[1]} "
            f"({one_write[2]}) and the READ {one_read[0]} ({one_read[2]}).\n\n" + source(NIXL_GPU))


NIXL_RENDERERS.update({"nixl-ucx-sweep": nixl_ucx_sweep, "nixl-gap": nixl_gap})


NOTIF_PROBE = "cpu-probe-nixl-notif.txt"


def nixl_notif_probe(runs: Runs) -> str:
    """What scripts/probes/probe_nixl_notif.py printed in its two runs: µs from the post to DONE and to the
    notification seen, per way of waiting and of sending the notification."""
    cells: dict[tuple[str, str], list[str]] = {}
    runs_seen = 0
    for line in runs.text(NOTIF_PROBE).splitlines():
        if line.startswith("# run"):
            runs_seen += 1
            continue
        fields = line.split()
        if len(fields) == 4 and fields[2].replace(".", "", 1).isdigit():
            cells.setdefault((fields[0], fields[1]), []).extend(fields[2:])
    header = ["initiator waits", "notification"] + [f"run {r + 1}: {what}" for r in range(runs_seen)
                                                    for what in ("DONE", "seen")]
    rows = [[waits, note] + values for (waits, note), values in cells.items()]
    return table(header, rows, right_from=2) + "\n\n" + source(
        NOTIF_PROBE, note="; not a run of this tool: a 4 KiB WRITE host to host between two bare processes, "
        "µs from the post, median of its repetitions")


NIXL_RENDERERS["nixl-notif-probe"] = nixl_notif_probe
