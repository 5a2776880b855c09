"""`check` on every node of an MPI allocation: `mpirun --map-by ppr:2:node gpuipc-bench check`,
`srun -N 16 --ntasks-per-node=2 gpuipc-bench check`.

MPI carries everything, point to point, with no collective over the whole job (one would hang
on a dead node):

1. every rank says hello to rank 0: its node (the host name) and its PID and network namespaces;
2. rank 0 groups the ranks by node and tells each its node's pair: the node's two lowest ranks
   are its workers, as in a one-node `mpirun -np 2 gpuipc-bench run` (a node of one rank forks
   its workers; further ranks of a node wait); the pair make a communicator of their own
   (MPI_Comm_create_group: collective over the two only) and the lower leads;
3. each node's leader checks its node (gpuipc_bench.check.node) and sends rank 0 its report:
   the node's facts, rows, path checks and figures, each judged against the expectations
   rank 0 sent it (a failing figure is measured again there);
4. rank 0 checks its own node meanwhile, writes each report's rows into the fleet CSV as it
   arrives (a `node` column; each node's facts as 'node.<name>.<key>' header lines), and
   waits until every node has reported or the deadline passes. A node that reported an error,
   did not report in time (hung) or whose rank died (the launcher then ends the job) is named
   and the others' rows are kept; the fleet's outliers are judged; then, if a node is missing,
   MPI_Abort ends the ranks that still hang.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from typing import Any, Callable

from gpuipc_bench.check import judge, paths

from gpuipc_bench.hooks import plant
from gpuipc_bench.check.expect import Expectations, parse
from gpuipc_bench.check.node import NodeReport, check_node
from gpuipc_bench.errors import Interrupted

HELLO, ASSIGN, REPORT = 31, 32, 33
POLL_S = 0.01


@dataclasses.dataclass
class Fleet:
    """What rank 0 ends with."""

    reports: dict[str, NodeReport]
    missing: dict[str, str]  # node -> why it is not in the table
    nodes: list[str]
    events: list[judge.Event] = dataclasses.field(default_factory=list)


def run(expectations: Expectations, tolerance: float | None, deadline: float, timeout: float,
        on_start: Callable[[list[str], dict[str, str]], None],
        on_report: Callable[[NodeReport], None]) -> Fleet | None:
    """Every rank calls this; rank 0 returns the Fleet, the others None once their part is done.
    `on_start(nodes, facts)` and `on_report(report)` run on rank 0 (the CSV's header and rows)."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD.Dup()
    rank, size = world.Get_rank(), world.Get_size()
    node = plant.node_name(rank)
    mine = (rank, node, *paths.namespaces())
    if rank != 0:
        world.send(mine, dest=0, tag=HELLO)
        _, pair, expected, partner = world.recv(source=0, tag=ASSIGN)
        _check_as_member(world, rank, node, pair, parse(expected), tolerance, timeout, partner)
        return None

    started = time.monotonic()
    hellos = {0: mine}
    status = MPI.Status()
    while len(hellos) < size and time.monotonic() - started < deadline:
        if world.Iprobe(source=MPI.ANY_SOURCE, tag=HELLO, status=status):
            message = world.recv(source=status.Get_source(), tag=HELLO)
            hellos[message[0]] = message
        else:
            time.sleep(POLL_S)
    by_node: dict[str, list[int]] = {}
    for r in sorted(hellos):
        by_node.setdefault(hellos[r][1], []).append(r)
    nodes = list(by_node)
    missing = {f"rank {r}": f"rank {r} said nothing within {deadline:g} s" for r in range(size) if r not in hellos}
    for name, ranks in by_node.items():
        pair = ranks[:2]
        for r in ranks:
            if r != 0:
                partner = hellos[pair[1] if r == pair[0] and len(pair) > 1 else pair[0]]
                world.send((name, pair if r in pair else [], expectations.to_json(), partner[2:]), dest=r, tag=ASSIGN)
    on_start(nodes, {})
    fleet = Fleet({}, missing, nodes)
    inbox: queue.Queue = queue.Queue()
    stop = threading.Event()
    receiver = threading.Thread(target=_receive, args=(world, inbox, stop, len(by_node) - 1), daemon=True,
                                name="gpuipc-bench check receiver")
    receiver.start()

    def take(report: NodeReport) -> None:
        fleet.reports[report.node] = report
        if report.error:
            fleet.missing[report.node] = f"failed: {report.error}"
        on_report(report)

    try:
        own = by_node[node]
        partner = hellos[own[1]][2:] if len(own) > 1 else None
        take(_check_leader(world, node, own[:2], expectations, tolerance, timeout, partner))
        while len(fleet.reports) < len(by_node) and time.monotonic() - started < deadline:
            try:
                take(inbox.get(timeout=0.1))
            except queue.Empty:
                pass
        while not inbox.empty():
            take(inbox.get_nowait())
        for name in nodes:
            if name not in fleet.reports:
                fleet.missing[name] = f"did not report within {deadline:g} s (hung, or its ranks died)"
    except (Interrupted, KeyboardInterrupt) as exc:
        while not inbox.empty():
            take(inbox.get_nowait())
        signum = getattr(exc, "signum", 2)
        for name in nodes:
            if name not in fleet.reports:
                fleet.missing[name] = (f"had not reported when the job was ended (signal {signum}: the launcher "
                                       "ends the job when a rank dies)")
    finally:
        stop.set()
    return fleet


def _receive(world, inbox: queue.Queue, stop: threading.Event, expected: int) -> None:
    from mpi4py import MPI

    status = MPI.Status()
    got = 0
    while not stop.is_set() and got < expected:
        if world.Iprobe(source=MPI.ANY_SOURCE, tag=REPORT, status=status):
            inbox.put(world.recv(source=status.Get_source(), tag=REPORT))
            got += 1
        else:
            time.sleep(POLL_S)


def _pair_job(world, pair: list[int], node: str):
    """The node's pair as an MPI job of its own (None for a node of one rank)."""
    from gpuipc_bench.harness.mpi_launch import Job

    if len(pair) < 2:
        return None
    comm = world.Create_group(world.Get_group().Incl(pair), tag=pair[0])
    me = comm.Get_rank()
    return Job(comm, me, 2, [0, 1], [node, node])


def _check_leader(world, node, pair, expectations, tolerance, timeout, partner) -> NodeReport:
    job = _pair_job(world, pair, node)
    try:
        kwargs: dict[str, Any] = {}
        if job is not None:
            kwargs = dict(job=job, runner=lambda sc, cfg, specs, on_row: job.run_scenario(sc, cfg, specs, on_row),
                          peer=tuple(partner) if partner else None, peer_where=f"rank {pair[1]}")
        return check_node(node, expectations, tolerance, timeout=timeout, **kwargs)
    except Exception as exc:  # the node's failure is named at rank 0; the others go on
        return NodeReport(node, {"host": node}, error=f"{type(exc).__name__}: {exc}")
    finally:
        if job is not None:
            job.stop_others()


def _check_as_member(world, rank, node, pair, expectations, tolerance, timeout, partner) -> None:
    if not pair:
        return  # a third rank of a node: the pair does the work
    if rank != pair[0]:
        job = _pair_job(world, pair, node)
        job.serve()  # type: ignore[union-attr]
        return
    report = _check_leader(world, node, pair, expectations, tolerance, timeout, partner)
    plant.before_report(node)
    world.send(report, dest=0, tag=REPORT)
