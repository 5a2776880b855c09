"""nixl: NIXL, the transfer library of vLLM's NixlConnector, Dynamo and TensorRT-LLM, over its
UCX backend, between two processes, with the transport UCX really chose.

Each worker is a NIXL agent; WRITE is driven by the producer, READ by the consumer; every row
carries the transport from UCX's protocol report. The method in full: docs/methods/nixl.md.
"""

from __future__ import annotations

import glob
import os
import time
from typing import Any, Iterator

import numpy as np

from gpuipc_bench.scenarios import ucx_report
from gpuipc_bench.errors import BarrierAborted, BenchError
from gpuipc_bench.gpu.memory import Ring, reps_for
from gpuipc_bench.engine.pair import CONSUMER, PRODUCER, PairScenario, PairWorker
from gpuipc_bench.paths import PathInfo
from gpuipc_bench.patterns import pattern_bytes
from gpuipc_bench.engine.sampler import Sample
from gpuipc_bench.engine.scenario import WorkerSpec
from gpuipc_bench.scenarios.nixl_support import (  # noqa: F401 - MODULES, INSTALL: the path's facts, for its users
    BLOCKS, BLOCKS_FROM, BOX_BYTES, FORCED, HOST_BATCH_BYTES, INSTALL, MIN_BLOCK, MODULES, GpuBuffer, HostBuffer,
    NixlShared, api, flush_c_streams, missing, nixl_error, stderr_kept, user_ucx_settings,
)

class NixlWorker(PairWorker):
    path = "nixl"
    # Across two GPUs the harness turns peer access on both ways before set-up: the peer@A>B
    # ceiling (measured by this worker's own copy) needs it, as for every pair path.
    peer_access_at = "run"

    def __init__(self, ctx, scenario):
        super().__init__(ctx, scenario)
        self.host = scenario.gpus_needed == 0
        env, self.suffix = FORCED[scenario.name]
        self.forced = env
        self.kinds = [("DRAM", "DRAM")] if self.host else [("VRAM", "VRAM"), ("DRAM", "VRAM")]
        self.ops: tuple[str, ...] = ("write", "read")
        self.measures: tuple[str, ...] = ("stream", "handoff")
        self.blocks_study = True
        if scenario.read_stream_only:  # what check measures: one figure, not the study
            self.kinds, self.ops, self.measures, self.blocks_study = self.kinds[:1], ("read",), ("stream",), False
        self.handles: list = []
        self.counters = {"ack": 0, "ready": 0}  # the mailbox's, as both workers have counted them

    # ------------------------------------------------------------------ the pair

    def open_gpu(self):
        # UCX reads its environment when the agent starts: set it before anything (the user's
        # own UCX_ variables, which decide UCX's choice, noted first).
        self.user_settings = user_ucx_settings(os.environ)
        # put back at teardown: an MPI rank runs the next scenario in this same process
        self.saved_env = {k: os.environ.get(k) for k in (*self.forced, "NIXL_LOG_LEVEL", "UCX_PROTO_INFO",
                                                          "UCX_LOG_FILE")}
        os.environ.update(self.forced)
        os.environ.setdefault("NIXL_LOG_LEVEL", "WARN")  # its INFO lines on stdout would bury the run's output
        os.environ.update(UCX_PROTO_INFO="y", UCX_LOG_FILE=os.path.join(self.ctx.shared.folder,
                                                                         f"ucx.{self.ctx.rank}.%p.log"))
        return None if self.host else super().open_gpu()

    def batch(self, nbytes: int) -> int:
        return reps_for(nbytes, HOST_BATCH_BYTES) if self.host else reps_for(nbytes)

    def ring_bytes(self) -> int:
        return max(Ring.for_size(n, self.batch(n)).bytes for n in self.sizes)

    def group(self, variant, measure, nbytes, src, dst, ceiling="", reps=None, metric="bandwidth", path=None):
        if self.host:
            return dict(path=path or self.path, variant=variant, measure=measure, metric=metric, src=src, dst=dst,
                        bytes=nbytes, ceiling=ceiling)
        return super().group(variant, measure, nbytes, src, dst, ceiling, reps, metric, path)

    def ends(self, kind: tuple[str, str]) -> tuple[Any, Any]:
        return ("host" if kind[0] == "DRAM" else self.pdev), ("host" if kind[1] == "DRAM" else self.cdev)

    def ceiling_key(self, kind: tuple[str, str]) -> str:
        if kind == ("DRAM", "DRAM"):
            return "memcpy@host"
        if kind[0] == "DRAM":
            return f"h2d@{self.cdev}"
        return f"d2d@{self.pdev}" if self.same_gpu else f"peer@{self.pdev}>{self.cdev}"

    def variant(self, op: str, kind: tuple[str, str], blocks: int = 1) -> str:
        name = op + ("-from-dram" if kind == ("DRAM", "VRAM") else "")
        return name + (f"-{blocks}blocks" if blocks > 1 else "") + self.suffix

    # ------------------------------------------------------------------ set-up

    def setup(self) -> Iterator[dict]:
        ctx, nixl = self.ctx, api()
        src, dst = self.ends(self.kinds[0])
        if self.producer:
            ctx.note("ucx_settings", self.user_settings)
        ctx.declare("ready", "ack")
        start = time.perf_counter()
        said: list[str] = []  # what NIXL logged meanwhile: its own reason when the backend refuses to start
        try:
            with stderr_kept(said):
                self.agent = nixl.nixl_agent(f"gpuipc-{os.getpid()}-{ctx.rank}",
                                             nixl.nixl_agent_config(backends=["UCX"]))
            if "UCX" not in self.agent.backends:
                raise BenchError("NIXL has no UCX plugin")
        except Exception as exc:
            raise self.failed("could not start its UCX backend", exc, nixl_error("".join(said))) from None
        rows = [self.setup_row("nixl_agent", time.perf_counter() - start, 0, 0, src, dst)]
        capacity = self.ring_bytes()
        self.buffers, self.registered = {}, []
        for kind in dict.fromkeys(k[0 if self.producer else 1] for k in self.kinds):
            self.buffers[kind] = HostBuffer(capacity) if kind == "DRAM" else GpuBuffer(self.gpu, capacity)
            start = time.perf_counter()
            buffer = self.buffers[kind]
            self.registered.append(self.agent.register_memory([(buffer.ptr, capacity, buffer.device, "")], kind))
            rows.append(self.setup_row("nixl_register", time.perf_counter() - start, 0, capacity, src, dst))
        ctx.shared.put(ctx.rank, {"agent": self.agent.get_agent_metadata(),
                                  "descs": {k: (b.ptr, b.device) for k, b in self.buffers.items()}})
        ctx.sync()
        theirs = ctx.shared.get(self.other)
        start = time.perf_counter()
        self.peer = self.agent.add_remote_agent(theirs["agent"])
        self.peer_name = self.peer.decode() if isinstance(self.peer, bytes) else str(self.peer)  # notifications' key
        rows.append(self.setup_row("nixl_load", time.perf_counter() - start, 0, 0, src, dst))
        self.remote = theirs["descs"]
        ctx.sync()
        for op in self.ops:  # the first transfer of each operation (UCX picks its protocols then)
            for kind in self.kinds:
                ring = Ring.for_size(4096, 1)
                start = time.perf_counter()
                self.transfers(op, kind, ring, 1, handoff=True, seed=1)
                if op == self.ops[0] and kind == self.kinds[0]:
                    rows.append(self.setup_row("nixl_first", time.perf_counter() - start, 0, 4096, src, dst))
        flush_c_streams()
        ctx.sync()
        self.log = self.initiator_logs()
        keep = os.environ.get("GPUIPC_BENCH_UCX_LOGS")  # a folder to keep UCX's own report in (diagnosis)
        if keep and self.producer:
            os.makedirs(keep, exist_ok=True)
            for op, text in self.log.items():
                with open(os.path.join(keep, f"{self.scenario.name}-{op}-{os.getpid()}.log"), "w") as out:
                    out.write(text)
        yield from rows

    def failed(self, what: str, exc: BaseException, nixl_said: str = "") -> BenchError:
        """One line: what failed, and UCX's own first error where it logged one (the most precise:
        'no active messages transport ...'), else NIXL's (which refuses some settings before UCX
        starts: 'Invalid UCX_TLS=tcp for NIXL UCX backend: ...')."""
        flush_c_streams()
        said = ucx_report.first_error(self.own_log()) or nixl_said
        forced = " ".join(f"{k}={v}" for k, v in self.forced.items())
        return BenchError(f"nixl ({self.scenario.name}{', ' + forced if forced else ''}): {what}: "
                          f"{said or type(exc).__name__ + ': ' + str(exc)}")

    def own_log(self) -> str:
        return self.read_logs(self.ctx.rank)

    def read_logs(self, rank: int) -> str:
        text = ""
        for name in sorted(glob.glob(os.path.join(self.ctx.shared.folder, f"ucx.{rank}.*.log"))):
            with open(name, errors="replace") as log:
                text += log.read()
        return text

    def initiator_logs(self) -> dict[str, str]:
        return {"write": self.read_logs(PRODUCER), "read": self.read_logs(CONSUMER)}

    def transport(self, op: str, kind: tuple[str, str], nbytes: int) -> str:
        # UCX's table names the initiator's own memory, then the peer's: 'from cuda/GPU0 to cuda'
        # for a put, 'into host memory from cuda' for a get
        local, remote = (kind[0], kind[1]) if op == "write" else (kind[1], kind[0])
        return ucx_report.chosen(self.log[op], op, nbytes, "host" if local == "DRAM" else "cuda",
                                 "host" if remote == "DRAM" else "cuda")

    # ------------------------------------------------------------------ transfers

    def transfers(self, op: str, kind: tuple[str, str], ring: Ring, count: int, handoff: bool, seed: int,
                  blocks: int = 1) -> float | None:
        """`count` transfers of ring slots 0..count-1 (or one of `blocks` descriptors), verified;
        the initiator's seconds for them all (None in the other worker)."""
        ctx = self.ctx
        mine = self.buffers[kind[0 if self.producer else 1]]
        if self.producer:
            mine.fill(ring, seed, count)
        initiator = self.producer if op == "write" else not self.producer
        ctx.sync()
        seconds = None
        if initiator:
            seconds = self.initiate(op, kind, ring, count, handoff, blocks)
        elif op == "write":
            self.await_notes(count, handoff)
        else:
            self.offer(count, handoff)
        ctx.sync()
        if not self.producer:
            mine.verify(ring, seed, count, self.path, self.variant(op, kind, blocks), ctx.corrupt)
        for handle in self.handles:
            handle.release()
        self.handles = []
        return seconds

    def descs(self, op: str, kind: tuple[str, str], ring: Ring, slot: int, blocks: int):
        """This side's and the peer's descriptor lists for one transfer of `slot` (in `blocks` pieces)."""
        local_kind, remote_kind = (kind[0], kind[1]) if self.producer else (kind[1], kind[0])
        local, device = self.buffers[local_kind].ptr, self.buffers[local_kind].device
        remote, rdevice = self.remote[remote_kind]
        piece = ring.nbytes // blocks
        at = ring.offset(slot)
        ours = [(local + at + b * piece, piece, device) for b in range(blocks)]
        peers = [(remote + at + b * piece, piece, rdevice) for b in range(blocks)]
        return self.agent.get_xfer_descs(ours, local_kind), self.agent.get_xfer_descs(peers, remote_kind)

    def initiate(self, op: str, kind, ring: Ring, count: int, handoff: bool, blocks: int) -> float:
        lists = [self.descs(op, kind, ring, r, blocks) for r in range(count)]  # made untimed
        op_name = "WRITE" if op == "write" else "READ"
        acks, ready = self.counters["ack"], self.counters["ready"]
        start = time.perf_counter()
        for r, (ours, peers) in enumerate(lists):
            if op == "read" and handoff:
                self.await_slot("ready", ready + r + 1)
            note = str(r + 1).encode() if op == "write" else b""
            handle = self.agent.initialize_xfer(op_name, ours, peers, self.peer, note)
            self.handles.append(handle)
            if self.agent.transfer(handle) == "ERR":
                raise self.failed(f"{op} of {ring.nbytes} bytes was refused", RuntimeError("transfer: ERR"))
            if handoff:
                self.wait_done(handle, op, ring.nbytes)
                if op == "write":  # the consumer saw the notification
                    self.await_slot("ack", acks + r + 1)
                else:  # the slot is ours: the producer may go on
                    self.ctx.store("ack", acks + r + 1)
        for handle in self.handles:
            self.wait_done(handle, op, ring.nbytes)
        if op == "write" and not handoff:
            self.await_slot("ack", acks + count)
        seconds = time.perf_counter() - start
        self.advance(op, count, handoff)
        return seconds

    def advance(self, op: str, count: int, handoff: bool) -> None:
        """The mailbox counters after `count` transfers, in step in both workers."""
        if op == "write" or handoff:
            self.counters["ack"] += count
        if op == "read" and handoff:
            self.counters["ready"] += count

    def await_slot(self, name: str, target: int) -> None:
        """Wait for the other worker's word in the mailbox, calling into NIXL meanwhile: UCX moves
        a notification, or a connection's set-up, only when a thread of each side calls into it
        (the progress thread may not get a CPU for milliseconds)."""
        words, index = self.ctx.segment.words, self.ctx.segment.mailbox_index(self.ctx.slot(name))
        deadline, n = time.monotonic() + self.config.timeout, 0
        while words[index] < target:
            self.agent.get_new_notifs()
            n += 1
            if n & 1023 == 0:
                if self.ctx.segment.aborted:
                    raise BarrierAborted("run aborted")
                if time.monotonic() > deadline:
                    self.ctx.wait(name, target, who=[self.other])

    def wait_done(self, handle, op: str, nbytes: int) -> None:
        n = 0
        while True:
            state = self.agent.check_xfer_state(handle)
            if state == "DONE":
                return
            if state == "ERR":
                raise self.failed(f"{op} of {nbytes} bytes failed", RuntimeError("transfer state ERR"))
            n += 1
            if n & 4095 == 0 and self.ctx.segment.aborted:
                raise BarrierAborted("run aborted")

    def await_notes(self, count: int, handoff: bool) -> None:
        """The WRITE target: each notification is a transfer landed; acknowledge it (in a hand-off,
        each before the next is sent; in a stream, the last)."""
        acks, seen, n = self.counters["ack"], 0, 0
        while seen < count:
            for _ in self.agent.get_new_notifs().get(self.peer_name, []):
                seen += 1
                if handoff:
                    self.ctx.store("ack", acks + seen)
            n += 1
            if n & 1023 == 0 and self.ctx.segment.aborted:
                raise BarrierAborted("run aborted")
        if not handoff:
            self.ctx.store("ack", acks + count)
        self.advance("write", count, handoff)

    def offer(self, count: int, handoff: bool) -> None:
        """The READ source: in a hand-off, say each slot is ready and wait until the consumer has it."""
        if handoff:
            acks, ready = self.counters["ack"], self.counters["ready"]
            for r in range(count):
                self.ctx.store("ready", ready + r + 1)
                self.await_slot("ack", acks + r + 1)
        self.advance("read", count, handoff)

    # ------------------------------------------------------------------ measuring

    def measure(self, nbytes: int) -> Iterator[dict]:
        reps = self.batch(nbytes)
        for kind in self.kinds:
            src, dst = self.ends(kind)
            yield from self.register_row(kind, nbytes, src, dst)
            for op in self.ops:
                self.ctx.row_fields["transport"] = self.transport(op, kind, nbytes)
                for measure in self.measures:
                    group = self.group(self.variant(op, kind), measure, nbytes, src, dst, self.ceiling_key(kind),
                                       reps)
                    yield from self.sampler.run(group, lambda trial, o=op, k=kind, h=measure == "handoff":
                                                self.sample(o, k, nbytes, trial, h),
                                                timer=self.initiator(op), reps=reps)
            if self.blocks_study and nbytes >= BLOCKS_FROM:
                self.ctx.row_fields["transport"] = self.transport("write", kind, nbytes // BLOCKS[0])
                for blocks in (b for b in BLOCKS if nbytes // b >= MIN_BLOCK):
                    group = self.group(self.variant("write", kind, blocks), "stream", nbytes, src, dst,
                                       self.ceiling_key(kind), 1)
                    yield from self.sampler.run(group, lambda trial, k=kind, b=blocks:
                                                self.sample("write", k, nbytes, trial, False, b),
                                                timer=self.producer, reps=1, calibrate=False)
            self.ctx.row_fields.pop("transport", None)
            yield from self.in_turn(lambda k=kind: self.my_ceiling(k, nbytes))

    def initiator(self, op: str) -> bool:
        return self.producer if op == "write" else not self.producer

    def sample(self, op: str, kind, nbytes: int, trial, handoff: bool, blocks: int = 1) -> Sample | None:
        ring = Ring.for_size(nbytes, trial.reps)
        seconds = self.transfers(op, kind, ring, trial.reps, handoff, trial.seed, blocks)
        return Sample(seconds / trial.reps, trial.reps) if seconds is not None else None

    def register_row(self, kind, nbytes: int, src, dst) -> Iterator[dict]:
        """Registering a buffer of this size with NIXL (and UCX), timed once, by the consumer."""
        if self.producer:
            return
        buffer = HostBuffer(nbytes) if kind[1] == "DRAM" else GpuBuffer(self.gpu, nbytes)
        start = time.perf_counter()
        handle = self.agent.register_memory([(buffer.ptr, nbytes, buffer.device, "")], kind[1])
        seconds = time.perf_counter() - start
        self.agent.deregister_memory(handle)
        if isinstance(buffer, GpuBuffer):
            self.gpu.release(buffer.memory)
        yield self.setup_row("nixl_register", seconds, 0, nbytes, src, dst)

    def my_ceiling(self, kind, nbytes: int) -> Iterator[dict]:
        key = self.ceiling_key(kind)
        if self.host:
            if self.producer:
                yield from self.host_ceiling(nbytes)
            return
        mine = (self.producer and not key.startswith("h2d")) or (not self.producer and key.startswith("h2d"))
        if mine:
            yield from self.ceiling_rows(key, nbytes)

    def host_ceiling(self, nbytes: int) -> Iterator[dict]:
        """memcpy@host: one process copying the same size (numpy), as the host path measures it."""
        src = pattern_bytes(nbytes, 7)
        dst = np.empty_like(src)
        reps = self.batch(nbytes)

        def take(trial) -> Sample:
            start = time.perf_counter_ns()
            for _ in range(trial.reps):
                dst[:] = src
            return Sample((time.perf_counter_ns() - start) / 1e9 / trial.reps, trial.reps,
                          bool(np.array_equal(dst, src)))

        group = dict(path="ceiling", variant="memcpy@host", measure="stream", metric="bandwidth", src="host",
                     dst="host", bytes=nbytes, ceiling="")
        yield from self.sampler.run(group, take, timer=True, solo=True, reps=reps, phase="ceiling")

    def teardown(self, clean: bool) -> None:
        agent = getattr(self, "agent", None)
        try:
            if agent is not None and clean:
                for handle in self.handles:
                    handle.release()
                for handle in getattr(self, "registered", []):
                    agent.deregister_memory(handle)
        finally:
            self.handles, self.registered = [], []
            for key, value in getattr(self, "saved_env", {}).items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            super().teardown(clean)


class NixlScenario(PairScenario):
    persistent_workers = False  # UCX reads its UCX_ variables once per process
    name = "nixl"
    summary = "NIXL over UCX between two processes: GPU to GPU and host to GPU, WRITE and READ (UCX's choice)"
    worker_class = NixlWorker
    in_default_run = False  # agent creation alone costs about 1.5 s a worker: -s nixl
    read_stream_only = False
    paths = (PathInfo("nixl", colour="#bcbd22", setup=("nixl_agent", "nixl_load", "nixl_first")),)
    mpi_waiver = ""

    def waive_reason(self, machine):
        return super().waive_reason(machine) or missing()

    def prepare(self, config, specs):
        from gpuipc_bench.gpu.timing import SharedGatePage

        return NixlShared(SharedGatePage())

    def memory_needed(self, config, specs):
        ring = max(Ring.for_size(n).bytes for n in self.sizes(config))
        return 2 * ring + 2 * BOX_BYTES, 3 * ring


class NixlHostScenario(NixlScenario):
    name = "nixl-host"
    summary = "NIXL over UCX between two CPU processes, host memory to host memory (no GPU)"
    gpus_needed = 0
    pairable = False
    sharing_modes = False

    def workers(self, config, machine):
        return [WorkerSpec(PRODUCER, "producer", None), WorkerSpec(CONSUMER, "consumer", None)]

    def prepare(self, config, specs):
        return NixlShared()

    def memory_needed(self, config, specs):
        ring = max(Ring.for_size(n, reps_for(n, HOST_BATCH_BYTES)).bytes for n in self.sizes(config))
        return 5 * ring + 2 * BOX_BYTES, 0


def _forced(base: type[NixlScenario], name: str, summary: str) -> NixlScenario:
    scenario = base()
    scenario.name, scenario.summary = name, summary
    return scenario


class NixlReadScenario(NixlScenario):
    name = "nixl-read"
    summary = "NIXL READ of the other process's GPU memory, streamed (what check measures; -s nixl: every variant)"
    read_stream_only = True


class NixlHostReadScenario(NixlHostScenario):
    name = "nixl-host-read"
    summary = "NIXL READ of the other process's host memory, streamed (what check measures on a node without GPU)"
    read_stream_only = True


FORCED_SCENARIOS = (
    _forced(NixlHostScenario, "nixl-host-tcp", "NIXL host to host, UCX forced to tcp (UCX_TLS=tcp)"),
    _forced(NixlScenario, "nixl-cuda-copy", "NIXL, UCX without cuda_ipc (UCX_TLS=cuda_copy,tcp)"),
    _forced(NixlScenario, "nixl-tcp", "NIXL, UCX forced to tcp (UCX_TLS=tcp)"),
)
