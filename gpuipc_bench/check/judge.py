"""Judging: each figure against its model's expectation and its own ceiling; nodes against the fleet.

A figure fails when it is more than the tolerance below its expectation's band (above it for
a latency) AND, where it has a ceiling measured in the same run, more than the tolerance below
the fraction of that ceiling the references reached: a slow host link then fails its own
ceiling figure (h2d) and does not blame the path. Against a single-host reference a figure
only warns. A figure without an expectation for its model is 'measured' (not judged; the
fleet rules still apply). A busy GPU, a throttled clock or a down-trained PCIe link seen on the
figure's GPUs is named as the likely cause.

A figure of the host's CPUs alone (host-memcpy, host-handoff, host-pingpong-4k, barrier,
nixl-host-read) moves by up to 2.2x from run to run on a shared or virtual host, with where its
processes and pages land: it fails only beyond figures.CPU_FACTOR (3) times worse than its band or
the fleet's median, and warns between the tolerance and that.

Across a fleet of three nodes or more, a node's figure is an outlier when it is worse than the
fleet's median by more than max(MAD, 10% of the median) (the median absolute deviation; the
floor is --tolerance where given): Megatron-LM's straggler rule as its gpu_sniff_test.py code
applies it, one-sided (a node better than the fleet is not broken). An outlier is measured
again on its node before it fails.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from typing import Any

from gpuipc_bench.check.expect import Expectation, Expectations, model_of
from gpuipc_bench.check.figures import BY_NAME, CPU_FACTOR, FLEET_GAP, Figure, cpu_warning_only, format_value, outside

PASS, FAIL, WARN, SKIP = "pass", "fail", "warn", "skip"
MEASURED = "measured"  # a figure without an expectation for its model: measured, not judged
MIN_FLEET = 3  # nodes that have a figure before the fleet rule applies to it


@dataclasses.dataclass
class Event:
    """One check's outcome: a path, a figure, a node or a fleet comparison."""

    status: str
    node: str
    kind: str  # 'path', 'figure', 'fleet' or 'node'
    figure: str  # the figure's or the path's name
    gpus: str = ""
    measured: float | None = None
    expected: str = ""
    unit: str = ""
    reason: str = ""
    expected_value: float | None = None  # the band's edge the figure was held to (for fractions)
    lane: str = ""  # a figure's lane by NVML's byte counters (analysis/lanes.py); '': its rows carry none
    wrong_lane: str = ""  # why its lane is wrong ('peer copy went over PCIe, not NVLink'); '': it is not

    def as_dict(self) -> dict[str, Any]:
        """Its fields; the lane's only where the rows carry one."""
        out = dataclasses.asdict(self)
        for key in ("lane", "wrong_lane"):
            if not out[key]:
                del out[key]
        return out

    def title(self) -> str:
        where = f" GPU {self.gpus}" if self.gpus and self.gpus != "host" else (" host" if self.gpus else "")
        return f"{self.node}{where} {self.kind} {self.figure}"


def judge_figure(figure: Figure, node: str, facts: dict[str, str], expectations: Expectations,
                 tolerance: float | None = None, causes: dict[str, list[str]] | None = None) -> Event:
    event = _judge_figure(figure, node, facts, expectations, tolerance, causes)
    if figure.transport and event.status != FAIL:  # a library's figure says what carried it
        event.reason = "; ".join(x for x in (event.reason, used(figure.transport)) if x)
    event.lane, event.wrong_lane = figure.lane, lane_failure(figure)
    if event.wrong_lane and event.status != SKIP:  # whatever its figure: it is not of the path's lane
        event.status = FAIL
        event.reason = "; ".join(x for x in (event.wrong_lane + " (NVML's byte counters)", event.reason) if x)
    return event


LANE_WORDS = {"nvlink": "NVLink", "pcie": "PCIe", "nvlink+pcie": "NVLink and PCIe"}


def lane_failure(figure: Figure) -> str:
    """'peer copy went over PCIe, not NVLink': a figure whose bytes the counters saw on a lane
    other than the one it should take here (analysis.lanes.wrong_lane); '' where it is not."""
    from gpuipc_bench.analysis.lanes import wrong_lane
    from gpuipc_bench.check.figures import WHAT

    if not (figure.lane and figure.lane_expected and wrong_lane(figure.lane_expected, figure.lane)):
        return ""
    what = WHAT.get(figure.name, figure.name)
    went = f"went over {LANE_WORDS[figure.lane]}" if figure.lane in LANE_WORDS else "crossed no lane"
    should = LANE_WORDS.get(figure.lane_expected, "staying on its GPU")
    return f"{what} {went}, not {should}"


def _judge_figure(figure: Figure, node: str, facts: dict[str, str], expectations: Expectations,
                  tolerance: float | None = None, causes: dict[str, list[str]] | None = None) -> Event:
    tol = expectations.tolerance if tolerance is None else tolerance
    model = model_of(facts, figure.gpus)
    exp = expectations.get(model, figure.name)
    event = Event(PASS, node, "figure", figure.name, figure.gpus, figure.value, "", figure.unit)
    fallback = transport_fallback(figure)
    if fallback and _read_without_nvlink(figure, facts):  # UCX's own rule for this node: not a fault of it
        from gpuipc_bench.analysis.transport import UCX_NO_GET

        event.status, event.reason = SKIP, f"{figure.text()} over {figure.transport}: {UCX_NO_GET}"
        return event
    if fallback:  # whatever the references say: the library did not use the link
        event.status, event.reason = FAIL, fallback
        return event
    if exp is None:
        event.status, event.reason = MEASURED, f"not judged: no expectation for {model}"
        return event
    event.expected, event.expected_value = exp.text(), (exp.low if figure.higher_better else exp.high)
    limit = exp.low * (1 - tol) if figure.higher_better else exp.high * (1 + tol)
    worse = figure.value < limit if figure.higher_better else figure.value > limit
    if not worse:
        return event
    short = _shortfall(figure, exp)
    own = _own_ceiling(figure, exp, tol)
    if own is not None:
        event.reason = f"{short}, but {own}: the link it rides on is slow, not the path"
        return event
    event.status = FAIL if exp.band else WARN
    event.reason = short + ("" if exp.band else " (a single-host reference: a warning only)")
    if event.status == FAIL and cpu_warning_only(figure, exp.low if figure.higher_better else exp.high):
        event.status = WARN
        event.reason += f" (a CPU figure: a warning within {CPU_FACTOR:g}x, as shared hosts move it)"
    found = [c for g in figure.gpus.split(">") for c in (causes or {}).get(g, []) if _applies(c, figure)]
    if found:
        event.reason += "; likely cause: " + "; ".join(dict.fromkeys(found))
    return event


def _read_without_nvlink(figure: Figure, facts: dict[str, str]) -> bool:
    from gpuipc_bench.analysis.transport import read_without_nvlink

    override = os.environ.get("UCX_CUDA_IPC_ENABLE_GET_ZCOPY")  # set for this check, where its run notes none
    settings = " ".join([v for k, v in facts.items() if k.endswith(".ucx_settings")]
                        + ([f"UCX_CUDA_IPC_ENABLE_GET_ZCOPY={override}"] if override is not None else []))
    ends = figure.gpus.split(">")
    return figure.name == "nixl-read" and read_without_nvlink("nixl", "read", ends[0], ends[-1], settings, facts)


def transport_fallback(figure: Figure) -> str:
    """Why a library's figure fell back to a slow transport ('' if it did not): the transport it
    reported is not the link's direct one and the figure is under FALLBACK_FRACTION of its ceiling
    measured in the same run (the rule of gpuipc_bench.analysis.transport)."""
    from gpuipc_bench.analysis.transport import FALLBACK_FRACTION, UCX_HINT, direct

    if not figure.transport or direct(figure.transport) or not figure.ceiling:
        return ""
    share = figure.value / figure.ceiling
    if share >= FALLBACK_FRACTION:
        return ""
    return (f"transport fallback: {figure.text()} = {share:.1%} of its ceiling here "
            f"({format_value(figure.ceiling, figure.unit)}); {used(figure.transport)}; {UCX_HINT}")


def used(transport: str) -> str:
    return "UCX reported no protocol for it" if transport == "not reported" else f"UCX used {transport}"


def _shortfall(figure: Figure, exp: Expectation) -> str:
    edge = exp.low if figure.higher_better else exp.high
    word = "below" if figure.higher_better else "above"
    return f"{figure.text()} is {abs(figure.value / edge - 1):.0%} {word} {exp.text()}"


def _own_ceiling(figure: Figure, exp: Expectation, tol: float) -> str | None:
    """Why a path's low figure is not its fault (it reaches its own ceiling as the references did)."""
    if not figure.ceiling or not exp.of_ceiling:
        return None
    ratio = figure.value / figure.ceiling
    if ratio >= exp.of_ceiling * (1 - tol):
        return (f"it reaches {ratio:.0%} of its ceiling measured here ({format_value(figure.ceiling, figure.unit)}; "
                f"the references {exp.of_ceiling:.0%})")
    return None


def _applies(cause: str, figure: Figure) -> bool:
    return not cause.startswith("PCIe") or figure.name in ("h2d", "d2h")


def remeasured(first: Event, again: Event) -> Event:
    """A figure measured again after it failed (flutter): the second word counts, the first is said."""
    if first.status in (FAIL, WARN) and again.status == PASS:
        again.reason = (f"passed when measured again (first {format_value(first.measured, first.unit)}: "
                        f"flutter)" + (f"; {again.reason}" if again.reason else ""))
    elif again.status in (FAIL, WARN):
        again.reason += f" (measured twice; first {format_value(first.measured, first.unit)})"
    return again


# ---------------------------------------------------------------- the fleet


def fleet_outliers(by_node: dict[str, list[Figure]], floor: float = FLEET_GAP) -> dict[tuple[str, str, str], str]:
    """(node, figure, gpus) -> why that figure of that node stands out below the fleet (a node
    better than the fleet is not broken: only the worse side counts)."""
    values: dict[tuple[str, str], dict[str, Figure]] = {}
    for node, figures in by_node.items():
        for f in figures:
            values.setdefault((f.name, f.gpus), {})[node] = f
    found = {}
    for (name, gpus), nodes in values.items():
        if len(nodes) < MIN_FLEET:
            continue
        sign = 1.0 if next(iter(nodes.values())).higher_better else -1.0
        xs = {n: sign * f.value for n, f in nodes.items()}  # larger is better from here on
        median = statistics.median(xs.values())
        mad = statistics.median(abs(x - median) for x in xs.values())
        for node, x in xs.items():
            if x < median and outside(x, list(xs.values()), floor):
                fraction = nodes[node].value / (sign * median)
                spread = "the MAD" if mad > floor * abs(median) else f"{floor:.0%} of it"
                found[(node, name, gpus)] = (f"{format_value(nodes[node].value, nodes[node].unit)} is {fraction:.2f} "
                                             f"of the fleet median {format_value(sign * median, nodes[node].unit)} "
                                             f"(outlier: further from it than {spread})")
    return found


# The figures of one GPU or pair a node has several of, of one model (one GPU model; one link class of
# two GPUs): each against its node's others, by the fleet's rule (median / MAD, FLEET_GAP's floor).
NODE_PEERS_MIN = 3  # GPUs or pairs of one model on a node before the rule applies
# Not the host links: on a node of two sockets a GPU's h2d and d2h move with where the pinned memory
# lies (the far socket's GPUs read it across the CPUs' link); their bands and the PCIe link check
# (width, generation) judge them
NODE_RULE_SKIPS = ("h2d", "d2h")


def node_outliers(figures: list[Figure], facts: dict[str, str], floor: float = FLEET_GAP) -> dict[tuple[str, str], str]:
    """(figure, gpus) -> why that GPU's or pair's figure stands out below the node's others of its
    model (a GPU's memory, a pair's link: d2d@2 at half the other three GPUs', peer@1>2 at half the
    other eleven NV18 pairs'). Only the worse side counts; the CPU figures never (one each), nor the
    host links (NODE_RULE_SKIPS)."""
    groups: dict[tuple[str, str], list[Figure]] = {}
    for f in figures:
        spec = BY_NAME.get(f.name)
        if spec is None or not f.gpus or f.gpus == "host" or not (spec.every_gpu or ">" in f.gpus) \
                or f.name in NODE_RULE_SKIPS:
            continue
        groups.setdefault((f.name, model_of(facts, f.gpus)), []).append(f)
    found = {}
    for (name, model), members in groups.items():
        if len(members) < NODE_PEERS_MIN:
            continue
        sign = 1.0 if members[0].higher_better else -1.0
        xs = [sign * f.value for f in members]
        median = statistics.median(xs)
        for f, x in zip(members, xs):
            if x < median and outside(x, xs, floor):
                what = "pairs" if ">" in f.gpus else "GPUs"
                found[(name, f.gpus)] = (f"{format_value(f.value, f.unit)} is {f.value / (sign * median):.2f} of the "
                                         f"median ({format_value(sign * median, f.unit)}) of this node's "
                                         f"{len(members)} {what} of its model (an outlier among them)")
    return found


def flag_node_outliers(judged: dict[tuple[str, str], Event], figures: list[Figure], facts: dict[str, str]) -> None:
    """A GPU's or pair's figure that node_outliers names fails, whatever its expectation said (a
    single host's reference only warns; a node with no reference passes every figure)."""
    for key, why in node_outliers(figures, facts).items():
        event = judged.get(key)
        if event is not None and event.status != FAIL:
            event.status = FAIL
            event.reason = "; ".join(x for x in (why, event.reason) if x)


def fleet_status(figure: Figure, median: float | None) -> str:
    """A fleet outlier's event: FAIL; a CPU figure's WARN unless it is CPU_FACTOR times worse than
    the fleet's median (figures.CPU_FACTOR)."""
    return WARN if cpu_warning_only(figure, median) else FAIL


def fleet_medians(by_node: dict[str, list[Figure]]) -> dict[tuple[str, str], float]:
    values: dict[tuple[str, str], list[float]] = {}
    for figures in by_node.values():
        for f in figures:
            values.setdefault((f.name, f.gpus), []).append(f.value)
    return {k: statistics.median(v) for k, v in values.items()}


def exit_code(events: list[Event]) -> int:
    return 1 if any(e.status == FAIL for e in events) else 0
