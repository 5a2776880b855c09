"""Each worker sees only its own GPUs. A CUDA context's start costs more for every GPU the process
sees: on two H200s, 0.23-0.40 s with one GPU visible against 0.43-0.47 s with both (the driver opens
each GPU it enumerates: results/h200x2-context-start.txt), so on an 8-GPU node every start of
processes paid ~1.5 s for GPUs it never used. The parent names a process set's GPUs
(`visibility_env`, their UUIDs in CUDA_VISIBLE_DEVICES, producer first) and the worker numbers
them 0, 1, ... inside.

Everything in Python keeps the run's GPU numbers (rows, ceiling keys, lane counters, messages);
only a call into CUDA or a library that takes a device ordinal passes `cuda_index(device)`. Where a
call is missed, a set on one GPU fails loudly (its only ordinal is 0) rather than measure another GPU.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

SEES_ENV = "GPUIPC_BENCH_SEES"  # the run's numbers of the GPUs a worker sees, in its CUDA order
_LOCAL: dict[int, int] = {}  # this worker's: the run's GPU number -> its CUDA ordinal here


def visibility_env(devices: Sequence[int | None], uuids: Mapping[int, str]) -> dict[str, str]:
    """What a process set on `devices` (the run's GPU numbers, each worker's; None: a CPU worker)
    sets before CUDA starts: CUDA_VISIBLE_DEVICES to those GPUs' UUIDs (`uuids`: every GPU the run
    sees, by number) and SEES_ENV to their numbers. Nothing where the set sees every GPU anyway, a
    UUID is unknown, or a worker sits on no GPU."""
    if not devices or None in devices:
        return {}
    wanted = [int(d) for d in dict.fromkeys(devices) if d is not None]
    chosen = [uuids.get(d, "") for d in wanted]
    if len(wanted) >= len(uuids) or not all(u.startswith("GPU-") for u in chosen):
        return {}
    return {"CUDA_VISIBLE_DEVICES": ",".join(chosen), SEES_ENV: ",".join(map(str, wanted))}


def enter(environ: Mapping[str, str] | None = None) -> None:
    """In the worker, before its first CUDA call: the GPU numbers it sees, from SEES_ENV."""
    text = (os.environ if environ is None else environ).get(SEES_ENV, "")
    _LOCAL.clear()
    for ordinal, number in enumerate(t for t in text.split(",") if t.strip()):
        _LOCAL[int(number)] = ordinal


def cuda_index(device) -> int:
    """The CUDA ordinal of the run's GPU `device` in this process."""
    number = int(device)
    if _LOCAL and number not in _LOCAL:  # never another GPU's ordinal: a loud error, not a wrong GPU
        from gpuipc_bench.errors import BenchError

        raise BenchError(f"GPU {number} is not among the GPUs this worker sees ({', '.join(map(str, _LOCAL))})")
    return _LOCAL.get(number, number)
