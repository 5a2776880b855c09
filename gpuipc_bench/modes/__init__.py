"""GPU sharing modes: how the two processes of a same-GPU pair share their GPU.

A mode belongs to the harness, not to the paths: every scenario that declares
`sharing_modes` and whose workers share one GPU runs once per mode of the run (--sharing),
and never knows which; the mode only sets each worker's environment before its first CUDA
call, and the rows' `sharing` column says which mode measured them. A mode is one file:

    name           the rows' `sharing` value
    unavailable()  why it cannot run here, or None (asked before any work)
    start()        once per run, before its first worker (an MPS daemon); stop() at the end
    env()          what each worker sets before it initialises CUDA
    facts()        what the CSV header records about it

Registry: MODES, one line each, in the order a run measures them. A mode with a busy
neighbour ('time-sliced+compute', 'mps+copy': modes/neighbour.py) wraps one of them.
"""

from __future__ import annotations

import contextlib

from gpuipc_bench.errors import UsageError
from gpuipc_bench.modes.base import Mode
from gpuipc_bench.modes.mps import Mps
from gpuipc_bench.modes.neighbour import KINDS, Neighbour
from gpuipc_bench.modes.time_sliced import TimeSliced

MODES: dict[str, type[Mode]] = {
    TimeSliced.name: TimeSliced,
    Mps.name: Mps,
}

__all__ = ["MODES", "Mode", "Mps", "Neighbour", "TimeSliced", "parse", "make"]


def parse(text: str, option: str = "--sharing") -> tuple[str, ...]:
    """'time-sliced,mps' -> ('time-sliced', 'mps'); 'mps:25' is MPS with its clients limited to
    25% of the SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE); a mode with '+compute' or '+copy' has a
    busy neighbour on the pair's GPU. UsageError naming the option otherwise."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise UsageError(f"{option}: give one or more of {', '.join(MODES)} (or mps:PCT), separated by commas")
    for name in names:
        name, plus, kind = name.partition("+")
        if plus and kind not in KINDS:
            raise UsageError(f"{option} {text}: {name}+{kind}: a busy neighbour is +{' or +'.join(KINDS)}")
        base, _, pct = name.partition(":")
        if base not in MODES or (pct and base != Mps.name):
            raise UsageError(f"{option} {text}: unknown sharing mode {name!r} (known: {', '.join(MODES)}, mps:PCT)")
        if pct and not (pct.isdigit() and 1 <= int(pct) <= 99):
            raise UsageError(f"{option} {text}: {name}: the thread percentage is a whole number from 1 to 99")
    if len(set(names)) != len(names):
        raise UsageError(f"{option} {text}: names a mode twice")
    order = list(MODES)

    def rank(name: str) -> tuple:
        mode, _, kind = name.partition("+")
        base, _, pct = mode.partition(":")
        return order.index(base), -int(pct or 100), list(KINDS).index(kind) if kind else -1

    return tuple(sorted(names, key=rank))


def make(names: tuple[str, ...]) -> list[Mode]:
    """The modes, sharing one MPS daemon between 'mps' and 'mps:PCT' (one daemon per run)."""
    made: list[Mode] = []
    daemon_owner: Mps | None = None
    for name in names:
        mode_name, _, kind = name.partition("+")
        base, _, pct = mode_name.partition(":")
        mode: Mode
        if base == Mps.name:
            mode = Mps(int(pct or 100), shares=daemon_owner)
            daemon_owner = daemon_owner or mode
        else:
            mode = MODES[base]()
        made.append(Neighbour(mode, kind) if kind else mode)
    return made


def end_all(modes) -> None:
    """The modes go with the run, whatever happened: every busy neighbour first (none may outlive
    the MPS daemon it is a client of), then the daemons, the modes that share one (whose owner is
    the first of them) last made first."""
    for mode in modes:
        with contextlib.suppress(Exception):
            mode.leave()
    for mode in reversed(list(modes)):
        mode.stop()
