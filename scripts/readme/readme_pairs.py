"""The README's figure blocks for two GPUs (NV18), NCCL, MPI and the sample loop's stop rule."""

from __future__ import annotations

import statistics
from collections.abc import Callable

from readme_lib import KIB, MIB, RANGED, FigureError, Runs, fraction, gbps, num, seconds, source, table, \
    with_interval

PAIRS = "h100x2-nvlink-pairs-all.csv"
PAIRS_DEFAULT = "h100x2-nvlink-default.csv"
FORCED = "h100x2-nvlink-nccl-forced.csv"
NCCL_TESTS = "h100x2-nccl-tests-sendrecv.txt"
MPI = "h100-mpi-ipc-mmap.csv"
N20 = "h100-n20.csv"
H100 = "h100-default.csv"


def pairs_runtime(runs: Runs) -> str:
    pairs, plain = runs[PAIRS], runs[PAIRS_DEFAULT]
    return (f"On two H100s linked by NV18, `--pairs all` (both ordered pairs) took "
            f"{num(pairs.scenario_seconds())} s of scenarios at the default sizes, every transfer verified, and "
            f"a plain `gpuipc-bench run` on the same node {num(plain.scenario_seconds())} s (the sum of "
            f"`seconds.<scenario>` of `results/{PAIRS}` and `results/{PAIRS_DEFAULT}`).")


def pairs_table(runs: Runs) -> str:
    run = runs[PAIRS]
    s = run.summary
    cross = s[(s["src"] == "0") & (s["dst"] == "1") & (s["metric"] == "bandwidth") & (s["path"] != "ceiling")
              & (s["variant"] != "bidir") & (s["scenario"] != "nvshmem-mps")]
    rows = []
    for (scenario, path, variant), _ in cross.groupby(["scenario", "path", "variant"], sort=False):
        keys = dict(scenario=scenario, path=path, variant=variant, src="0", dst="1", metric="bandwidth")
        stream = run.fig(**keys, measure="stream", bytes=256 * MIB) if run.has(**keys, measure="stream",
                                                                                bytes=256 * MIB) else None
        hand = run.fig(**keys, measure="handoff", bytes=4 * KIB) if run.has(**keys, measure="handoff",
                                                                              bytes=4 * KIB) else None
        rows.append([f"{path}/{variant}",
                     gbps(stream) if stream is not None else "—",
                     f"{fraction(stream)} of `{stream['ceiling']}`" if stream is not None else "—",
                     seconds(hand) if hand is not None else "—"])
    header = ["GPU 0 → GPU 1", "256 MiB streamed, GB/s", "of the ceiling (same run)", "4 KiB hand-off, µs"]
    return table(header, rows) + "\n\n" + source(PAIRS, note=RANGED)


PAIR_LATENCY = [
    ("latency", "peer", "device-ll", "kernels through IPC-mapped LL words"),
    ("latency", "peer", "device-pingpong", "kernels: payload + fence + flag"),
    ("nvshmem", "nvshmem", "device-putsig", "NVSHMEM device put + signal"),
    ("nvshmem-mps", "nvshmem", "device-putsig", "the same under MPS"),
    ("latency", "peer", "host-pingpong", "copy + IPC event + flag"),
    ("peer", "peer", "ce-pingpong", "copy + synchronise + flag"),
    ("nccl", "nccl", "send-recv", "NCCL send/recv ping-pong"),
]


def pairs_latency(runs: Runs) -> str:
    run = runs[PAIRS]
    rows = []
    for scenario, path, variant, what in PAIR_LATENCY:
        cells = []
        for src, dst in (("0", "1"), ("1", "0")):
            for nbytes in (4, 4 * KIB):
                keys = dict(scenario=scenario, path=path, variant=variant, metric="latency", src=src, dst=dst,
                            bytes=nbytes)
                cells.append(seconds(run.fig(**keys)) if run.has(**keys) else "—")
        rows.append([f"{path}/{variant} ({what})"] + cells)
    header = ["one-way µs", "0 → 1, 4 B", "0 → 1, 4 KiB", "1 → 0, 4 B", "1 → 0, 4 KiB"]
    out = table(header, rows)

    bidir = run.fig(scenario="peer", variant="bidir", src="0", dst="1", bytes=256 * MIB)
    ceilings = [run.fig(scenario="peer", path="ceiling", variant=key, bytes=256 * MIB, metric="bandwidth")
                for key in ("peer@0>1", "peer@1>0")]
    bound = sum(float(c["median_gbps"]) for c in ceilings)
    out += (f"\n\nBoth directions at once (`peer/bidir`, 256 MiB, both GPUs' copies together): "
            f"**{gbps(bidir)} GB/s**, {float(bidir['median_gbps']) / bound:.0%} of the sum of the two directions' "
            f"peer ceilings in the same run ({gbps(ceilings[0])} + {gbps(ceilings[1])} = {num(bound)} GB/s).")
    return out + "\n\n" + source(PAIRS, note=RANGED)


def nccl_tests_algbw(text: str) -> dict[int, float]:
    """nccl-tests' out-of-place algbw (GB/s) per size from its printed table."""
    out = {}
    for line in text.splitlines():
        fields = line.split()
        if line.startswith("#") or len(fields) < 8 or not fields[0].isdigit():
            continue
        out[int(fields[0])] = float(fields[6])
    if not out:
        raise FigureError(f"{NCCL_TESTS}: no result lines")
    return out


def nccl(runs: Runs) -> str:
    run, forced = runs[PAIRS], runs[FORCED]
    theirs = nccl_tests_algbw(runs.text(NCCL_TESTS))
    rows = []
    for variant, what in (("send-recv", "one-way send/recv"), ("sendrecv", "two-way sendrecv (as nccl-tests)")):
        for nbytes in (64 * MIB, 256 * MIB):
            r = run.fig(scenario="nccl", variant=variant, src="0", dst="1", bytes=nbytes, measure="stream")
            ref = theirs[nbytes]
            lo, hi = (r["ci_lo_gbps"], r["ci_hi_gbps"])
            rows.append([what, run.meta.get("note.nccl.transport", "?"), f"{num(nbytes / MIB, 0)} MiB", gbps(r),
                         f"{fraction(r)}", num(ref),
                         with_interval(r["median_gbps"] / ref, lo / ref, hi / ref) + "×"])
    header = ["NCCL, GPU 0 → GPU 1", "transport (NCCL's)", "size", "GB/s", "of peer@0>1", "nccl-tests algbw",
              "ratio"]
    out = table(header, rows, right_from=2)
    rows = []
    for scenario in ("nccl-ce", "nccl-shm", "nccl-net"):
        part = forced.summary[(forced.summary["scenario"] == scenario) & (forced.summary["measure"] == "stream")
                              & (forced.summary["path"] == "nccl")]
        for variant in dict.fromkeys(part["variant"]):
            cells = [gbps(forced.fig(scenario=scenario, variant=variant, bytes=b, measure="stream"))
                     for b in (64 * MIB, 256 * MIB)]
            keys = dict(scenario=scenario, variant=variant, bytes=4 * KIB, measure="pingpong")
            rows.append([f"`{variant}`", forced.meta.get(f"note.{scenario}.transport", "?")] + cells
                        + [seconds(forced.fig(**keys)) if forced.has(**keys) else "—"])
    header = ["forced (`-s nccl-ce`, ...)", "transport (NCCL's)", "64 MiB GB/s", "256 MiB GB/s",
              "4 KiB ping-pong, one-way µs"]
    out += "\n\n" + table(header, rows, right_from=2)
    return out + "\n\n" + source(PAIRS, NCCL_TESTS, FORCED, note="; nccl-tests: `sendrecv_perf`, out-of-place "
                                 "algbw, one process driving both GPUs" + RANGED)


TWO_WAY = "h200x2-nccl-two-way.csv"
TWO_WAY_TESTS = "h200x2-nccl-tests-sendrecv-1proc-2proc.txt"


def nccl_tests_runs(text: str) -> dict[str, dict[int, tuple[float, float]]]:
    """'1proc-1' -> {bytes: (out-of-place µs, algbw GB/s)} for each `### nccl-tests-<name>.txt` part."""
    out: dict[str, dict[int, tuple[float, float]]] = {}
    for part in text.split("### nccl-tests-")[1:]:
        name = part.split(".txt", 1)[0]
        for line in part.splitlines():
            fields = line.split()
            if not line.startswith("#") and len(fields) >= 8 and fields[0].isdigit():
                out.setdefault(name, {})[int(fields[0])] = (float(fields[5]), float(fields[6]))
    if not out:
        raise FigureError(f"{TWO_WAY_TESTS}: no result lines")
    return out


def nccl_two_way(runs: Runs) -> str:
    """nccl-tests with one process driving both GPUs and with two MPI processes, against the tool's two-way."""
    tests = nccl_tests_runs(runs.text(TWO_WAY_TESTS))
    run = runs[TWO_WAY]
    sizes = (64 * MIB, 256 * MIB)
    rows = []
    for name in sorted(tests):
        procs, _, nth = name.partition("-")
        what = f"nccl-tests `sendrecv_perf`, {'one process, both GPUs' if procs == '1proc' else 'two MPI processes'}"
        rows.append([f"{what} (run {nth})"] + [f"{tests[name][b][1]:.2f} GB/s, {tests[name][b][0]:.2f} µs"
                                               for b in sizes])
    tool = [run.fig(scenario="nccl", variant="sendrecv", src="0", dst="1", bytes=b, measure="stream") for b in sizes]
    rows.append(["this tool's two-way `sendrecv`, two processes"]
                + [f"{gbps(r)} GB/s, {num(r['median_s'] * 1e6)} µs" for r in tool])
    extra = []
    for nbytes, r in zip(sizes, tool):
        theirs = statistics.mean(t[nbytes][0] for t in tests.values())
        extra.append((nbytes, r["median_s"] * 1e6 - theirs, r["median_s"] * 1e6))
    sentence = ("The tool's two-way transfer takes " + " and ".join(
        f"{num(d)} µs more than nccl-tests' mean at {num(b / MIB, 0)} MiB ({d / t:.1%} of the tool's time)"
        for b, d, t in extra)
        + "; one process or two makes no difference to nccl-tests.")
    header = ["GPU 0 → GPU 1, two H200s over NV18", "64 MiB", "256 MiB"]
    return table(header, rows) + "\n\n" + sentence + "\n\n" + source(
        TWO_WAY, TWO_WAY_TESTS, note="; nccl-tests: out-of-place algbw and time as printed; this tool: median [95% "
        "interval] and the median time per transfer")


def mpi(runs: Runs) -> str:
    run = runs[MPI]
    r = run.fig(scenario="ipc", variant="ce", measure="stream", bytes=256 * MIB, metric="bandwidth")
    timed = run.frame[run.frame["metric"] == "bandwidth"]
    verified = bool(timed["verified"].fillna(False).all())
    return (f"`mpirun -np 2 gpuipc-bench run -s ipc -s mmap` on one H100 (`results/{MPI}`, "
            f"{run.meta.get('launcher', '?')} launcher): ipc/ce streamed {gbps(r)} GB/s at 256 MiB "
            f"({fraction(r)} of `{r['ceiling']}`), {'every' if verified else 'not every'} sample verified, in "
            f"{num(run.scenario_seconds())} s of scenarios.")


def samples_rule(runs: Runs) -> str:
    """How many samples the stop rule takes, and what stopping early does to the 20-sample medians."""
    from gpuipc_bench import robust
    from gpuipc_bench.defaults import SAMPLE_CAP

    h100, n20 = runs[H100], runs[N20]
    keys = ["scenario", "path", "variant", "measure", "metric", "src", "dst", "bytes", "workers", "sharing"]
    mean = h100.frame[h100.frame["metric"] != "setup"].groupby(keys).size().mean()
    moved = []
    timed = n20.frame[n20.frame["metric"] != "setup"].sort_values("iteration", kind="stable")
    for _, part in timed.groupby(keys):
        xs = part["seconds"].tolist()
        if len(xs) < SAMPLE_CAP:
            continue
        stop = next(n for n in range(1, len(xs) + 1) if robust.enough(xs[:n]))
        moved.append(abs(robust.median(xs[:stop]) / robust.median(xs) - 1))
    p95 = statistics.quantiles(moved, n=20)[-1]
    return (f"On the H100 default run this stops at {mean:.1f} samples per group on average "
            f"(`results/{H100}`); truncating the {len(moved)} 20-sample groups of `results/{N20}` where the rule "
            f"stops moves 95% of the medians by less than {p95:.2%}.")


PAIR_RENDERERS: dict[str, Callable[[Runs], str]] = {
    "pairs-runtime": pairs_runtime,
    "pairs": pairs_table,
    "pairs-latency": pairs_latency,
    "nccl": nccl,
    "mpi": mpi,
    "nccl-two-way": nccl_two_way,
    "samples-rule": samples_rule,
}
