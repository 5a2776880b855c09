"""Test-only hooks of `check` (not user options; like GPUIPC_BENCH_FAULT in gpuipc_bench.hooks.faults).

GPUIPC_BENCH_TEST_NODE_NAMES  'a,a,b,b,c,c': rank r of an MPI job calls its node item r of the list
                              instead of the host name, so that `mpirun -np 6` on one machine acts as
                              3 nodes. A process that is no MPI rank takes the first item.
GPUIPC_BENCH_TEST_NODES_IN_TURN  FILE: the simulated nodes of one machine measure one at a time (a lock
                              on FILE around each node's measurement): separate nodes share no memory
                              bandwidth, nodes simulated on one machine do (the healthy-runs benchmark)
GPUIPC_BENCH_CHECK_PLANT      plants, separated by ';':
  slow:NODE:FIGURE:FACTOR     every measurement of FIGURE on NODE comes out FACTOR times as good
                              (0.3: a bandwidth at 30%, a latency 1/0.3 times as long)
  flutter:NODE:FIGURE:FACTOR  the same, the first measurement only (a re-measure passes)
  fixed:NODE:FIGURE:VALUE     every measurement of FIGURE on NODE comes out as VALUE (its unit: GB/s or
                              µs; a finite number above 0), before slow and flutter scale it: the
                              fleet rule's input without the noise of nodes that share a machine's cores
                              (the scenario still runs and its rows keep what was measured)
  kill:NODE[:SECONDS]         NODE's leading rank waits SECONDS (default 0), then SIGKILLs itself
                              instead of sending its report to rank 0
  hang:NODE                   NODE's leading rank never sends its report
  stop:RANK                   MPI rank RANK stops itself (SIGSTOP) before it says hello to rank 0
  without:SCENARIO            the check leaves SCENARIO out (a test whose subject is not that path)
  fault:SCENARIO:FAULT        the workers of SCENARIO alone get GPUIPC_BENCH_FAULT=FAULT (its syntax,
                              ':' included: gpuipc_bench.hooks.faults), a real fault in that scenario
NODE '*' is every node. FIGURE is a figure's name (every GPU's) or NAME@GPUS, one GPU's or pair's
(h2d@2: GPU 2's host-to-device link; peer@0>1).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time

NODE_NAMES_ENV = "GPUIPC_BENCH_TEST_NODE_NAMES"
PLANT_ENV = "GPUIPC_BENCH_CHECK_PLANT"


def node_name(rank: int | None = None, environ=os.environ) -> str:
    """This process's node: the host name, or its item of the test-only override."""
    import socket

    names = [n.strip() for n in environ.get(NODE_NAMES_ENV, "").split(",") if n.strip()]
    if names:
        return names[min(rank or 0, len(names) - 1)]
    return socket.gethostname()


def ranks_on_node(rank: int | None = None, environ=os.environ) -> int:
    """How many ranks the launcher put on this process's node (0: it does not say): under the
    node-name override, how many ranks have this rank's name."""
    names = [n.strip() for n in environ.get(NODE_NAMES_ENV, "").split(",") if n.strip()]
    if names:
        return names.count(node_name(rank, environ))
    for variable in ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMIX_LOCAL_SIZE"):
        value = environ.get(variable, "")
        if value.isdigit():
            return int(value)
    return 0


def at_start(rank: int, environ=os.environ) -> None:
    """Where a planted stop acts: before the rank says hello."""
    for parts in _plants(environ):
        if parts[0] == "stop" and len(parts) == 2 and parts[1] == str(rank):
            os.kill(os.getpid(), signal.SIGSTOP)


def _plants(environ=os.environ) -> list[list[str]]:
    return [item.strip().split(":") for item in environ.get(PLANT_ENV, "").split(";") if item.strip()]


def _matches(pattern: str, node: str) -> bool:
    return pattern in ("*", node)


def _names(figure: str, gpus: str) -> tuple[str, ...]:
    """What a plant's FIGURE may say for this figure: its name, or its name at its GPUs."""
    return (figure, f"{figure}@{gpus}") if gpus else (figure,)


def figure_factor(node: str, figure: str, attempt: int, environ=os.environ, gpus: str = "") -> float:
    """How much better (>1) or worse (<1) a plant makes `figure` (of `gpus`) on `node` at this attempt
    (0: first)."""
    factor = 1.0
    for parts in _plants(environ):
        if len(parts) == 4 and parts[0] in ("slow", "flutter") and _matches(parts[1], node) \
                and parts[2] in _names(figure, gpus):
            if parts[0] == "slow" or attempt == 0:
                factor *= float(parts[3])
    return factor


def fixed_value(node: str, figure: str, environ=os.environ, gpus: str = "") -> float | None:
    """The value a fixed plant gives `figure` (of `gpus`) on `node` (its unit), None: as measured. A
    VALUE that is no finite number above 0 raises ValueError naming the plant."""
    import math

    value = None
    for parts in _plants(environ):
        if len(parts) == 4 and parts[0] == "fixed" and _matches(parts[1], node) and parts[2] in _names(figure, gpus):
            try:
                value = float(parts[3])
            except ValueError:
                value = math.nan
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{PLANT_ENV}: {':'.join(parts)}: VALUE must be a finite number above 0")
    return value


def left_out(scenario: str, environ=os.environ) -> bool:
    """Whether a plant leaves `scenario` out of the check."""
    return any(parts == ["without", scenario] for parts in _plants(environ))


@contextlib.contextmanager
def fault_for(scenario: str, environ=os.environ):
    """While the check runs `scenario`: GPUIPC_BENCH_FAULT as a fault plant says (the forked workers
    inherit it; MPI ranks are told by their own environment)."""
    from gpuipc_bench.hooks.faults import ENV

    fault = next((":".join(p[2:]) for p in _plants(environ) if p[0] == "fault" and len(p) > 2 and p[1] == scenario),
                 None)
    if fault is None:
        yield
        return
    before = environ.get(ENV)
    environ[ENV] = fault
    try:
        yield
    finally:
        if before is None:
            environ.pop(ENV, None)
        else:
            environ[ENV] = before


def before_report(node: str, environ=os.environ) -> None:
    """Where a planted kill or hang of a node's leading rank acts: just before its report."""
    for parts in _plants(environ):
        if parts[0] == "kill" and len(parts) in (2, 3) and _matches(parts[1], node):
            time.sleep(float(parts[2]) if len(parts) == 3 else 0.0)
            os.kill(os.getpid(), signal.SIGKILL)
        if parts[0] == "hang" and len(parts) == 2 and _matches(parts[1], node):
            while True:
                time.sleep(3600)


IN_TURN_ENV = "GPUIPC_BENCH_TEST_NODES_IN_TURN"


@contextlib.contextmanager
def node_in_turn(environ=os.environ):
    """While held, no other simulated node of this machine measures (GPUIPC_BENCH_TEST_NODES_IN_TURN);
    nothing where the variable is unset."""
    path = environ.get(IN_TURN_ENV, "")
    if not path:
        yield
        return
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
