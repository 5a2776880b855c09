"""The pages' figure blocks, one renderer each (RENDERERS), from the reference runs in results/.

Each renderer takes the loaded runs (readme_lib.Runs) and returns the block's Markdown: a table
(or a sentence) and the line naming its source files. readme_figures.py puts them in the pages
(README.md and docs/**/*.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from readme_lib import (
    KIB, MIB, RANGED, FigureError, Run, Runs, fraction, gbps, seconds, source, table, with_interval,
)
from readme_fleet import FLEET_RENDERERS
from readme_methods import METHOD_RENDERERS
from readme_nixl import NIXL_RENDERERS
from readme_nvshmem import NVSHMEM_RENDERERS
from readme_pairs import PAIR_RENDERERS
from readme_speed import SPEED_RENDERERS
from readme_summaries import SUMMARY_RENDERERS

H100, H200 = "h100-default.csv", "h200-default.csv"
MODES = "h100-default-modes.csv"
BOTH = "h100-both-modes-default.csv"  # the default run with persistent process sets, both sharing modes
NEIGHBOUR = "h100-busy-neighbour.csv"
PAIRS = "h100x2-nvlink-pairs-all.csv"
PAIRS_DEFAULT = "h100x2-nvlink-default.csv"
FORCED = "h100x2-nvlink-nccl-forced.csv"
NCCL_TESTS = "h100x2-nccl-tests-sendrecv.txt"


def same_gpu(run: Run, path: str, variant: str, measure: str, nbytes: int, sharing: str = "time-sliced",
             scenario: str | None = None):
    return run.fig(scenario=scenario or path, path=path, variant=variant, measure=measure, metric="bandwidth",
                   src="0", dst="0", bytes=nbytes, sharing=sharing)


def latency(run: Run, scenario: str, path: str, variant: str, nbytes: int, sharing: str, src="0", dst="0"):
    return run.fig(scenario=scenario, path=path, variant=variant, metric="latency", src=src, dst=dst,
                   bytes=nbytes, sharing=sharing)


def size(nbytes: int) -> str:
    from gpuipc_bench.sizes import format_size
    return format_size(nbytes)


# --------------------------------------------------------------------------- one GPU


def neighbour(runs: Runs) -> str:
    run = runs[NEIGHBOUR]
    modes = [("mps", "MPS"), ("mps+compute", "MPS, a compute-bound neighbour"),
             ("mps+copy", "MPS, a copying neighbour"), ("time-sliced", "time-sliced"),
             ("time-sliced+compute", "time-sliced, a compute-bound neighbour"),
             ("time-sliced+copy", "time-sliced, a copying neighbour")]
    keys = dict(scenario="ipc", path="ipc", variant="push", metric="bandwidth")
    rows = []
    for sharing, label in modes:
        hand = run.fig(**keys, sharing=sharing, measure="handoff", bytes=4 * KIB)
        stream = run.fig(**keys, sharing=sharing, measure="stream", bytes=64 * MIB)
        base = sharing.partition("+")[0]
        if base != sharing:
            b_hand = run.fig(**keys, sharing=base, measure="handoff", bytes=4 * KIB)
            b_stream = run.fig(**keys, sharing=base, measure="stream", bytes=64 * MIB)
            ratios = (f" ({hand['median_s'] / b_hand['median_s']:.1f}×)",
                      f" ({stream['median_gbps'] / b_stream['median_gbps']:.2f}×)")
        else:
            ratios = ("", "")
        scale = 1e3 if hand["median_s"] >= 1e-3 else 1e6
        rows.append([label, f"{seconds(hand, scale)} {'ms' if scale == 1e3 else 'µs'}{ratios[0]}",
                     f"{gbps(stream)} GB/s{ratios[1]}"])
    return table(["ipc/push, one H100", "4 KiB hand-off", "64 MiB stream"], rows) + "\n\n" + source(NEIGHBOUR)


MPS25 = "h100-mps25-quick.csv"


def mps25(runs: Runs) -> str:
    """ipc/push under MPS with every client at all the SMs and at a quarter of them (`mps_thread_pct`).

    From the rows: the summary groups by `sharing`, which is `mps` for both."""
    import statistics

    df = runs[MPS25].frame
    part = df[(df["scenario"] == "ipc") & (df["path"] == "ipc") & (df["variant"] == "push")
              & (df["metric"] == "bandwidth")]
    rows = []
    for measure, nbytes in (("handoff", 4 * KIB), ("handoff", 64 * MIB), ("stream", 4 * KIB), ("stream", 64 * MIB)):
        cells = []
        for pct in (100, 25):
            xs = part[(part["measure"] == measure) & (part["bytes"] == nbytes)
                      & (part["mps_thread_pct"].astype(str) == str(pct))]["bandwidth_gbps"].tolist()
            if not xs:
                raise FigureError(f"{MPS25}: no ipc/push {measure} at {nbytes} B with mps_thread_pct {pct}")
            cells.append(with_interval(statistics.median(xs), min(xs), max(xs), ranged=len(xs) < 6))
        rows.append([f"ipc/push {measure}", size(nbytes)] + cells)
    header = ["one H100, MPS", "size", "every client all SMs, GB/s", "every client 25% of the SMs, GB/s"]
    note = "; `--quick`, three samples a group" + RANGED
    return table(header, rows, right_from=2) + "\n\n" + source(MPS25, note=note)


BULK_ROWS = [
    ("ipc", "ce", "stream", "consumer pulls, copy engine"),
    ("ipc", "sm", "stream", "consumer pulls, kernel"),
    ("ipc", "push", "stream", "producer pushes"),
    ("ipc", "ce", "handoff", ""),
    ("staging", "pinned", "handoff", "D2H, then H2D"),
    ("staging", "pinned-hostsync", "handoff", "host-synchronised"),
    ("staging", "pipelined", "handoff", "16 MiB chunks"),
    ("staging", "pageable", "handoff", ""),
    ("mmap", "dma", "handoff", ""),
    ("mmap", "zero-copy", "handoff", "kernels load and store host memory"),
    ("vmm", "ce", "stream", "VMM memory, fd over a socket"),
    ("mempool", "ce", "stream", "pool pointer import"),
    ("torch", "caching", "stream", "a tensor through a torch.multiprocessing queue"),
    ("torch", "expandable", "stream", "`expandable_segments:True`"),
    ("hostpool", "host-pool", "handoff", "staging through a shared host pool"),
]


def bulk_256(runs: Runs) -> str:
    rows = []
    for path, variant, measure, what in BULK_ROWS:
        cells = [same_gpu(runs[name], path, variant, measure, 256 * MIB) for name in (H100, H200)]
        name = f"{path} / {variant}" + (f" ({what})" if what else "")
        rows.append([name, measure] + [f"{gbps(r)}, {fraction(r)}" for r in cells] + [f"`{cells[0]['ceiling']}`"])
    header = ["path / variant", "measure", "H100 80GB HBM3: GB/s, % of ceiling", "H200: GB/s, % of ceiling",
              "ceiling"]
    return table(header, rows, right_from=2) + "\n\n" + source(H100, H200, note=RANGED)


def bounds(runs: Runs) -> str:
    """Samples above their physical bound per run, and what each one at a bandwidth-bound size was."""
    from check_reference import bound

    from gpuipc_bench.analysis.summary import CALL_BOUND

    parts, details = [], []
    for name in (H100, H200, MODES, BOTH):
        df = runs[name].frame
        best = df[(df["path"] == "ceiling") & (df["metric"] == "bandwidth")].groupby(["variant", "bytes"])[
            "bandwidth_gbps"].max().to_dict()

        def of(_df, key, nbytes, best=best):
            return best.get((key, nbytes), math.nan)

        data = df[(df["metric"] == "bandwidth") & (df["path"] != "ceiling") & (df["ceiling"] != "")
                  & (df["path"] != "sharing")]
        # a ceiling's per-call floor: its shortest time per transfer (bytes / best GB/s over the sizes)
        floors = {key: min(nbytes / gbps_ / 1e9 for (k, nbytes), gbps_ in best.items() if k == key and gbps_ > 0)
                  for key in {k for k, _ in best}}
        over = over_call = 0
        call_excess = 0.0
        for (ceiling, nbytes), part in data.groupby(["ceiling", "bytes"]):
            slack = 0.02 if "-sm@" in ceiling else 0.01
            limit = bound(df, ceiling, nbytes, of, slack)
            above = part[part["bandwidth_gbps"] > limit]
            floor = min((floors.get(k, math.inf) for k in ceiling.replace("|", "+").split("+")), default=math.inf)
            call = above["seconds"] < CALL_BOUND * floor  # where the tool shows time per transfer, not GB/s
            over += int((~call).sum())
            over_call += int(call.sum())
            if call.any():
                call_excess = max(call_excess, float(above[call]["bandwidth_gbps"].max()) / limit - 1)
            for _, row in above[~call].iterrows():
                group = part[(part["path"] == row["path"]) & (part["variant"] == row["variant"])
                             & (part["measure"] == row["measure"]) & (part["sharing"] == row["sharing"])]
                details.append(
                    f"In `{name}` the sample above its bound at a bandwidth-bound size is a {row['path']}/"
                    f"{row['variant']} {row['measure']} at {size(nbytes)}, {row['sharing']}: "
                    f"{row['bandwidth_gbps']:.1f} GB/s against a bound of {limit:.1f} (the `{ceiling}` ceiling's "
                    f"best sample, {of(df, ceiling, nbytes):.1f}, +{slack:.0%}), "
                    f"{row['bandwidth_gbps'] / limit - 1:.1%} beyond it, in a group whose median is "
                    f"{group['bandwidth_gbps'].median():.1f} GB/s.")
        if over_call:
            details.append(f"In `{name}` the {over_call} samples above their bound at call-bound sizes are up to "
                           f"{call_excess:.1%} beyond it: there a transfer costs about one call, the ceiling is "
                           "that call's rate at another moment, and the answer shows time per transfer, not GB/s "
                           "or a share of the ceiling.")
        timed = df[df["metric"] != "setup"].groupby(
            ["scenario", "path", "variant", "measure", "metric", "src", "dst", "bytes", "workers", "sharing"]).size()
        parts.append(f"`{name}`: {over} of {len(data):,} samples above their bound"
                     + (f" ({over_call} more at call-bound sizes)" if over_call else "")
                     + f", {timed.mean():.1f} samples per group on average")
    return ("Samples above their physical bound (`scripts/readme/check_reference.py`'s bounds: one copy, its "
            "ceiling's best sample +1%, kernel copies +2%; two hops in sequence, 1 / (1/d2h + 1/h2d); "
            "overlapping hops, the slower hop): " + "; ".join(parts) + ".\n\n" + " ".join(details))


SETUP_ROWS = [
    ("ipc", "ipc_open_cold", "IPC handle open"),
    ("vmm", "vmm_export", "VMM export"),
    ("vmm", "vmm_import", "VMM import"),
    ("vmm", "vmm_map", "VMM map and set access"),
    ("mempool", "pool_import", "pool import"),
    ("mempool", "ptr_import_first", "pool pointer import, first"),
    ("mempool", "ptr_import", "pool pointer import, further"),
    ("torch", "caching_receive_cold", "PyTorch tensor, first receipt (caching)"),
    ("torch", "expandable_receive_cold", "PyTorch tensor, first receipt (expandable)"),
    ("hostpool", "host_ptr_import", "shared host pool pointer import"),
    ("mmap", "host_register", "`cudaHostRegister` of the host ring"),
    ("mmap", "host_first_touch", "first touch of the host ring's pages"),
]


def setup_table(runs: Runs) -> str:
    rows = []
    for path, variant, what in SETUP_ROWS:
        cells = [runs[name].fig(scenario=path, path=path, variant=variant, metric="setup") for name in (H100, H200)]
        rows.append([what, f"`{path}/{variant}`"] + [seconds(r, 1e3) for r in cells])
    header = ["operation", "row", "H100 ms", "H200 ms"]
    return table(header, rows, right_from=2) + "\n\n" + source(
        H100, H200, note="; at the ring's size (~272 MiB), fresh objects; (n=1): one sample")


HANDOFF_ROWS = [
    ("staging", "pinned"), ("staging", "pinned-hostsync"), ("staging", "pipelined"), ("staging", "pageable"),
    ("ipc", "ce"), ("ipc", "sm"), ("ipc", "push"), ("vmm", "ce"), ("vmm", "push"), ("mempool", "ce"),
    ("mempool", "push"), ("hostpool", "host-pool"), ("mmap", "dma"), ("mmap", "zero-copy"),
    ("torch", "caching"), ("torch", "expandable"),
]
PINGPONG_ROWS = [
    ("staging", "staging", "pinned-pingpong", 4 * KIB, "pinned copy + synchronise + flag, each way"),
    ("ipc", "ipc", "ce-pingpong", 4 * KIB, "IPC copy + synchronise + flag, each way"),
    ("latency", "ipc", "host-pingpong", 4 * KIB, "copy + IPC event + flag"),
    ("latency", "ipc", "device-pingpong", 4 * KIB, "kernels: payload + fence + flag"),
    ("latency", "ipc", "device-ll", 4 * KIB, "kernels: LL words"),
    ("nvshmem", "nvshmem", "device-putsig", 4 * KIB, "NVSHMEM device put + signal"),
]


def ratio(a, b) -> str:
    """a's median time over b's, with the interval the medians' intervals allow (stats.compare's)."""
    def ends(r):
        lo, hi = r["ci_lo_s"], r["ci_hi_s"]
        return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else (r["min_s"], r["max_s"])
    (alo, ahi), (blo, bhi) = ends(a), ends(b)
    return with_interval(a["median_s"] / b["median_s"], alo / bhi, ahi / blo) + "×"


def sharing_modes(runs: Runs) -> str:
    run = runs[MODES]
    rows = []
    for path, variant in HANDOFF_ROWS:
        ts, mps = (same_gpu(run, path, variant, "handoff", 4 * KIB, mode) for mode in ("time-sliced", "mps"))
        rows.append([f"{path}/{variant}", "hand-off", seconds(ts), seconds(mps), ratio(ts, mps)])
    for scenario, path, variant, nbytes, what in PINGPONG_ROWS:
        ts, mps = (latency(run, scenario, path, variant, nbytes, mode) for mode in ("time-sliced", "mps"))
        rows.append([f"{path}/{variant} ({what})", "one-way", seconds(ts), seconds(mps), ratio(ts, mps)])
    header = ["4 KiB, GPU 0 → GPU 0", "measure", "time-sliced µs", "MPS µs", "time-sliced / MPS"]
    return table(header, rows, right_from=2) + "\n\n" + source(MODES, note=RANGED)


LATENCY_ROWS = [
    ("latency", "device-pingpong", 0, "device-pingpong, flags alone (0 B)"),
    ("latency", "device-pingpong", 4 * KIB, "device-pingpong, payload + fence (4 KiB)"),
    ("latency", "device-ll", 4 * KIB, "device-ll (4 KiB)"),
    ("sharing", "device-pingpong", 4, "device-pingpong, payload + fence (4 B, `sharing`)"),
    ("sharing", "device-ll", 4, "device-ll (4 B, `sharing`)"),
    ("latency", "host-pingpong", 4, "host-pingpong: copy + IPC event + flag (4 B)"),
    ("ipc", "ce-pingpong", 4 * KIB, "ipc ce-pingpong: copy + synchronise + flag (4 KiB)"),
]


def latency_table(runs: Runs) -> str:
    rows = []
    for scenario, variant, nbytes, what in LATENCY_ROWS:
        cells = []
        for mode in ("time-sliced", "mps"):
            for name in (H100, H200):
                run = runs[name]
                keys = dict(scenario=scenario, path="ipc", variant=variant, metric="latency", src="0", dst="0",
                            bytes=nbytes, sharing=mode)
                cells.append(seconds(run.fig(**keys)) if run.has(**keys) else "—")
        rows.append([what] + cells)
    for variant, what in (("flag-pingpong", "shared-memory flags alone"), ("barrier", "one barrier crossing")):
        cells = [seconds(runs[n].fig(scenario="latency", variant=variant, metric="latency")) for n in (H100, H200)]
        rows.append([what] + cells + ["—", "—"])
    header = ["variant (payload)", "H100, time-sliced", "H200, time-sliced", "H100, MPS", "H200, MPS"]
    return table(header, rows) + "\n\n" + source(H100, H200, note="; median one-way µs" + RANGED)


def sharing_aggregate(runs: Runs) -> str:
    rows = []
    for variant in ("d2d-aggregate", "h2d-aggregate"):
        for workers in (1, 8):
            cells = []
            for name in (H100, H200):
                for mode in ("time-sliced", "mps"):
                    src = "0" if variant.startswith("d2d") else "host"
                    cells.append(gbps(runs[name].fig(scenario="sharing", variant=variant, workers=workers,
                                                      sharing=mode, src=src)))
            rows.append([variant.split("-")[0], str(workers)] + cells)
    header = ["copy (64 MiB each)", "processes", "H100 time-sliced", "H100 MPS", "H200 time-sliced", "H200 MPS"]
    return table(header, rows, right_from=1) + "\n\n" + source(
        H100, H200, note="; GB/s of all the processes together" + RANGED)


# --------------------------------------------------------------------------- NVSHMEM and set-up studies

NVSHMEM = ("h100-nvshmem.csv", "h200-nvshmem.csv")


def nvshmem_table(runs: Runs) -> str:
    rows = []

    def line(what, get):
        cells = []
        for name in NVSHMEM:
            for scenario, mode in (("nvshmem", "time-sliced"), ("nvshmem-mps", "mps")):
                try:
                    cells.append(get(runs[name], scenario, mode))
                except FigureError:
                    cells.append("—")
        rows.append([what] + cells)

    for variant in ("put", "get"):
        line(f"`{variant}mem_on_stream`, 256 MiB streamed, GB/s", lambda r, s, m, v=variant: gbps(
            r.fig(scenario=s, path="nvshmem", variant=v, bytes=256 * MIB, metric="bandwidth")))

    def spread(r, s, m, v):
        part = r.summary[(r.summary["scenario"] == s) & (r.summary["variant"] == v)
                         & (r.summary["metric"] == "bandwidth")]["fraction_of_ceiling"]
        if part.empty:
            raise FigureError(v)
        return f"{part.min():.1%}–{part.max():.1%} ({len(part)} sizes)"

    for variant in ("put", "get"):
        line(f"`{variant}`: median / its own ceiling, over sizes", lambda r, s, m, v=variant: spread(r, s, m, v))
    line("ipc/ce in the same run, 256 MiB streamed, GB/s", lambda r, s, m: gbps(
        same_gpu(r, "ipc", "ce", "stream", 256 * MIB, m)))
    for nbytes in (4, 4 * KIB):
        line(f"device put + signal, one-way µs ({size(nbytes)})", lambda r, s, m, b=nbytes: seconds(
            r.fig(scenario=s, variant="device-putsig", bytes=b, metric="latency")))
    for variant, what in (("device-pingpong", "payload + fence"), ("device-ll", "LL words")):
        line(f"the tool's device ping-pong, {what}, one-way µs (4 B)", lambda r, s, m, v=variant: seconds(
            latency(r, "sharing", "ipc", v, 4, m)))
    for variant, what in (("nvshmem_init", "init (UID bootstrap), s"),
                          ("nvshmem_malloc", "`nvshmem_malloc` of the 256 MiB ring, ms")):
        scale = 1 if variant == "nvshmem_init" else 1e3
        line(what, lambda r, s, m, v=variant, k=scale: seconds(r.fig(scenario=s, variant=v, metric="setup"), k))
    for variant, what in (("core.put:host", "`nvshmem.core.put`"),
                          ("putmem_on_stream:host", "C binding `putmem_on_stream`"),
                          ("cudaMemcpyAsync:host", "`cudaMemcpyAsync`")):
        for nbytes in (4, 4 * KIB):
            line(f"{what}, host µs a call ({size(nbytes)})", lambda r, s, m, v=variant, b=nbytes: seconds(
                r.fig(scenario=s, variant=v, bytes=b, metric="latency")))
    header = ["figure", "H100 time-sliced", "H100 MPS", "H200 time-sliced", "H200 MPS"]
    return table(header, rows) + "\n\n" + source(*NVSHMEM, note=RANGED)


HANDLES = ("h100-handles.csv", "h200-handles.csv")
HANDLE_ROWS = [
    ("ipc", "ipc_open_cold", "ipc_open_suballoc", "`cudaIpcOpenMemHandle`"),
    ("vmm", "vmm_import", None, "VMM import"),
    ("vmm", "vmm_map", None, "VMM map"),
    ("mempool", "pool_import", "pool_import_full", "pool import"),
    ("mempool", "ptr_import_first", "ptr_import_full", "pool pointer import, first"),
]


def handles(runs: Runs) -> str:
    rows = []
    sizes = (MIB, 256 * MIB, 4 << 30, 16 << 30)
    for path, variant, full, what in HANDLE_ROWS:
        for name, gpu in zip(HANDLES, ("H100", "H200")):
            run = runs[name]
            cells = []
            for nbytes in sizes:
                nbytes = 2 * MIB if path == "vmm" and nbytes == MIB else nbytes
                keys = dict(scenario="handles", path=path, variant=variant, bytes=nbytes, metric="setup")
                cells.append(seconds(run.fig(**keys), 1e3) if run.has(**keys) else "not measured")
            if full:
                row = run.fig(scenario="handles", variant=full, metric="setup")
                cells.append(f"{seconds(row, 1e3)} ({int(row['bytes']) / (1 << 30):.0f} GiB)")
            else:
                cells.append("—")
            rows.append([what, gpu] + cells)
    header = ["operation", "GPU", "1 MiB (VMM 2 MiB)", "256 MiB", "4 GiB", "16 GiB", "1 MiB in 85% of the GPU"]
    return table(header, rows, right_from=2) + "\n\n" + source(*HANDLES, note="; median ms [95% interval]")


# --------------------------------------------------------------------------- two GPUs, MPI


RENDERERS: dict[str, Callable[[Runs], str]] = {
    "neighbour": neighbour,
    "mps25": mps25,
    "bulk-256": bulk_256,
    "bounds": bounds,
    "setup": setup_table,
    "sharing-modes": sharing_modes,
    "latency": latency_table,
    "sharing-aggregate": sharing_aggregate,
    "nvshmem": nvshmem_table,
    "handles": handles,
    **PAIR_RENDERERS,
    **SUMMARY_RENDERERS,
    **NIXL_RENDERERS,
    **NVSHMEM_RENDERERS,
    **SPEED_RENDERERS,
    **FLEET_RENDERERS,
    **METHOD_RENDERERS,
}
