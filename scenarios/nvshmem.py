"""nvshmem: host-initiated put and get on NVSHMEM symmetric memory, two PEs, through nvshmem4py.

Two processes (PE 0, the producer, and PE 1, the consumer; both on one GPU unless --devices
names two) initialise NVSHMEM by unique id: the producer makes it (get_unique_id) and hands
its bytes over through the tool's own handle table; both then call init() with it (UID
bootstrap over loopback; NVSHMEM_DISABLE_NVLS=1 always). Each allocates one symmetric ring
(nvshmem_malloc, a collective) and a symmetric scratch buffer.

  put  (stream)  the producer fills its ring and queues putmem_on_stream of slot r into
                 slot r at PE 1, back to back, then quiet_on_stream; timed by the producer's
                 events; the consumer verifies every slot
  get  (stream)  the consumer queues getmem_on_stream of slot r from PE 0's ring into its
                 own; timed and verified by the consumer

Both against the device-local copy (d2d@GPU, measured by the consumer alone). Set-up rows:
nvshmem_init (the collective init, once) and nvshmem_malloc of the ring.

Where a small put's time goes ('nvshmem-call' rows, at 4 B and 4 KiB, the producer alone):
CALLS calls queued back to back on one stream, timed on the host, through nvshmem4py's
Python API (nvshmem.core.put with cuda.core Buffers and Stream), through its C binding
directly (bindings.putmem_on_stream: one call into libnvshmem_host), and a
cudaMemcpyAsync of the same bytes on the same stream. ':host' is the time a call takes to
return (what the host pays to enqueue it), ':done' the time per call once the stream has
finished them all. The first minus the second API is the Python wrapper's share; the second
against cudaMemcpyAsync is the library's.

Device-initiated put (a kernel calling nvshmem_putmem_signal_nbi, linked with NVSHMEM's
device bitcode) is not measured by this version: the tool's own device ping-pong
(`latency`, `sharing` under MPS) is the reference for GPU-initiated signalling.
"""

from __future__ import annotations

import importlib.util
import os
import time
from typing import Iterator

import numpy as np

from gpuipc_bench.gpu.memory import Ring, reps_for
from gpuipc_bench.gpu.timing import time_setup
from gpuipc_bench.pair import PRODUCER, PairScenario, PairWorker
from gpuipc_bench.paths import PathInfo
from gpuipc_bench.sampler import Sample

INSTALL_HINT = "pip install -e '.[nvshmem12]' (or '.[nvshmem13]')"
NVSHMEM_ENV = {"NVSHMEM_DISABLE_NVLS": "1"}  # NVLink multicast stays off, always
UID_SLOTS = 4  # 64-byte handle slots for the unique id (128 bytes in NVSHMEM 3)
CALL_SIZES = (4, 4096)
CALLS = 200
VARIANTS = ("put", "get")


def missing_reason() -> str | None:
    """Why nvshmem4py cannot be used here (without importing it), or None."""
    if importlib.util.find_spec("nvshmem") is None:
        return f"needs nvshmem4py: {INSTALL_HINT}"
    return None


class NvshmemWorker(PairWorker):
    path = "nvshmem"

    def setup(self) -> Iterator[dict]:
        ctx = self.ctx
        os.environ.update(NVSHMEM_ENV)
        os.environ.setdefault("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo")  # both PEs on this node
        import nvshmem.core as core
        from cuda.core import Device
        from nvshmem import bindings

        self.core, self.bindings, self.initialised = core, bindings, False
        names = [f"uid.{i}" for i in range(UID_SLOTS)]
        for name in names:
            ctx.handle_slot(name)
        uid = core.get_unique_id(empty=not self.producer)
        raw = uid._data.view(np.uint8)
        if raw.nbytes > 64 * UID_SLOTS:
            raise RuntimeError(f"an NVSHMEM unique id of {raw.nbytes} bytes does not fit {UID_SLOTS} handle slots")
        if self.producer:
            data = raw.tobytes()
            for i, name in enumerate(names):
                ctx.publish(name, data[64 * i:64 * (i + 1)])
        ctx.sync()
        if not self.producer:
            data = b"".join(ctx.receive(PRODUCER, name) for name in names)[:raw.nbytes]
            raw[:] = np.frombuffer(data, dtype=np.uint8)
        device = Device(self.device)
        device.set_current()
        start = time.perf_counter()
        core.init(device=device, uid=uid, rank=ctx.rank, nranks=2, initializer_method="uid")
        seconds = time.perf_counter() - start
        self.initialised = True
        rows = [self.setup_row("nvshmem_init", seconds, 0, 0, self.pdev, self.cdev)]
        capacity = self.ring_bytes()
        self.sym, seconds = time_setup(lambda: bindings.malloc(capacity), self.device)
        rows.append(self.setup_row("nvshmem_malloc", seconds, 0, capacity, self.pdev, self.cdev))
        self.scratch = bindings.malloc(max(self.sizes) + 256)
        self.cstream = device.create_stream()
        ctx.sync()
        yield from rows

    # ------------------------------------------------------------------ measuring

    def measure(self, nbytes: int) -> Iterator[dict]:
        for variant in VARIANTS:
            reps = reps_for(nbytes)
            timer = self.producer if variant == "put" else not self.producer
            group = self.group(variant, "stream", nbytes, self.pdev, self.cdev, f"d2d@{self.cdev}", reps)
            yield from self.sampler.run(group, lambda trial, v=variant: self.one_sided(v, nbytes, trial),
                                        timer=timer, reps=reps)
        yield from self.in_turn(lambda: iter(()) if self.producer else self.ceiling_rows(f"d2d@{self.cdev}", nbytes))
        if nbytes in CALL_SIZES:
            yield from self.call_costs(nbytes)

    def one_sided(self, variant: str, nbytes: int, trial) -> Sample | None:
        """A batch of puts (by the producer) or gets (by the consumer), slot r to slot r."""
        gpu, b, ring = self.gpu, self.bindings, Ring.for_size(nbytes, trial.reps)
        sym, stream, peer = self.sym, gpu.stream.ptr, self.other
        if self.producer:
            gpu.fill(sym, ring, trial.seed)
            gpu.synchronize()
        self.ctx.sync()  # the source is filled
        sample = None
        if (variant == "put") == self.producer:
            call = b.putmem_on_stream if variant == "put" else b.getmem_on_stream
            # warm-up: a put into the peer's scratch, or a get from the peer's ring into ours
            warm = lambda: call(self.scratch, sym, nbytes, peer, stream)  # noqa: E731
            marks = gpu.time_batch(lambda r: call(sym + ring.offset(r), sym + ring.offset(r), nbytes, peer, stream),
                                   trial.reps, warm=warm)
            b.quiet_on_stream(stream)
            gpu.synchronize()
            sample = Sample(marks.seconds() / trial.reps, trial.reps)
        self.ctx.sync()  # the bytes have landed
        if not self.producer:
            gpu.verify(sym, ring, trial.seed, self.path, variant, corrupt=self.ctx.corrupt)
        return sample

    def call_costs(self, nbytes: int) -> Iterator[dict]:
        """Host time per small put through the Python API, the C binding and cudaMemcpyAsync."""
        core = self.core
        src, dst = core.buffer(nbytes), core.buffer(nbytes)  # collectives: both PEs
        self.ctx.sync()
        try:
            yield from self.in_turn(lambda: self.call_rows(nbytes, src, dst) if self.producer else iter(()))
        finally:
            core.free(dst)
            core.free(src)

    def call_rows(self, nbytes: int, src, dst) -> Iterator[dict]:
        from cupy.cuda import runtime

        stream = self.cstream
        handle = int(stream.__cuda_stream__()[1])
        calls = {
            "core.put": lambda: self.core.put(dst, src, remote_pe=self.other, stream=stream),
            "putmem_on_stream": lambda: self.bindings.putmem_on_stream(int(dst.handle), int(src.handle), nbytes,
                                                                       self.other, handle),
            "cudaMemcpyAsync": lambda: runtime.memcpyAsync(int(self.scratch), int(src.handle), nbytes, 3, handle),
        }
        for name, call in calls.items():
            for kind in ("host", "done"):
                def take(trial, call=call, kind=kind) -> Sample:
                    stream.sync()
                    start = time.perf_counter()
                    for _ in range(trial.reps):
                        call()
                    if kind == "done":
                        stream.sync()
                    seconds = (time.perf_counter() - start) / trial.reps
                    stream.sync()
                    return Sample(seconds, trial.reps, None)

                group = dict(path="nvshmem-call", variant=f"{name}:{kind}", measure="", metric="latency",
                             src=self.pdev, dst=self.cdev, bytes=nbytes, ceiling="")
                yield from self.sampler.run(group, take, timer=True, solo=True, reps=CALLS, calibrate=False,
                                            phase="latency")

    # ------------------------------------------------------------------ teardown

    def teardown(self, clean: bool) -> None:
        """Symmetric memory is freed and NVSHMEM finalised collectively, so only on a clean exit
        (after a failure the other PE may be gone: the process's exit releases it all)."""
        if clean and getattr(self, "initialised", False):
            self.bindings.free(self.scratch)
            self.bindings.free(self.sym)
            self.core.finalize()
            self.initialised = False
        super().teardown(clean)


class NvshmemScenario(PairScenario):
    name = "nvshmem"
    summary = "NVSHMEM (nvshmem4py): host-initiated put/get on symmetric memory, two PEs; small-put cost"
    worker_class = NvshmemWorker
    mpi_waiver = ""
    paths = (PathInfo("nvshmem", colour="#e377c2", setup=("nvshmem_init",)),
             PathInfo("nvshmem-call", role="reference", colour="#f7b6d2"))

    def waive_reason(self, machine):
        return super().waive_reason(machine) or missing_reason()
