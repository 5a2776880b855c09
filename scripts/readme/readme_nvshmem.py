"""The README's NVSHMEM comparison (NVSHMEM_RENDERERS): the tool's nvshmem path across an NV18 pair
beside NVIDIA's own perftests built and run on the same node one after the other
(scripts/device/nvshmem-perftest.sh), from results/h200x2-nvshmem-pair.csv and the perftests'
output, results/h200x2-nvshmem-perftest.txt."""

from __future__ import annotations

import re
from collections.abc import Callable

from readme_lib import FigureError, Runs, gbps, seconds, source, table

TOOL = "h200x2-nvshmem-pair.csv"
PERFTEST = "h200x2-nvshmem-perftest.txt"
SIZES = ((1 << 20, "1 MiB"), (64 << 20, "64 MiB"), (256 << 20, "256 MiB"))


def perftest_tables(text: str) -> dict[tuple[str, str], dict[int, float]]:
    """(test, tag) -> {bytes: figure} from rank 0's table of each run (GB/s, or µs per round trip)."""
    out: dict[tuple[str, str], dict[int, float]] = {}
    for block in text.split("===== ")[1:]:
        head = re.match(r"(\S+) \[([^\]]+)\]", block)
        if not head:
            continue
        rank0 = block.split("----- rank 1")[0]
        rows = re.findall(r"^(\d+)\s+\S+\s+([\d.]+)\s*$", rank0, flags=re.M)
        out.setdefault((head.group(1), head.group(2)), {}).update({int(n): float(v) for n, v in rows})
    return out


def perftest(runs: Runs, test: str, tag: str, nbytes: int) -> float:
    found = perftest_tables(runs.text(PERFTEST)).get((test, tag), {})
    if nbytes not in found:
        raise FigureError(f"{PERFTEST}: no {test} [{tag}] figure at {nbytes} bytes")
    return found[nbytes]


def nvshmem_perftest(runs: Runs) -> str:
    """Device-initiated put and get (GB/s) and put+signal latency (µs one way), tool against perftest."""
    run = runs[TOOL]
    rows = []
    for variant, test in (("device-put", "shmem_put_bw"), ("device-get", "shmem_get_bw")):
        tool, theirs = [], []
        for nbytes, _ in SIZES:
            tool.append(gbps(run.fig(scenario="nvshmem", variant=variant, measure="stream", bytes=nbytes)))
            theirs.append(f"{perftest(runs, test, 'c32t512', nbytes):.1f}")
        rows.append([f"nvshmem/{variant} (this tool), GB/s", *tool])
        rows.append([f"{test} -c 32 -t 512 (perftest), GB/s", *theirs])
    for variant in ("put", "get"):
        figures = [run.fig(scenario="nvshmem", variant=variant, measure="stream", bytes=n) for n, _ in SIZES]
        rows.append([f"nvshmem/{variant} (host-initiated, on a stream; this tool), GB/s", *map(gbps, figures)])
    rows.append(["ceiling peer@0>1 (a copy in one process), GB/s",
                 *[gbps(run.fig(scenario="nvshmem", path="ceiling", variant="peer@0>1/producer", bytes=n))
                   for n, _ in SIZES]])
    bw = table(["GPU 0 → GPU 1, NV18", *[label for _, label in SIZES]], rows)
    lat = []
    for nbytes, label in ((4, "4 B"), (4096, "4 KiB")):
        mine = run.fig(scenario="nvshmem", variant="device-putsig", measure="pingpong", bytes=nbytes)
        round_trip = perftest(runs, "shmem_put_signal_ping_pong_latency", "small", nbytes)
        lat.append([label, seconds(mine) + " µs", f"{round_trip / 2:.2f} µs"])
    lt = table(["put+signal, one way", "nvshmem/device-putsig (one warp; this tool)",
                "shmem_put_signal_ping_pong_latency (one thread; perftest, round trip / 2)"], lat)
    gpu = run.meta.get("gpu.0.name", "GPU")
    return (bw + "\n\n" + lt + "\n\n" + comparison(runs) + "\n\n"
            + source(TOOL, PERFTEST, note=f"; 2× {gpu}, the same node; this tool's figures median [95% interval], "
                     "the perftests' as they print them (their mean over 200 iterations in one kernel, or 500 "
                     "round trips)"))


def comparison(runs: Runs) -> str:
    """What the tables say, in figures: agreement at the large sizes, the 1 MiB gap, the share of the ceilings."""
    run = runs[TOOL]

    def tool(variant: str, nbytes: int) -> float:
        return float(run.fig(scenario="nvshmem", variant=variant, measure="stream", bytes=nbytes)["median_gbps"])

    def ceiling(variant: str, nbytes: int) -> float:
        return float(run.fig(scenario="nvshmem", path="ceiling", variant=variant, bytes=nbytes)["median_gbps"])

    pairs = (("device-put", "shmem_put_bw"), ("device-get", "shmem_get_bw"))
    agree = max(abs(tool(v, n) / perftest(runs, t, "c32t512", n) - 1) for v, t in pairs for n in (64 << 20, 256 << 20))
    lower = [1 - tool(v, 1 << 20) / perftest(runs, t, "c32t512", 1 << 20) for v, t in pairs]
    put_us = (1 << 20) / tool("device-put", 1 << 20) / 1e3
    their_us = (1 << 20) / perftest(runs, "shmem_put_bw", "c32t512", 1 << 20) / 1e3
    big = 256 << 20
    shares = [tool(v, big) / ceiling("peer@0>1/producer", big) for v, _ in pairs]
    sm = ceiling("peer-sm@0>1/producer", big)
    return (f"In figures: at 64 and 256 MiB the device-initiated put and get agree with the perftests within "
            f"{agree:.1%}; at 1 MiB they are {min(lower):.0%}–{max(lower):.0%} lower (a 1 MiB put costs "
            f"{put_us:.1f} µs a message in the tool against {their_us:.1f} µs in the perftest); at 256 MiB the "
            f"device-initiated ones reach {min(shares):.0%}–{max(shares):.0%} of the peer copy's ceiling, where an "
            f"SM copy kernel in one process reaches {sm:.0f} GB/s ({sm / ceiling('peer@0>1/producer', big):.0%}, "
            f"the `peer-sm@0>1` ceiling).")


PROBES = (("h100-probe-nvshmem-put.txt", "H100"), ("h200-probe-nvshmem-put.txt", "H200"))


def probe_columns(text: str) -> dict[str, dict[str, dict[int, float]]]:
    """PE -> column -> {bytes: ns per copy} from scripts/probes/probe_nvshmem_put.py's tables."""
    out: dict[str, dict[str, dict[int, float]]] = {}
    pe, columns = "", []
    for line in text.splitlines():
        if line.startswith("PE "):
            pe = line.split(":")[0]
        elif line.strip().startswith("bytes"):
            columns = line.split("(")[0].split()[1:]
        elif pe and columns and line.split() and line.split()[0].isdigit():
            fields = line.split()
            for i, column in enumerate(columns):
                out.setdefault(pe, {}).setdefault(column, {})[int(fields[0])] = float(fields[1 + 2 * i])
    if not out:
        raise FigureError("no probe tables found")
    return out


def probe_put(runs: Runs) -> str:
    """A put against cudaMemcpyAsync into the same peer buffer, one process; and one copy in the two PEs."""
    rows = []
    for name, gpu in PROBES:
        tables = probe_columns(runs.text(name))
        put = [abs(t["put"][n] / t["ce-peer"][n] - 1) for t in tables.values() for n in t["put"]]
        sizes = sorted({n for t in tables.values() for n in t["ce"]})
        pes = sorted(tables)
        between = [abs(tables[pes[0]]["ce"][n] / tables[pes[1]]["ce"][n] - 1) for n in sizes]
        rows.append([gpu, f"`{name}`", f"{max(put):.1%}", f"{max(between):.1%}"])
    header = ["GPU", "the probe's output", "a put against `cudaMemcpyAsync` into the same peer buffer, largest "
              "difference over sizes and PEs", "one `cudaMemcpyAsync` in PE 0 against PE 1, largest difference"]
    return table(header, rows, right_from=2) + "\n\n" + (
        "<sub>Rendered from `results/h100-probe-nvshmem-put.txt`, `results/h200-probe-nvshmem-put.txt` by "
        "`scripts/readme/readme_figures.py`; medians of ns per copy, 4 B to 256 MiB, as the probe printed "
        "them.</sub>")


NVSHMEM_RENDERERS: dict[str, Callable[[Runs], str]] = {"nvshmem-perftest": nvshmem_perftest,
                                                         "probe-nvshmem-put": probe_put}
