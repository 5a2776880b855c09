"""nccl: send/recv between two processes through NCCL (cupy.cuda.nccl), one GPU each.

NCCL refuses two ranks on one GPU (before NCCL 2.30, and then only behind a flag), so this
path needs two GPUs: on one it is skipped with that reason. The producer makes the unique id
(ncclGetUniqueId) and hands it over through the tool's handle table; both create the
communicator (nccl_init, a set-up row) and time their first send/recv (nccl_first).

Transports are forced per scenario, each with fresh worker processes (NCCL reads its
environment once per process): `nccl` (NCCL's choice), `nccl-ce` (P2P through the copy
engine, NCCL_P2P_USE_CUDA_MEMCPY=1), `nccl-shm` (shared host memory, NCCL_P2P_DISABLE=1),
`nccl-net` (network loopback, NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1). What NCCL chose is
read from its own INFO output ('... via P2P/CUMEM/read') and kept in the CSV's notes
(`note.<scenario>.transport`). A forced transport is a variant of its own: 'send-recv:shm',
'sendrecv:net', ... ('send-recv' alone is NCCL's choice). NCCL_NVLS_ENABLE=0 always: NVLink
multicast stays off.

  stream    the producer sends slot r of its ring, the consumer receives into slot r, back
            to back; timed by the consumer's events from its first receive (both start after
            a barrier: a late sender makes the figure lower, never higher); every slot verified
  sendrecv  both send and receive at once (nccl-tests' sendrecv): GB/s in each direction
  pingpong  one message there and one back, each received and synchronised before the
            next is sent: one-way = round trip / 2 (the hand-over per message)

Measured on two H200s (results/h200x2-nccl-two-way.csv); tests/test_nccl_path.py's GPU test
needs two GPUs.
"""

from __future__ import annotations

import dataclasses
import glob
import importlib.util
import os
import re
import time
from typing import Iterator

from gpuipc_bench.gpu.memory import Ring, reps_for
from gpuipc_bench.engine.pair import PRODUCER, PairScenario, PairSharedWithFolder, PairWorker
from gpuipc_bench.paths import PathInfo
from gpuipc_bench.engine.sampler import Sample

UID_SLOTS = 2  # ncclUniqueId is 128 bytes
PINGPONG_SIZES = (4, 4096, 1 << 20)
PINGPONG_ROUNDS = 100
UINT8 = 1  # ncclUint8
TRANSPORTS = {
    "nccl": {},
    "nccl-ce": {"NCCL_P2P_USE_CUDA_MEMCPY": "1"},
    "nccl-shm": {"NCCL_P2P_DISABLE": "1"},
    "nccl-net": {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
}
# A forced transport is a variant of its own ('send-recv:shm'); NCCL's own choice has no suffix.
FORCED = {"nccl": "", "nccl-ce": ":p2p-ce", "nccl-shm": ":shm", "nccl-net": ":net"}
ONE_GPU = ("needs 2 GPUs, one per process: NCCL refuses two ranks on one GPU (before NCCL 2.30, and "
           "then only behind a flag)")
_VIA = re.compile(r"\bvia (\S+)")


def nccl_version(nccl) -> str:
    """The NCCL library CuPy loaded, as nccl-tests prints it ('22809' is 2.28.9)."""
    try:
        return str(nccl.get_version())
    except Exception as exc:  # noqa: BLE001 - a fact for the notes, never a failure
        return f"unknown ({type(exc).__name__})"


def chosen_transport(log: str) -> str:
    """The transports NCCL says it set up ('P2P/CUMEM/read', 'SHM/direct/direct', 'NET/Socket/0'),
    from its INFO lines ('Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read'), in order, once each."""
    return ", ".join(dict.fromkeys(_VIA.findall(log))) or "not reported"


def worker_environment(scenario: str, folder: str, rank: int) -> dict[str, str]:
    """What a worker of `scenario` sets before NCCL starts: the forced transport, NVLink
    multicast off, and NCCL's INFO lines into a file of the run's folder."""
    return {**TRANSPORTS[scenario], "NCCL_NVLS_ENABLE": "0", "NCCL_DEBUG": "INFO",
            "NCCL_DEBUG_SUBSYS": "INIT,P2P,SHM,NET", "NCCL_DEBUG_FILE": os.path.join(folder, f"nccl.{rank}.%p.log")}


def uid_to_bytes(uid) -> bytes:
    """CuPy gives the unique id as bytes (recent) or a tuple of signed chars (older)."""
    return bytes(uid) if isinstance(uid, (bytes, bytearray)) else bytes(b & 0xFF for b in uid)


def uid_from_bytes(data: bytes, like_bytes: bool):
    return bytes(data) if like_bytes else tuple(b - 256 if b > 127 else b for b in data)


class NcclShared(PairSharedWithFolder):
    """The pair's gate page, and a folder for NCCL's debug files (NCCL_DEBUG_FILE)."""

    def __init__(self):
        super().__init__(prefix="gpuipc-bench-nccl-")


class NcclWorker(PairWorker):
    path = "nccl"

    def open_gpu(self):
        # NCCL reads its environment when the process first uses it: set it before anything.
        os.environ.update(worker_environment(self.scenario.name, self.ctx.shared.folder, self.ctx.rank))
        return super().open_gpu()

    def setup(self) -> Iterator[dict]:
        from cupy.cuda import nccl

        ctx = self.ctx
        names = [f"uid.{i}" for i in range(UID_SLOTS)]
        for name in names:
            ctx.handle_slot(name)
        ctx.declare("uid.kind")
        if self.producer:
            uid = nccl.get_unique_id()
            data = uid_to_bytes(uid)
            for i, name in enumerate(names):
                ctx.publish(name, data[64 * i:64 * (i + 1)])
            ctx.store("uid.kind", 1 if isinstance(uid, (bytes, bytearray)) else 2)
        ctx.sync()
        if not self.producer:
            data = b"".join(ctx.receive(PRODUCER, name) for name in names)
            uid = uid_from_bytes(data, ctx.load("uid.kind") == 1)
        start = time.perf_counter()
        self.comm = nccl.NcclCommunicator(2, uid, ctx.rank)
        rows = [self.setup_row("nccl_init", time.perf_counter() - start, 0, 0, self.pdev, self.cdev)]
        capacity = self.ring_bytes()
        self.ring, self.back = self.gpu.alloc(capacity), self.gpu.alloc(capacity)
        ctx.sync()
        start = time.perf_counter()
        self.exchange(1, self.ring.ptr, self.ring.ptr)  # the first send sets up the connection
        self.gpu.synchronize()
        rows.append(self.setup_row("nccl_first", time.perf_counter() - start, 0, 1, self.pdev, self.cdev))
        ctx.sync()
        logs = ""
        for name in glob.glob(os.path.join(ctx.shared.folder, "*.log")):
            with open(name, errors="replace") as log:
                logs += log.read()
        transport = chosen_transport(logs)
        ctx.row_fields["transport"] = transport  # every figure from here on says what NCCL used
        if self.producer:
            ctx.note("transport", transport)
            ctx.note("version", nccl_version(nccl))  # to compare with another tool's NCCL (nccl-tests' header)
        yield from rows

    def exchange(self, nbytes: int, src: int, dst: int) -> None:
        """One message from the producer to the consumer, queued on this worker's stream."""
        if self.producer:
            self.comm.send(src, nbytes, UINT8, 1, self.gpu.stream.ptr)
        else:
            self.comm.recv(dst, nbytes, UINT8, 0, self.gpu.stream.ptr)

    # ------------------------------------------------------------------ measuring

    def variant(self, base: str) -> str:
        return base + FORCED[self.scenario.name]

    def measure(self, nbytes: int) -> Iterator[dict]:
        reps = reps_for(nbytes)
        for measure in ("stream", "sendrecv"):
            group = self.group(self.variant("send-recv" if measure == "stream" else "sendrecv"), "stream", nbytes,
                               self.pdev, self.cdev, f"peer@{self.pdev}>{self.cdev}", reps)
            yield from self.sampler.run(group, lambda trial, m=measure: self.batch(m, nbytes, trial),
                                        timer=not self.producer, reps=reps)
        yield from self.in_turn(lambda: iter(()) if self.producer else self.ceiling_rows(
            f"peer@{self.pdev}>{self.cdev}", nbytes))
        if nbytes in PINGPONG_SIZES:
            group = dict(path=self.path, variant=self.variant("send-recv"), measure="pingpong", metric="latency",
                         src=self.pdev, dst=self.cdev, bytes=nbytes, ceiling="")
            yield from self.sampler.run(group, lambda trial: self.pingpong(nbytes, trial), timer=self.producer,
                                        reps=PINGPONG_ROUNDS, min_reps=5, phase="latency")

    def batch(self, measure: str, nbytes: int, trial) -> Sample | None:
        """`trial.reps` messages, slot r to slot r (and, for sendrecv, the other way at once)."""
        from cupy.cuda import nccl

        gpu, ring = self.gpu, Ring.for_size(nbytes, trial.reps)
        mine = self.ring.ptr
        gpu.fill(mine, ring, trial.seed if self.producer else trial.seed ^ 0x5A5A5A5A)
        gpu.synchronize()
        self.ctx.sync()
        stream, peer = gpu.stream.ptr, self.other
        start, end = self.events()
        start.record(gpu.stream)
        for r in range(trial.reps):
            at = ring.offset(r)
            if measure == "stream":
                self.exchange(nbytes, mine + at, mine + at)
            else:
                nccl.groupStart()
                self.comm.send(mine + at, nbytes, UINT8, peer, stream)
                self.comm.recv(self.back.ptr + at, nbytes, UINT8, peer, stream)
                nccl.groupEnd()
        end.record(gpu.stream)
        end.synchronize()
        self.ctx.sync()
        if not self.producer:
            got = mine if measure == "stream" else self.back.ptr
            gpu.verify(got, ring, trial.seed, self.path, measure, corrupt=self.ctx.corrupt)
            return Sample(end_seconds(start, end) / trial.reps, trial.reps)
        if measure == "sendrecv":
            gpu.verify(self.back.ptr, ring, trial.seed ^ 0x5A5A5A5A, self.path, measure, corrupt=self.ctx.corrupt)
        return None

    def pingpong(self, nbytes: int, trial) -> Sample | None:
        gpu = self.gpu
        stream, peer = gpu.stream.ptr, self.other
        self.ctx.sync()
        start = time.perf_counter()
        for _ in range(trial.reps):
            if self.producer:
                self.comm.send(self.ring.ptr, nbytes, UINT8, peer, stream)
                self.comm.recv(self.back.ptr, nbytes, UINT8, peer, stream)
            else:
                self.comm.recv(self.back.ptr, nbytes, UINT8, peer, stream)
                gpu.synchronize()
                self.comm.send(self.back.ptr, nbytes, UINT8, peer, stream)
            gpu.synchronize()
        seconds = (time.perf_counter() - start) / trial.reps / 2
        self.ctx.sync()
        return Sample(seconds, trial.reps) if self.producer else None

    def events(self):
        import cupy

        return cupy.cuda.Event(), cupy.cuda.Event()

    def teardown(self, clean: bool) -> None:
        comm = getattr(self, "comm", None)
        if comm is not None:
            if clean:
                comm.destroy()
            else:
                comm.abort()  # the peer may be gone: abort returns where destroy could hang
        super().teardown(clean)


def end_seconds(start, end) -> float:
    import cupy

    return cupy.cuda.get_elapsed_time(start, end) / 1e3


class NcclScenario(PairScenario):
    persistent_workers = False  # NCCL reads its NCCL_ variables once per process
    name = "nccl"
    summary = "NCCL send/recv between two processes, one GPU each (transport: NCCL's choice)"
    worker_class = NcclWorker
    gpus_needed = 2
    paths = (PathInfo("nccl", colour="#7f7f7f", setup=("nccl_init", "nccl_first")),)

    def workers(self, config, machine):
        if not config.devices:
            config = dataclasses.replace(config, devices=(0, 1))
        return super().workers(config, machine)

    def waive_reason(self, machine):
        if machine.gpu_count == 1:
            return ONE_GPU
        reason = super().waive_reason(machine)
        if reason is None and importlib.util.find_spec("cupy_backends.cuda.libs.nccl") is None:
            return "needs CuPy's NCCL bindings (cupy_backends.cuda.libs.nccl)"
        return reason

    def prepare(self, config, specs):
        if specs[0].device == specs[1].device:
            from gpuipc_bench.errors import UsageError

            raise UsageError(f"--devices: {ONE_GPU}")
        return NcclShared()


def _transport(name: str, summary: str) -> NcclScenario:
    scenario = NcclScenario()
    scenario.name, scenario.summary, scenario.in_default_run = name, summary, False  # by name: -s nccl-shm
    return scenario


TRANSPORT_SCENARIOS = (
    _transport("nccl-ce", "NCCL send/recv, P2P through the copy engine (NCCL_P2P_USE_CUDA_MEMCPY=1)"),
    _transport("nccl-shm", "NCCL send/recv through shared host memory (NCCL_P2P_DISABLE=1)"),
    _transport("nccl-net", "NCCL send/recv over network loopback (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1)"),
)
