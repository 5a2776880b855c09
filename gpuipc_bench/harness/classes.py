"""GPU pairs by link class: the cost of `--pairs all` grows with the classes of link on the node,
not with its N(N-1) ordered pairs. One pair per class is swept whole (every path, every size); every
other pair measures the headline figures that reveal a bad link or a bad GPU (the copy engine's
stream at the largest size, a 4 KiB hand-off, the device-initiated one-way latency) and is swept
whole only where one of them falls outside its class (RESWEEP_BEYOND from the class median) on its
first process set and again on a fresh one (Resweep).
`--pairs all --full` sweeps every pair whole."""

from __future__ import annotations

import copy
import dataclasses
import math
from collections import defaultdict

from gpuipc_bench import robust

HEADLINE_SCENARIOS = ("ipc", "latency")  # the scenarios a headline pair runs, at HEADLINE_SIZES of its sweep
HEADLINE_SMALL = 4096
# (path, variant, measure, which size): the figures compared with the class; 'largest' or 'small' of the sweep
HEADLINE_FIGURES = (("ipc", "ce", "stream", "largest"), ("ipc", "ce", "handoff", "small"),
                    ("peer", "device-ll", "pingpong", "small"))
RESWEEP_BEYOND = 0.04  # 2 delta (the verdict's 2% effect size): a headline this far from its class median


def link_class(machine, a: int, b: int) -> str:
    """The class of the link between GPUs a and b: NVML's link ('NV18': 18 NVLinks between them;
    'PIX', 'PXB', 'PHB', 'NODE', 'SYS': the PCIe path, SYS across sockets) and the GPUs' model. The
    link is the header's `link.A-B`, which the analysis reads (analysis.model.link_class)."""
    link = machine.links.get((a, b)) or machine.links.get((b, a)) or "unknown link"
    names = " / ".join(sorted({machine.gpus[a].name, machine.gpus[b].name}))
    return f"{link} · {names}"


@dataclasses.dataclass(frozen=True)
class PairClasses:
    """Each ordered pair's class, the pairs swept whole (one per class, or all with --full) and the
    pairs measured at their headline figures."""
    classes: dict[tuple[int, int], str]
    full: tuple[tuple[int, int], ...]
    headline: tuple[tuple[int, int], ...]

    def metadata(self) -> dict[str, str]:
        """Header keys: pairs.class.A>B (its link class), pairs.full and pairs.headline."""
        meta = {f"pairs.class.{a}>{b}": name for (a, b), name in self.classes.items()}
        meta["pairs.full"] = ",".join(f"{a}>{b}" for a, b in self.full)
        meta["pairs.headline"] = ",".join(f"{a}>{b}" for a, b in self.headline)
        return meta


def group_pairs(pairs, machine, full: bool = False) -> PairClasses:
    """The first pair of each class (in the order given) is swept whole; with `full`, every pair."""
    classes = {pair: link_class(machine, *pair) for pair in pairs}
    seen: set[str] = set()
    whole, headline = [], []
    for pair in pairs:
        if full or classes[pair] not in seen:
            whole.append(pair)
            seen.add(classes[pair])
        else:
            headline.append(pair)
    return PairClasses(classes, tuple(whole), tuple(headline))


def headline_sizes(sizes: tuple[int, ...]) -> tuple[int, ...]:
    """The sizes of a headline measurement in a sweep: the smallest from HEADLINE_SMALL up (else the
    largest below it), and the largest."""
    ordered = sorted(sizes)
    small = next((n for n in ordered if n >= HEADLINE_SMALL), ordered[-1])
    return tuple(sorted({small, ordered[-1]}))


def headline(scenario, config):
    """The scenario as a headline pair runs it (a copy measuring headline_sizes of its sweep), or
    None for a scenario a headline pair leaves out."""
    if scenario.name not in HEADLINE_SCENARIOS:
        return None
    return sized(scenario, headline_sizes(scenario.sizes(config)))


def sized(scenario, sizes: tuple[int, ...]):
    """A copy of a registry scenario that measures only `sizes` of its sweep (Scenario.only_sizes):
    an instance of the same class, so that it travels to a persistent worker by pickle."""
    reduced = copy.copy(scenario)
    reduced.only_sizes = tuple(sizes)
    return reduced


class Resweep:
    """Fed the run's rows (the parent's on_row); once the first pass is done, `pairs()` names the
    headline pairs whose figures fall outside their class, with why. Each is measured again at its
    headline figures on a fresh process set (replica 2: `confirm_runs`), and `confirmed()` names
    those outside their class there too: only they are swept whole. On four H200s the device-initiated
    4 KiB latency of healthy NV18 pairs sat at ~1.05 or ~1.13 us, a different pair slow from run to
    run: one set's draw, not the link's."""

    def __init__(self, classes: PairClasses):
        self.classes = classes
        self.samples: dict[tuple, list[float]] = defaultdict(list)  # (pair, figure, bytes, replica) -> seconds
        self.suspects: dict[tuple[int, int], str] | None = None  # pairs(), once the first pass is done

    def add(self, row: dict) -> None:
        try:
            pair = (int(row["src"]), int(row["dst"]))
        except (KeyError, TypeError, ValueError):
            return
        if pair not in self.classes.classes or row.get("verified") is False:
            return
        figure = (row.get("path"), row.get("variant"), row.get("measure"))
        if any(figure == f[:3] for f in HEADLINE_FIGURES):
            replica = int(row.get("replica") or 1)
            self.samples[(pair, figure, int(row.get("bytes", 0)), replica)].append(float(row["seconds"]))

    def ratios(self, replica: int = 1) -> dict[tuple, tuple[float, int]]:
        """(pair, figure, bytes) -> (its median in `replica` over its class's first-pass median, the
        pairs of that class median), for the headline pairs."""
        first = {key[:3]: robust.median(v) for key, v in self.samples.items() if v and key[3] == 1}
        by_class: dict[tuple, list[float]] = defaultdict(list)
        for (pair, figure, nbytes), value in first.items():
            by_class[(self.classes.classes[pair], figure, nbytes)].append(value)
        out = {}
        for (pair, figure, nbytes, rep), values in sorted(self.samples.items()):
            if rep != replica or not values or pair not in self.classes.headline:
                continue
            peers = by_class[(self.classes.classes[pair], figure, nbytes)]
            if len(peers) < 2:
                continue
            middle = robust.median(peers)
            out[(pair, figure, nbytes)] = (robust.median(values) / middle if middle > 0 else math.inf, len(peers))
        return out

    def pairs(self) -> dict[tuple[int, int], str]:
        """{pair: why} for each headline pair with a first-pass figure beyond RESWEEP_BEYOND of its
        class's median (over every pair of the class that measured it at that size)."""
        from gpuipc_bench.sizes import format_size

        out: dict[tuple[int, int], str] = {}
        for (pair, figure, nbytes), (ratio, peers) in self.ratios(1).items():
            if pair not in out and abs(ratio - 1) > RESWEEP_BEYOND:
                out[pair] = (f"{figure[0]}/{figure[1]} {figure[2]} at {format_size(nbytes)} took {ratio:.2f}x "
                             f"the median of its class ({peers} pairs)")
        return out

    def confirmed(self) -> tuple[dict[tuple[int, int], str], dict[tuple[int, int], str]]:
        """({pair: why} to sweep whole: outside its class on a fresh process set too, or not measured
        there; {pair: why not}: inside it there), over the suspects pairs() named."""
        again = self.ratios(2)
        whole, spared = {}, {}
        for pair, why in (self.suspects or {}).items():
            mine = {key: ratio for key, (ratio, _) in again.items() if key[0] == pair}
            if not mine:
                whole[pair] = why + "; not measured again"
                continue
            widest = max(mine.values(), key=lambda r: abs(r - 1))
            if abs(widest - 1) > RESWEEP_BEYOND:
                whole[pair] = f"{why}; again on a fresh process set: {widest:.2f}x"
            else:
                spared[pair] = f"{why}; on a fresh process set within {RESWEEP_BEYOND:.0%} ({widest:.2f}x at most)"
        return whole, spared


def confirm_runs(plan, pair: tuple[int, int]) -> list:
    """The headline runs of `pair` in the plan ((scenario, specs)): what a suspect measures again."""
    return [(scenario, specs) for scenario, specs in plan.runs
            if scenario.name in HEADLINE_SCENARIOS and (specs[0].device, specs[-1].device) == pair]
