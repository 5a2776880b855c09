"""`check` on every node of an MPI allocation: `mpirun --map-by ppr:2:node gpuipc-bench check`,
`srun -N 16 --ntasks-per-node=2 gpuipc-bench check`.

MPI carries everything point to point on COMM_WORLD, with tags of the check's own and no
collective over the whole job (one stopped or dead rank would hang every other rank in it):

1. every rank says hello to rank 0: its node (the host name), how many ranks the launcher put
   on its node, its PID and network namespaces;
2. rank 0 assigns each node as soon as all its ranks said hello: the node's two lowest ranks
   are its workers, as in a one-node `mpirun -np 2 gpuipc-bench run` (a node of one rank forks
   its workers; further ranks of a node leave); the pair make a communicator of their own
   (MPI_Comm_create_group: collective over the two only) and the lower leads. A node whose
   ranks have not all said hello by half the deadline fails (its present ranks are sent home);
3. each node's leader checks its node (gpuipc_bench.check.node) and sends rank 0 its report:
   the node's facts, rows, path checks and figures, each judged against the expectations
   rank 0 sent it (a failing figure is measured again there); it then waits for rank 0's word:
   measure some figures again (a fleet outlier), or done;
4. rank 0 checks its own node in a thread, and its main thread alone watches the deadline: it
   takes each report as it arrives (the caller appends its rows to the CSV), and when every
   node has reported, or the deadline passed, names the nodes that did not (hung, or a rank
   died or stopped), has the fleet's outliers measured again, and returns. If a node is
   missing, the caller ends the ranks that still hang with MPI_Abort.

A node still measuring again at the deadline keeps its first figures, and the caller ends its
ranks with MPI_Abort too. A rank other than 0 that is still in the check at the deadline plus
MEMBER_GRACE_S (rank 0 unreachable, or its partner stopped) says so and exits 1.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import sys
import threading
import time
from typing import Any, Callable

from gpuipc_bench.check import judge, paths

from gpuipc_bench.hooks import plant
from gpuipc_bench.check.expect import Expectations, parse
from gpuipc_bench.check.node import NodeReport, check_node, measure_again
from gpuipc_bench.errors import Interrupted
from gpuipc_bench.harness.mpi_launch import idle_recv

HELLO, ASSIGN, REPORT, WORD = 31, 32, 33, 34
POLL_S = 0.01
STOP_WAIT_S = 10.0  # rank 0's own leader telling its partner to stop, at the end
MEMBER_GRACE_S = 30.0  # past rank 0's deadline: rank 0 names, writes and ends the job before
REFUSE_WAIT_S = 10.0  # rank 0 refused its input: how long its word to the other ranks may take


@dataclasses.dataclass
class Fleet:
    """What rank 0 ends with."""

    reports: dict[str, NodeReport]
    missing: dict[str, str]  # node -> why it is not in the table
    nodes: list[str]
    events: list[judge.Event] = dataclasses.field(default_factory=list)
    remeasured: dict[str, NodeReport] = dataclasses.field(default_factory=dict)  # node -> its second report
    interrupted: int | None = None  # the signal that ended rank 0's wait
    unfinished: list[str] = dataclasses.field(default_factory=list)  # nodes still measuring again at the deadline


@dataclasses.dataclass
class Hello:
    rank: int
    node: str
    ranks_on_node: int  # as the launcher says; 0: unknown
    pid_ns: str
    net_ns: str

    def namespaces(self) -> tuple[str, str]:
        return self.pid_ns, self.net_ns


def run(expectations: Expectations, tolerance: float | None, deadline: float, timeout: float,
        on_start: Callable[[list[str], dict[str, str]], None],
        on_report: Callable[[NodeReport], None],
        again: Callable[[dict[str, list[NodeReport]]], dict[str, list[str]]] | None = None,
        on_own_report: Callable[[NodeReport], None] | None = None) -> Fleet | None:
    """Every rank calls this; rank 0 returns the Fleet, the others None once their part is done.
    `on_start(nodes, facts)` and `on_report(report)` run on rank 0 (the CSV's header and rows);
    `again(reports)` says which figures of which nodes to measure again (the fleet's outliers);
    `on_own_report(report)` runs on each node's leader with its own report (its own files)."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD  # no Dup (a collective over the whole job): the tags above are the check's own
    rank = world.Get_rank()
    plant.at_start(rank)
    node = plant.node_name(rank)
    mine = Hello(rank, node, plant.ranks_on_node(rank), *paths.namespaces())
    if rank != 0:
        watchdog = threading.Timer(deadline + MEMBER_GRACE_S, _give_up, args=(mine, deadline + MEMBER_GRACE_S))
        watchdog.daemon = True
        watchdog.start()
        try:
            world.send(mine, dest=0, tag=HELLO)
            assignment = idle_recv(world, 0, ASSIGN, POLL_S)
            if assignment is not None:
                pair, expected, partner = assignment
                _check_as_member(world, rank, node, pair, parse(expected), tolerance, timeout, partner,
                                 on_own_report)
        finally:
            watchdog.cancel()
        return None
    return _rank0(world, mine, expectations, tolerance, deadline, timeout, on_start, on_report, again,
                  on_own_report)


def refuse(wait_s: float = REFUSE_WAIT_S) -> None:
    """Rank 0 refused its input (one `Error:` line): every other rank is told to go home (the word
    a rank left out of the check gets), so that none waits out the deadline; the sends are given
    `wait_s` to be taken (a rank not started by then still ends at its own deadline)."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    sending = [world.isend(None, dest=r, tag=ASSIGN) for r in range(1, world.Get_size())]
    until = time.monotonic() + wait_s
    while not MPI.Request.Testall(sending) and time.monotonic() < until:
        time.sleep(POLL_S)


def _give_up(mine: Hello, seconds: float) -> None:
    # rank 0 unreachable, or this node's partner stopped
    print(f"Error: rank {mine.rank} (node {mine.node}) still in the check after {seconds:g} s; leaving"[:80],
          file=sys.stderr, flush=True)
    os._exit(1)


class _Rank0:
    """Rank 0's bookkeeping: hellos, assignments, reports; sends never wait (a stopped rank)."""

    def __init__(self, world, mine: Hello, expectations: Expectations, size: int):
        self.world, self.expectations, self.size = world, expectations, size
        self.hellos: dict[int, Hello] = {0: mine}
        self.by_node: dict[str, list[int]] = {mine.node: [0]}
        self.assigned: dict[str, list[int]] = {}  # node -> its pair
        self.sending: list[Any] = []  # the requests of isend, kept alive until the end

    def send(self, message, dest: int, tag: int) -> None:
        self.sending.append(self.world.isend(message, dest=dest, tag=tag))

    def take_hellos(self) -> None:
        from mpi4py import MPI

        status = MPI.Status()
        while self.world.Iprobe(source=MPI.ANY_SOURCE, tag=HELLO, status=status):
            hello = self.world.recv(source=status.Get_source(), tag=HELLO)
            self.hellos[hello.rank] = hello
            self.by_node.setdefault(hello.node, []).append(hello.rank)

    def complete(self, node: str) -> bool:
        """All the node's ranks said hello (as many as the launcher put there; unknown: all of the job's)."""
        want = max(self.hellos[r].ranks_on_node for r in self.by_node[node])
        return len(self.by_node[node]) >= want if want else len(self.hellos) == self.size

    def assign(self, node: str) -> None:
        """Tell the node's ranks their part; rank 0's own part is returned by own_part()."""
        ranks = sorted(self.by_node[node])
        pair = ranks[:2]
        self.assigned[node] = pair
        expected = self.expectations.to_json()
        for r in ranks:
            if r == 0:
                continue
            if r not in pair:
                self.send(None, r, ASSIGN)
                continue
            other = pair[1] if r == pair[0] and len(pair) > 1 else pair[0]
            self.send((pair, expected, self.hellos[other].namespaces()), r, ASSIGN)

    def send_home(self, node: str) -> None:
        for r in self.by_node[node]:
            if r != 0:
                self.send(None, r, ASSIGN)


def _rank0(world, mine: Hello, expectations, tolerance, deadline, timeout, on_start, on_report, again,
           on_own_report=None) -> Fleet:
    size = world.Get_size()
    started = time.monotonic()
    state = _Rank0(world, mine, expectations, size)
    fleet = Fleet({}, {}, [])
    inbox: queue.Queue = queue.Queue()
    stop = threading.Event()
    receiver = threading.Thread(target=_receive, args=(world, inbox, stop), daemon=True,
                                name="gpuipc-bench check receiver")
    receiver.start()
    hello_window = deadline / 2
    hellos_closed = False
    own_thread: threading.Thread | None = None

    def elapsed() -> float:
        return time.monotonic() - started

    def take(report: NodeReport) -> None:
        fleet.reports[report.node] = report
        if report.error:
            fleet.missing[report.node] = f"failed: {report.error}"
        on_report(report)

    def start_own(pair: list[int]) -> None:
        nonlocal own_thread
        partner = state.hellos[pair[1]].namespaces() if len(pair) > 1 else None
        own_thread = threading.Thread(
            target=_check_leader, args=(world, mine.node, pair, expectations, tolerance, timeout, partner, inbox,
                                        on_own_report),
            daemon=True, name="gpuipc-bench check of rank 0's node")
        own_thread.start()

    def close_hellos() -> None:
        nonlocal hellos_closed
        hellos_closed = True
        silent = [r for r in range(size) if r not in state.hellos]
        for node in list(state.by_node):
            if node in state.assigned:
                continue
            if state.complete(node) or not silent:
                state.assign(node)
                if node == mine.node:
                    start_own(state.assigned[node])
                continue
            have, want = len(state.by_node[node]), max(state.hellos[r].ranks_on_node for r in state.by_node[node])
            fleet.missing[node] = (f"{have} of its {want} ranks said hello within {hello_window:g} s "
                                   f"(silent: rank {','.join(map(str, silent[:8]))}{'...' if len(silent) > 8 else ''}"
                                   "; stopped, or died)")
            state.send_home(node)
        known = {r for ranks in state.by_node.values() for r in ranks}
        if not any(h.ranks_on_node for h in state.hellos.values()):  # no node size known: name the ranks
            for r in silent:
                if r not in known:
                    fleet.missing[f"rank {r}"] = f"rank {r} said nothing within {hello_window:g} s"
        # in the order of their first ranks, not of their hellos' arrival: one job, one header
        ordered = sorted(state.by_node, key=lambda n: min(state.by_node[n]))
        fleet.nodes = ordered + [n for n in fleet.missing if n not in state.by_node]
        on_start(fleet.nodes, {})

    def pending() -> list[str]:
        return [n for n in state.by_node if n not in fleet.reports and n not in fleet.missing]

    try:
        while elapsed() < deadline:
            busy = False
            if not hellos_closed:
                state.take_hellos()
                for node in list(state.by_node):
                    if node not in state.assigned and state.complete(node):
                        state.assign(node)
                        if node == mine.node:
                            start_own(state.assigned[node])
                if len(state.hellos) == size or elapsed() > hello_window:
                    close_hellos()
            try:
                item = inbox.get(timeout=POLL_S)
                if isinstance(item, NodeReport):
                    take(item)
                busy = True
            except queue.Empty:
                pass
            if hellos_closed and not pending() and not busy:
                break
        while not inbox.empty():
            item = inbox.get_nowait()
            if isinstance(item, NodeReport):
                take(item)
        if not hellos_closed:
            close_hellos()
        for name in pending():
            fleet.missing[name] = f"did not report within {deadline:g} s (hung, or a rank died or stopped)"
        if again is not None:
            _measure_outliers(state, fleet, again, inbox, started, deadline)
    except (Interrupted, KeyboardInterrupt) as exc:
        while not inbox.empty():
            item = inbox.get_nowait()
            if isinstance(item, NodeReport):
                take(item)
        signum = getattr(exc, "signum", 2)
        for name in fleet.nodes or list(state.by_node):
            if name not in fleet.reports and name not in fleet.missing:
                fleet.missing[name] = (f"had not reported when the job was ended (signal {signum}: the launcher "
                                       "ends the job when a rank dies)")
        fleet.interrupted = signum
    finally:
        stop.set()
        for node, pair in state.assigned.items():  # the leaders that wait for rank 0's word leave
            if pair[0] != 0 and node not in fleet.missing:
                state.send(("done",), pair[0], WORD)
        if own_thread is not None:
            _own_words.put(("done",))
            if mine.node not in fleet.missing:  # it tells its partner to stop before this process ends
                own_thread.join(STOP_WAIT_S)
    return fleet


_own_words: queue.Queue = queue.Queue()  # rank 0's words to its own node's leader (a thread)


def _measure_outliers(state: _Rank0, fleet: Fleet, again, inbox: queue.Queue, started: float,
                      deadline: float) -> None:
    """The fleet's outliers measured once more on their nodes (before the deadline); their second
    reports go into fleet.remeasured."""
    wanted = again({n: [r] for n, r in fleet.reports.items() if not r.error})
    asked = {}
    for node, figures in wanted.items():
        pair = state.assigned.get(node)
        if not figures or pair is None or node in fleet.missing:
            continue
        asked[node] = figures
        if pair[0] == 0:
            _own_words.put(("again", figures))
        else:
            state.send(("again", figures), pair[0], WORD)
    while set(asked) - set(fleet.remeasured) and time.monotonic() - started < deadline:
        try:
            item = inbox.get(timeout=0.1)
        except queue.Empty:
            continue
        if isinstance(item, NodeReport) and item.node in asked:
            fleet.remeasured[item.node] = item
    fleet.unfinished = sorted(set(asked) - set(fleet.remeasured))  # their first figures count


def _receive(world, inbox: queue.Queue, stop: threading.Event) -> None:
    from mpi4py import MPI

    status = MPI.Status()
    while not stop.is_set():
        if world.Iprobe(source=MPI.ANY_SOURCE, tag=REPORT, status=status):
            inbox.put(world.recv(source=status.Get_source(), tag=REPORT))
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


def _check_leader(world, node, pair, expectations, tolerance, timeout, partner, inbox=None,
                  on_own_report=None) -> None:
    """Check the node and report to rank 0 (rank 0's own node: through its inbox); then measure
    again what rank 0 asks for, until it says done."""
    deliver: Callable[[Any], Any]
    word: Callable[[], Any]
    if inbox is not None:
        deliver, word = inbox.put, _own_words.get
    else:
        deliver = lambda report: world.send(report.packed(), dest=0, tag=REPORT)  # noqa: E731
        word = lambda: idle_recv(world, 0, WORD, POLL_S)  # noqa: E731  (no core spun while others measure)
    job = _pair_job(world, pair, node)
    try:
        try:
            report = check_node(node, expectations, tolerance, timeout=timeout, peer=tuple(partner) if partner
                                else None, peer_where=f"rank {pair[1]}" if job else "a forked child", job=job)
        except Exception as exc:  # the node's failure is named at rank 0; the others go on
            deliver(NodeReport(node, {"host": node}, error=f"{type(exc).__name__}: {exc}"))
            return
        if on_own_report is not None:
            try:
                on_own_report(report)
            except Exception as exc:  # e.g. the node's textfile folder is missing: said in the report
                report.events.append(judge.Event(judge.FAIL, node, "node", "output",
                                                 reason=f"{type(exc).__name__}: {exc}"))
        plant.before_report(node)
        deliver(report)
        while (told := word())[0] == "again":
            try:
                deliver(measure_again(node, told[1], report.facts, job=job, timeout=timeout))
            except Exception as exc:
                deliver(NodeReport(node, report.facts, error=f"{type(exc).__name__}: {exc}"))
    finally:
        if job is not None:
            job.stop_others()


def _check_as_member(world, rank, node, pair, expectations, tolerance, timeout, partner, on_own_report=None) -> None:
    if rank != pair[0]:
        job = _pair_job(world, pair, node)
        job.serve()  # type: ignore[union-attr]
        return
    _check_leader(world, node, pair, expectations, tolerance, timeout, partner, None, on_own_report)
