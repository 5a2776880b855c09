"""Disjoint GPU pairs measured at once (issue 34). On a node whose every pair of GPUs is joined by
NVLink (an NVSwitch or an all-to-all NVLink board), two pairs with no GPU in common share no link:
`--pairs all` measures its headline pairs (harness.classes) in rounds of a round-robin tournament,
n-1 rounds of n/2 pairs per direction (the pairs swept whole, one per class, stay out and run alone).

Only the headline scenarios take part (ROUND_SCENARIOS: ipc's copy-engine stream and hand-off, the
device ping-pong: paths in device memory); staging, mmap and the host paths never run at once (two
GPUs of an HGX board still share a PCIe switch to the host), nor does anything on a node where a
pair meets over PCIe or across sockets. Proved, not assumed: the first round is measured one pair
at a time and then all at once, and the later rounds run at once only where no figure ran slower
together beyond PROOF_DELTA and the two passes' own spread (Proof.decide); else one pair at a time.
The together pass of the proof is its evidence only: its rows are not kept (the alone pass's are).
The header names the rounds (`rounds.N`), the proof's outcome (`rounds.proof`) and whether the
rounds ran at once (`rounds.together`).

`check --preset health` takes every ordered pair's peer run (its health form, in device memory: no
P2P-off pass) in the same rounds (rounds_of with scenarios=('peer',); check.node.preset_plan)."""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections import defaultdict
from typing import Any, Callable

from gpuipc_bench.harness.classes import HEADLINE_SCENARIOS

ROUND_SCENARIOS = HEADLINE_SCENARIOS  # ipc and latency: device memory and the tool's own flags, no PCIe to host
PROOF_DELTA = 0.02  # the verdict's smallest effect (analysis.stats.MIN_EFFECT): slower together beyond it
PROOF_MIN_SAMPLES = 3  # samples a side before two passes of a figure are compared (stats.MIN_SAME)


def tournament(gpus: int) -> list[list[tuple[int, int]]]:
    """A round-robin tournament of `gpus` GPUs (the circle method): n-1 rounds (n even; an odd n
    gets a bye) of n/2 disjoint pairs, each pair once; then the same rounds the other way, so that
    every ordered pair comes once in 2(n-1) rounds."""
    players: list[int | None] = list(range(gpus)) + ([None] if gpus % 2 else [])
    n = len(players)
    rounds = []
    for _ in range(n - 1):
        pairs = [(players[i], players[n - 1 - i]) for i in range(n // 2)]
        rounds.append([(a, b) if a < b else (b, a) for a, b in pairs if a is not None and b is not None])
        players = [players[0], players[-1], *players[1:-1]]
    return rounds + [[(b, a) for a, b in pairs] for pairs in rounds]


def nvlink_everywhere(machine) -> bool:
    """Every pair of the node's GPUs joined by NVLink (NVML's link 'NV<n>'): no PCIe switch or
    socket between any two."""
    count = machine.gpu_count
    return count >= 2 and all(str(machine.links.get((a, b)) or machine.links.get((b, a)) or "").startswith("NV")
                              for a in range(count) for b in range(count) if a != b)


@dataclasses.dataclass
class Rounds:
    """The headline pairs in rounds (the first: the proof), and what the proof found."""
    rounds: tuple[tuple[tuple[int, int], ...], ...]
    together: bool | None = None  # the proof's outcome (None: not yet measured)
    proof: str = ""
    scenarios: tuple[str, ...] = ROUND_SCENARIOS  # the scenarios whose runs of the round pairs take part

    def metadata(self) -> dict[str, str]:
        """Header keys: rounds.N (its pairs, measured at once), rounds.proof, rounds.together."""
        meta = {f"rounds.{i + 1}": ",".join(f"{a}>{b}" for a, b in pairs) for i, pairs in enumerate(self.rounds)}
        if self.proof:
            meta["rounds.proof"] = self.proof
        if self.together is not None:
            meta["rounds.together"] = "yes" if self.together else "no: one pair at a time"
        return meta

    def pairs(self) -> set[tuple[int, int]]:
        return {pair for pairs in self.rounds for pair in pairs}


def plan_rounds(classes, machine, config) -> Rounds | None:
    """The headline pairs of `--pairs all` in rounds where the node allows it (every pair NVLink,
    persistent process sets: --launcher fork), else None. Rounds of fewer than two pairs are left
    out (their pairs run as before); the largest round first: the proof needs two pairs at least."""
    if classes is None or not classes.headline or config.launcher != "fork":
        return None
    return rounds_of(classes.headline, machine)


def rounds_of(pairs, machine, scenarios: tuple[str, ...] = ROUND_SCENARIOS) -> Rounds | None:
    """`pairs` (ordered GPU pairs) in the tournament's rounds where every pair of the node is NVLink,
    else None; rounds of fewer than two pairs left out (their pairs run one at a time), the largest
    first (the proof needs two pairs at least). `scenarios`: whose runs take part."""
    if not nvlink_everywhere(machine):
        return None
    wanted = set(pairs)
    rounds = [tuple(p for p in each if p in wanted) for each in tournament(machine.gpu_count)]
    rounds = sorted((r for r in rounds if len(r) >= 2), key=len, reverse=True)
    return Rounds(tuple(rounds), scenarios=tuple(scenarios)) if rounds else None


@dataclasses.dataclass
class Round:
    """One round in the session's queue: each pair's runs ((scenario, specs, mode), in order)."""
    index: int
    runs: dict[tuple[int, int], list]
    proof: bool = False


def pair_of(specs) -> tuple:
    return specs[0].device, specs[-1].device


def schedule(queue: list, rounds: Rounds | None) -> list:
    """The session's queue with the round pairs' headline runs taken out and put, round by round,
    where the first of them was."""
    if rounds is None:
        return queue
    pairs = rounds.pairs()

    def in_round(run) -> bool:
        return run[0].name in rounds.scenarios and pair_of(run[1]) in pairs and run[2] is None

    taken = [run for run in queue if in_round(run)]
    if not taken:
        return queue
    at = next(i for i, run in enumerate(queue) if in_round(run))
    items = []
    for index, round_pairs in enumerate(rounds.rounds):
        runs = {pair: [run for run in taken if pair_of(run[1]) == pair] for pair in round_pairs}
        items.append(Round(index + 1, runs, proof=index == 0))
    rest = [run for run in queue if not in_round(run)]
    return rest[:at] + items + rest[at:]


def split(runs: list, rounds: Rounds | None) -> tuple[list, list[list[list]]]:
    """(the runs taken one after another, [each round's [each pair's runs]]) as schedule() takes them."""
    queue = schedule(list(runs), rounds)
    serial = [item for item in queue if not isinstance(item, Round)]
    return serial, [list(item.runs.values()) for item in queue if isinstance(item, Round)]


def estimate_with_rounds(runs, config, modes: list, stream_sizes, gpus: int, rounds: Rounds | None,
                         pair_start_s: float | None = None) -> float:
    """The plan's estimate (harness.estimate) with its rounds: a round costs its longest pair (their
    processes start at once); the first round twice, alone (its pairs one after another) and
    together. Assumes the proof holds; where it does not, the later rounds take their pairs' sum."""
    from gpuipc_bench.harness.estimate import PAIR_START_S, estimate_seconds, run_seconds, start_seconds

    pair_start_s = PAIR_START_S if pair_start_s is None else pair_start_s
    serial, grouped = split(runs, rounds)
    total = estimate_seconds(serial, config, modes, stream_sizes, gpus, pair_start_s)
    for index, pairs in enumerate(grouped):
        each = [sum(run_seconds(scenario, specs, mode, config, modes, stream_sizes) for scenario, specs, mode in runs)
                + start_seconds(runs[0][0], gpus, runs[0][1], pair_start_s) for runs in pairs]
        total += max(each) + (sum(each) if index == 0 else 0.0)
    return total


# --------------------------------------------------------------------------- the proof


class Proof:
    """The first round's figures alone and together: fed their rows, decides whether the later
    rounds run at once."""

    def __init__(self) -> None:
        self.samples: dict[str, dict[tuple, list[float]]] = {"alone": defaultdict(list), "together": defaultdict(list)}
        self.lock = threading.Lock()

    def feeder(self, which: str) -> Callable[[dict], None]:
        def add(row: dict) -> None:
            if row.get("metric") == "setup" or row.get("path") in ("ceiling", "") or row.get("verified") is False:
                return
            key = (row.get("src"), row.get("dst"), row.get("path"), row.get("variant"), row.get("measure"),
                   row.get("metric"), int(row.get("bytes") or 0))
            with self.lock:
                self.samples[which][key].append(float(row["seconds"]))

        return add

    def decide(self) -> tuple[bool, str]:
        """(together, what the header says): together unless a figure ran slower together than alone
        beyond PROOF_DELTA and beyond the passes' own spread (its ratio's interval wholly beyond both:
        analysis.stats.compare). Two pairs that share nothing cannot make a transfer faster: a figure
        faster together shows how far two passes of one process set drift apart (on four H200s the
        call-bound and 4 KiB figures went 0.941x to 1.058x, both ways), and a slowdown within that
        drift is not told from it. Where no figure ran faster together the bar is PROOF_DELTA: a
        run whose every figure is slower together (a shared link) is refused."""
        from gpuipc_bench.analysis.stats import FASTER, SLOWER, compare
        from gpuipc_bench.sizes import format_size

        alone, together = self.samples["alone"], self.samples["together"]
        keys = [k for k in alone if min(len(alone[k]), len(together.get(k, ()))) >= PROOF_MIN_SAMPLES]
        if not keys:
            return False, "no figure measured alone and together: one pair at a time"

        def name(key) -> str:
            src, dst, path, variant, measure, metric, nbytes = key
            return f"{path}/{variant} {measure or metric} {format_size(nbytes)} {src}>{dst}"

        results = {key: compare(alone[key], together[key], delta=PROOF_DELTA) for key in sorted(keys, key=str)}
        faster = [1 / r.ratio for r in results.values() if r.outcome == SLOWER and r.ratio > 0]  # together faster
        spread = max([1.0, *faster])  # 1: no figure ran faster together beyond PROOF_DELTA
        bar = (1 + PROOF_DELTA) * spread - 1
        apart = [f"{name(key)} {r.ratio:.3f}x" for key, r in results.items()
                 if r.outcome == FASTER and compare(alone[key], together[key], delta=bar).outcome == FASTER]
        widest = max(results.items(), key=lambda item: item[1].ratio)
        counted = f"{len(keys)} figures alone and together"
        drift = f"{PROOF_DELTA:.0%} past the passes' spread, {spread:.3f}x" if faster else f"{PROOF_DELTA:.0%}"
        if apart:
            return False, f"{counted}: {len(apart)} slower together beyond {drift} ({'; '.join(apart[:3])})"
        return True, (f"{counted}: none slower together beyond {drift} (the slowest together: "
                      f"{name(widest[0])} {widest[1].ratio:.3f}x)")


def at_once(calls: list[Callable[[], Any]], stop: Callable[[], None]) -> list:
    """Run `calls` in threads of their own and wait for all; their results in order. A signal or an
    error in this thread (or one a call raised) stops every call's processes (`stop`) and is raised
    here once they are done."""
    results: list = [None] * len(calls)
    raised: list[BaseException] = []

    def body(index: int, call: Callable[[], Any]) -> None:
        try:
            results[index] = call()
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread below
            raised.append(exc)

    threads = [threading.Thread(target=body, args=(i, c), name=f"gpuipc-bench-round-{i}", daemon=True)
               for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(0.1)
                if raised:
                    raise raised[0]
    except BaseException:
        stop()
        for thread in threads:
            thread.join(10.0)
        raise
    return results


def run_round(item: Round, rounds: Rounds, proof: Proof, one: Callable[..., Any], sets) -> list:
    """Run one round of the session's queue: `one(run, keep, tee)` runs a scenario run (keep: its rows
    into the results; tee: also fed them), `sets` the run's WorkerSets. The proof round: its pairs one
    after another, then at once (rows to the proof only), and the decision into `rounds`; a later
    round at once where the proof held, else one pair at a time. The round's sets are forked in this
    thread and retired after it. The outcomes, in order."""
    from gpuipc_bench.harness.supervision import WorkerLost

    def prepare() -> None:
        for runs in item.runs.values():
            sets.prepare(runs[0][0], runs[0][1])

    def pair(runs: list, keep: bool = True, tee: Callable[[dict], None] | None = None) -> list:
        return [one(run, keep, tee) for run in runs]

    def lost(outcomes) -> bool:
        return any(isinstance(getattr(o, "error", None), WorkerLost) for o in outcomes)

    prepare()
    outcomes: list = []
    if item.proof or not rounds.together:
        tee = proof.feeder("alone") if item.proof else None
        for runs in item.runs.values():
            outcomes += pair(runs, tee=tee)
    if item.proof and not lost(outcomes):
        prepare()  # a set a failure ended is forked again here, not in a round's thread
        together = at_once([functools.partial(pair, runs, False, proof.feeder("together"))
                            for runs in item.runs.values()], sets.close)
        outcomes += [o for each in together for o in each]
        rounds.together, rounds.proof = proof.decide()
    elif not item.proof and rounds.together:
        outcomes += [o for each in at_once([functools.partial(pair, runs) for runs in item.runs.values()], sets.close)
                     for o in each]
    for runs in item.runs.values():
        sets.retire(runs[0][1])
    return outcomes
