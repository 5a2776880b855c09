"""The pages' run times and nvbandwidth comparisons (SPEED_RENDERERS), from files' own facts.

A run's time is its wall time as the CSV header records it (`seconds.wall`: from the command's start
to the results written), with the `/usr/bin/time` wall time results/README.md lists for the file
beside it; nvbandwidth's time is the one its output file's first line records.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from readme_lib import KIB, MIB, RANGED, RESULTS, FigureError, Runs, gbps, num, seconds, source, table

# This version's speed runs on one GPU: three default runs back to back, --quick, nvbandwidth on the same machine
# (of this code's two calls the slower beside nvbandwidth: h200-once ran 28.4-30.4 s beside its 21.8; the drift
# rule's first call, h200-drift, 29.9-32.3 s beside 20.5; the version before it 28.5-30.8 s beside 20.9 in
# h200-between and 31.8-33.3 s beside 21.3 in h200-between-b)
SPEED = ("h200-once-b-1.csv.gz", "h200-once-b-2.csv.gz", "h200-once-b-3.csv.gz")
# --quick of this version (no resampling pass without --budget)
SPEED_QUICK = "h200-once-b-quick-1.csv.gz"  # (the kernel cache warm from an untimed --quick; the median of 3)
SPEED_QUICK_NVBANDWIDTH = "h200-once-b-nvbandwidth.txt"  # the call of SPEED_QUICK
SPEED_NVBANDWIDTH = "h200-once-b-nvbandwidth.txt"
# An earlier version's speed runs on one H100, with the tool before decision-driven sampling in the same call.
H100_SPEED = ("h100-speed-default-1.csv", "h100-speed-default-2.csv", "h100-speed-default-3.csv")
H100_SPEED_PREVIOUS = "h100-speed-previous-version.csv"
H100_SPEED_NVBANDWIDTH = "h100-speed-nvbandwidth.txt"
# This version's --pairs all on four GPUs, nvbandwidth's device-to-device CE matrices right after it.
X4 = "h200x4-speed-pairs-all.csv"
X4_NVBANDWIDTH = "h200x4-speed-nvbandwidth-d2d.txt"
CATALOGUE = RESULTS / "README.md"
WALL = re.compile(r"((?:\d+\.\d+(?:, | and ))*\d+\.\d+) s wall")


def listed_wall(name: str) -> list[float]:
    """The `/usr/bin/time` wall times results/README.md lists in the row of `name` (one a file of the row)."""
    for row in CATALOGUE.read_text().splitlines():
        cells = row.split(" | ")
        if row.startswith("| ") and f"`{name}`" in cells[0]:
            found = WALL.search(cells[-1])
            if found:
                return [float(x) for x in re.split(r", | and ", found.group(1))]
    raise FigureError(f"results/README.md lists no wall time for {name}")


def file_wall(name: str) -> float:
    """The `/usr/bin/time` wall time of `name` itself, where results/README.md lists one per file of its row
    (in the row's order), else the row's first."""
    row = next(r for r in CATALOGUE.read_text().splitlines() if r.startswith("| ") and f"`{name}`" in r.split(" | ")[0])
    files = re.findall(r"`([^`]+\.csv(?:\.gz)?)`", row.split(" | ")[0])
    walls = listed_wall(name)
    return walls[files.index(name)] if len(walls) == len(files) else walls[0]


def _tails(names) -> str:
    """The names after the first, each as its tail from the last '-' (`-2.csv.gz`)."""
    return ", ".join(f"`-{name.rpartition('-')[2]}`" for name in names[1:])


def header_wall(runs: Runs, name: str) -> float:
    """The run's wall time from its CSV header (`seconds.wall`)."""
    meta = runs[name].meta
    if "seconds.wall" not in meta:
        raise FigureError(f"{name} has no seconds.wall in its header")
    return float(meta["seconds.wall"])


def nvbandwidth_wall(runs: Runs, name: str) -> float:
    """nvbandwidth's wall time, as the first line of its committed output says (`21.76 s wall`)."""
    first = runs.text(name).splitlines()[0]
    found = re.search(r"([\d.]+) s wall", first)
    if not found:
        raise FigureError(f"{name}: no wall time on its first line")
    return float(found.group(1))


def nvbandwidth_sum(runs: Runs, name: str, test: str) -> float:
    """The `SUM <test> <GB/s>` line of nvbandwidth's output."""
    found = re.search(rf"^SUM {re.escape(test)} ([\d.]+)$", runs.text(name), re.M)
    if not found:
        raise FigureError(f"{name}: no SUM line for {test}")
    return float(found.group(1))


def nvbandwidth_matrix(runs: Runs, name: str, test: str) -> dict[tuple[int, int], float]:
    """(row GPU, column GPU) -> GB/s of one of nvbandwidth's matrices."""
    text = runs.text(name)
    start = text.index(f"Running {test}.")
    lines = text[start:].splitlines()[2:]
    cols = [int(c) for c in lines[0].split()]
    out = {}
    for line in lines[1:]:
        parts = line.split()
        if not parts or not parts[0].isdigit():
            break
        for col, cell in zip(cols, parts[1:]):
            if cell != "N/A":
                out[(int(parts[0]), col)] = float(cell)
    return out


COUNTS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}


def count(n: int) -> str:
    """A small count as a word ('two'), larger ones as digits."""
    return COUNTS.get(n, str(n))


def model_name(name: str) -> str:
    """'H100' for 'NVIDIA H100 80GB HBM3', 'H200' for 'NVIDIA H200': the model, its vendor and memory left out."""
    name = name.strip().removeprefix("NVIDIA ")
    return re.sub(r"[\s-]+(?:(?:SXM|PCIe|NVL)\w*[\s-]+)?\d+GB\b.*$", "", name, flags=re.I).strip()


def gpus(runs: Runs, *names: str) -> str:
    """'one H200', 'four H200s': the GPUs of these runs as their headers name them (`gpu_count`, `gpu.N.name`)."""
    described = set()
    for name in names:
        meta = runs[name].meta
        n = int(meta.get("gpu_count", 0))
        models = {model_name(meta.get(f"gpu.{i}.name", "")) for i in range(n)}
        if n < 1 or len(models) != 1 or "" in models:
            raise FigureError(f"{name}: no single GPU model in its header (gpu_count, gpu.N.name)")
        model = models.pop()
        described.add(f"{count(n)} {model}" + ("s" if n > 1 else ""))
    if len(described) != 1:
        raise FigureError(f"{', '.join(names)}: not the same GPUs ({', '.join(sorted(described))})")
    return described.pop()


def links(runs: Runs, name: str) -> str:
    """'NV18': the one NVML link every pair of the run's GPUs has (`link.A-B` in its header)."""
    found = {v for k, v in runs[name].meta.items() if k.startswith("link.")}
    if len(found) != 1:
        raise FigureError(f"{name}: not one link for every pair ({', '.join(sorted(found)) or 'none'})")
    return found.pop()


def _pairs(keys: list[str]) -> str:
    """'GPU 1 → GPU 0 and GPU 3 → GPU 0' for ['1>0', '3>0']."""
    named = [" → ".join(f"GPU {g}" for g in key.split(">")) for key in keys]
    return ", ".join(named[:-1]) + f" and {named[-1]}" if len(named) > 1 else "".join(named)


def _times(values: list[float]) -> str:
    return ", ".join(num(v, 1) for v in values[:-1]) + f" and {num(values[-1], 1)} s"


def runtime(runs: Runs) -> str:
    """The README's headline: the default run's and --quick's wall time on one GPU, nvbandwidth beside."""
    walls = [header_wall(runs, name) for name in SPEED]
    timed = listed_wall(SPEED[0])
    quick, quick_timed = header_wall(runs, SPEED_QUICK), file_wall(SPEED_QUICK)
    quick_call = ", in the same call" if SPEED_QUICK_NVBANDWIDTH == SPEED_NVBANDWIDTH else (
        f", in another call of the same day on the same kind of machine, beside nvbandwidth's "
        f"{num(nvbandwidth_wall(runs, SPEED_QUICK_NVBANDWIDTH), 1)} s there")
    return (f"On {gpus(runs, *SPEED, SPEED_QUICK)} the default run (every path, both sharing modes) took "
            f"{_times(walls)} in three runs back to back, from the command's start to its results written "
            f"(`seconds.wall` in the headers of `results/{SPEED[0]}`, {_tails(SPEED)}; {_times(timed)} by "
            f"`/usr/bin/time`, as `results/README.md` lists them), and `--quick` {num(quick, 1)} s "
            f"({num(quick_timed, 1)} s by `/usr/bin/time`, `results/{SPEED_QUICK}`{quick_call}). NVIDIA's "
            f"nvbandwidth ran its full suite in {num(nvbandwidth_wall(runs, SPEED_NVBANDWIDTH), 1)} s on the same "
            f"machine as the default runs (`results/{SPEED_NVBANDWIDTH}`).")


def speed_history(runs: Runs) -> str:
    """One H100, back to back: the tool before decision-driven sampling against three default runs with it."""
    previous = runs[H100_SPEED_PREVIOUS].meta
    walls = [header_wall(runs, name) for name in H100_SPEED]
    return (f"On {gpus(runs, *H100_SPEED, H100_SPEED_PREVIOUS)} (another machine, earlier versions of the tool), "
            f"the tool as it was at commit f071d0f, before a group far behind the best figure at its size stopped "
            f"after three samples, took {num(listed_wall(H100_SPEED_PREVIOUS)[0], 1)} s by `/usr/bin/time` "
            f"(`seconds.total` {num(float(previous['seconds.total']), 1)}; its header has no `seconds.wall` yet; "
            f"`results/{H100_SPEED_PREVIOUS}`), against {_times(listed_wall(H100_SPEED[0]))} for three default "
            f"runs of the version that added that stop, back to back with it (`seconds.wall` {_times(walls)}; "
            f"`results/{H100_SPEED[0]}`, `-2.csv`, `-3.csv`).")


def nvbandwidth_h100(runs: Runs) -> str:
    """nvbandwidth's host and device-local copies on the H100 of the H100 speed runs."""
    tests = [("host_to_device_memcpy_ce", "pinned host → device (copy engine)"),
             ("device_to_host_memcpy_ce", "device → pinned host (copy engine)"),
             ("device_local_copy", "device-local copy")]
    rows = [[what, f"`{test}`", num(nvbandwidth_sum(runs, H100_SPEED_NVBANDWIDTH, test))] for test, what in tests]
    return table(["nvbandwidth on one H100", "test", "GB/s"], rows, right_from=2) + "\n\n" + source(
        H100_SPEED_NVBANDWIDTH, note="; nvbandwidth v0.8, not a run of this tool; the machine of the H100 speed runs")


def pairs_x4(runs: Runs) -> str:
    """Every ordered pair of four GPUs: the tool's ipc/ce at 256 MiB against nvbandwidth's CE copy."""
    run = runs[X4]
    read = nvbandwidth_matrix(runs, X4_NVBANDWIDTH, "device_to_device_memcpy_read_ce")
    full = set(run.meta.get("pairs.full", "").split(","))
    resweep = sorted(k.split(".", 2)[2] for k in run.meta if k.startswith("pairs.resweep."))
    rows = []
    for (src, dst), nv in sorted(read.items()):
        pair = f"{src}>{dst}"
        r = run.fig(scenario="ipc", path="ipc", variant="ce", measure="stream", metric="bandwidth",
                    src=str(src), dst=str(dst), bytes=256 * MIB)
        how = "swept whole" if pair in full else "swept whole (outside its class)" if pair in resweep \
            else "headline figures"
        ll = run.fig(scenario="latency", path="peer", variant="device-ll", metric="latency", src=str(src),
                     dst=str(dst), bytes=4 * KIB)
        rows.append([f"GPU {src} → GPU {dst}", how, gbps(r), num(nv, 2), f"{r['median_gbps'] / nv:.1%}", seconds(ll)])
    header = ["pair", "measured", "ipc/ce 256 MiB streamed, GB/s", "nvbandwidth read CE, GB/s", "ratio",
              "device-ll 4 KiB, one-way µs"]
    if resweep:
        swept = (f"{count(len(resweep))} pair{'s' if len(resweep) != 1 else ''}, {_pairs(resweep)}, swept whole "
                 f"after the first pass (`pairs.resweep.*`)")
    else:
        swept = "none in this run (no `pairs.resweep.*`)"
    sentence = (f"`gpuipc-bench run --pairs all` on {gpus(runs, X4)}, every pair {links(runs, X4)}: "
                f"{num(header_wall(runs, X4), 1)} s wall (`seconds.wall`; {num(listed_wall(X4)[0], 1)} s by "
                f"`/usr/bin/time`). The plan's estimate printed before it, "
                f"{num(float(run.meta['estimate.seconds']), 1)} s (`estimate.seconds`), leaves the whole-pair "
                f"re-sweeps out: {swept}. nvbandwidth's read and write CE matrices took "
                f"{num(nvbandwidth_wall(runs, X4_NVBANDWIDTH), 1)} s right after it on the same node.")
    note = "; nvbandwidth v0.8 `device_to_device_memcpy_read_ce`, its matrix's row → column" + RANGED
    return sentence + "\n\n" + table(header, rows, right_from=2) + "\n\n" + source(X4, X4_NVBANDWIDTH, note=note)


def speed_scenarios(runs: Runs) -> str:
    """Where the default and --quick runs' time went: each scenario's seconds from the headers."""
    names = [*SPEED, SPEED_QUICK]
    metas = [runs[name].meta for name in names]
    scenarios = {k.split(".", 1)[1] for meta in metas for k in meta
                 if k.startswith("seconds.") and k not in ("seconds.total", "seconds.wall", "seconds.startup")}

    def cell(meta: dict, key: str) -> str:
        return num(float(meta[key]), 1) if key in meta else "—"

    def spent(sc: str) -> float:  # over the three default runs; ties by name
        return round(sum(float(m.get(f"seconds.{sc}", 0)) for m in metas[:3]), 3)

    order = sorted(sorted(scenarios), key=lambda sc: -spent(sc))
    rows = [["start-up (imports, probe, MPS daemon)"] + [cell(m, "seconds.startup") for m in metas]]
    rows += [[f"`{sc}`"] + [cell(m, f"seconds.{sc}") for m in metas] for sc in order]
    rows += [["the scenarios and start-up (`seconds.total`)"] + [cell(m, "seconds.total") for m in metas],
             ["to the results written (`seconds.wall`)"] + [cell(m, "seconds.wall") for m in metas],
             ["the plan's estimate (`estimate.seconds`)"] + [cell(m, "estimate.seconds") for m in metas],
             ["persistent process sets (`worker_sets`)"] + [m.get("worker_sets", "—") for m in metas]]
    header = ["seconds", "default, run 1", "run 2", "run 3", "`--quick`"]
    return table(header, rows) + "\n\n" + source(*names, note="; the `seconds.*` facts of each CSV header")


SMALL = "h100-default-modes.csv"
SMALL_ROWS = [("ipc", "ce", "stream"), ("ipc", "push", "handoff"), ("staging", "pinned-hostsync", "handoff"),
              ("staging", "pinned", "handoff")]


def small_sizes(runs: Runs) -> str:
    """Below 4 KiB a GPU path costs its calls or its hand-over: the medians of a sweep with every step of x4."""
    run = runs[SMALL]
    sizes = sorted({int(b) for b in run.summary["bytes"] if 0 < int(b) <= 4 * KIB})
    rows = []
    for path, variant, measure in SMALL_ROWS:
        cells = [seconds(run.fig(scenario=path, path=path, variant=variant, measure=measure, metric="bandwidth",
                                 src="0", dst="0", bytes=b, sharing="time-sliced")) for b in sizes]
        rows.append([f"{path}/{variant} {measure}"] + cells)
    from gpuipc_bench.sizes import format_size

    header = ["µs per transfer, one H100, time-sliced"] + [format_size(b) for b in sizes]
    return table(header, rows) + "\n\n" + source(SMALL, note=RANGED)


X4_PLAIN = "h200x4-plain.csv"
X4_PLAIN_NVBANDWIDTH = "h200x4-nvbandwidth-d2d.txt"


def plain_run(runs: Runs, name: str, nvbandwidth: str, node: str, suite: str, where: str, more: str = "",
              also: tuple[str, ...] = ()) -> str:
    """A plain run on a node of several GPUs: its wall time, the plan's estimate, nvbandwidth's beside it;
    `more`: a sentence after it, from the files `also` names."""
    meta = runs[name].meta
    return (f"A plain `gpuipc-bench run` on {node} measures the same-GPU pair in both sharing modes and every "
            f"pair scenario across GPUs 0 and 1: it took {num(header_wall(runs, name), 1)} s wall (`seconds.wall`; "
            f"{num(listed_wall(name)[0], 1)} s by `/usr/bin/time`; the plan's estimate "
            f"{num(float(meta['estimate.seconds']), 1)} s, {meta.get('worker_sets', '?')} persistent process sets), "
            f"and nvbandwidth's {suite} {num(nvbandwidth_wall(runs, nvbandwidth), 1)} s on the same {where}.{more}"
            "\n\n" + source(name, nvbandwidth, *also))


def plain_x4(runs: Runs) -> str:
    """A plain run on a four-GPU node (an earlier version), nvbandwidth's device-to-device matrices beside."""
    return plain_run(runs, X4_PLAIN, X4_PLAIN_NVBANDWIDTH, "a node of four H200s (every pair NV18)",
                     "device-to-device read and write matrices and SM latency", "node")


# This version's plain run on two GPUs, nvbandwidth's device-to-device copies on the same pair in the same call; the
# version before's on a node of the same kind (that nvbandwidth's full suite took 81.5 s on the slowest host of them:
# results/h200x2-host-b-nvbandwidth.txt).
X2_PLAIN = "h200x2-peerset-plain.csv.gz"
X2_PLAIN_NVBANDWIDTH = "h200x2-peerset-nvbandwidth-d2d.txt"
X2_PLAIN_OTHER = "h200x2-between-plain.csv.gz"


def plain_x2(runs: Runs) -> str:
    """This version's plain run on two GPUs, nvbandwidth's device-to-device copies beside, and the version before's."""
    other = runs[X2_PLAIN_OTHER].meta
    more = (f" The version before took {num(header_wall(runs, X2_PLAIN_OTHER), 1)} s wall on a node of the same kind "
            f"({num(listed_wall(X2_PLAIN_OTHER)[0], 1)} s by `/usr/bin/time`; the estimate "
            f"{num(float(other['estimate.seconds']), 1)} s).")
    return plain_run(runs, X2_PLAIN, X2_PLAIN_NVBANDWIDTH, f"{gpus(runs, X2_PLAIN)} ({links(runs, X2_PLAIN)})",
                     "device-to-device read and write copies", "pair", more, (X2_PLAIN_OTHER,))


SPEED_RENDERERS: dict[str, Callable[[Runs], str]] = {
    "runtime": runtime,
    "speed-history": speed_history,
    "nvbandwidth-h100": nvbandwidth_h100,
    "pairs-x4": pairs_x4,
    "speed-scenarios": speed_scenarios,
    "small-sizes": small_sizes,
    "plain-x4": plain_x4,
    "plain-x2": plain_x2,
}
