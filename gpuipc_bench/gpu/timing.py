"""How device work is timed: the gate and the gated batch (the nvbandwidth method).

    stream:  [gate kernel, spinning on a flag in mapped host memory]
             [2 untimed warm-up operations (1 from 16 MiB)] [start] [rep 0] [rep 1] ... [rep n-1] [end]
    host:    enqueue all of the above, then store the flag: the gate exits and the
             reps run back to back; seconds per rep = elapsed(start, end) / reps

so the interpreter's launch overhead (~5-10 us a call) is not in the figure, small
sizes measure the link, and the warm-up operations take the switch from the gate
kernel to the first copy out of the interval. Start and end are CUDA events, or
%globaltimer stamps when the interval spans two processes on one GPU (one clock for
every context of a GPU; the caller then takes the later start and the later end, the
start once both have warmed up: gpuipc_bench.engine.exchange).

The gate gives up after GATE_TIMEOUT_S and sets an error word, so a lost release can
never hang the GPU; time_batch then raises.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable

import numpy as np

from gpuipc_bench.errors import BenchError
from gpuipc_bench.gpu.errors import cuda_call
from gpuipc_bench.gpu.memory import HostRegistration, PinnedHostBuffer, mmap_address, rt
from gpuipc_bench.hooks.profiling import mark

GATE_TIMEOUT_S = 10.0
QUEUE_OPS = 768  # operations one stream may queue behind its gate (the launch queue blocks near 1000)
WARMUP_OPS = 2
LARGE_TRANSFER_BYTES = 16 << 20  # from this size a batch queues one warm-up operation (warmup_ops)
HOST_WARM_BYTES = 1 << 20  # what a warm-up operation moves for a large transfer that crosses PCIe (host_warm_bytes)


def host_warm_bytes(nbytes: int) -> int:
    """The bytes of one warm-up operation (warmup_ops) for a batch of `nbytes` transfers with host
    memory at one end: the transfer's own below LARGE_TRANSFER_BYTES, HOST_WARM_BYTES from there.
    The warm-up takes the gate's switch (a few microseconds) out of the timed interval, which a copy
    of 1 MiB through the same engine and direction does as well as one of 256 MiB (19 us against
    5 ms at 55 GB/s); a copy bound by the bus does not wait on a clock that a longer one would raise.
    A whole transfer made every sample of the host paths at 256 MiB take twice its copy, and two
    processes' warm-ups ran beside each other's timed copies."""
    return nbytes if nbytes < LARGE_TRANSFER_BYTES else min(nbytes, HOST_WARM_BYTES)


def host_scratch_bytes(sizes) -> int:
    """Bytes of host memory where the warm-ups of every size in `sizes` land (host_warm_bytes), and
    256 more (a slot's alignment): 4 MiB for the default sizes, where a scratch of the largest
    size made a 256 MiB host ring's region 512 MiB (each process faults in and registers all of it)."""
    return max((host_warm_bytes(int(n)) for n in sizes), default=1) + 256


def warmup_ops(transfer_bytes: int | None) -> int:
    """The untimed operations a batch queues between the gate and its start mark: WARMUP_OPS; one
    where a transfer moves LARGE_TRANSFER_BYTES or more. One operation takes the gate's switch (a
    few microseconds) out of the interval; at 16 MiB it lasts ~11 us even device-local on an H100
    and ~0.3 ms over PCIe, and a second one only lengthened the run (at 256 MiB over PCIe, by ~5 ms
    a sample: ~1.7 s of a default run)."""
    if transfer_bytes is not None and transfer_bytes >= LARGE_TRANSFER_BYTES:
        return 1
    return WARMUP_OPS


class Gate:
    """A spin kernel that holds a stream until the host releases it. The flag and the error
    word live in pinned, mapped host memory of this process."""

    def __init__(self, kernels, timeout_s: float = GATE_TIMEOUT_S):
        self.kernels, self.device, self.timeout_s = kernels, kernels.device, timeout_s
        self._page = PinnedHostBuffer(64, kernels.device)
        self._words: Any = self._page.numpy(64).view(np.uint32)
        self._words[:] = 0
        self.generation = 0

    @property
    def flag_dptr(self) -> int:
        return self._page.dptr

    @property
    def err_dptr(self) -> int:
        return self._page.dptr + 4

    def _flag_store(self, value: int) -> None:
        self._words[0] = value & 0xFFFFFFFF

    def arm(self, stream) -> None:
        self.generation += 1
        self.kernels.launch_gate(self.flag_dptr, self.generation, self.err_dptr, stream, self.timeout_s)

    def release(self) -> None:
        self._flag_store(self.generation)

    def check(self) -> None:
        """Raise if a gate gave up waiting (its batch would have started early)."""
        if self._words[1]:
            generation = int(self._words[1])
            self._words[1] = 0
            raise BenchError(
                f"the timing gate on GPU {self.device} was not released within {self.timeout_s:g} s "
                f"(generation {generation}); the sample is void")

    def close(self) -> None:
        self._words = None
        self._page.close()


class SharedGatePage:
    """One page of MAP_SHARED host memory, made in the parent (scenario.prepare), inherited
    by forked workers (and reached by others: gpuipc_bench.ipc.shared). Word 0 is the release
    generation of every worker's SharedGate."""

    SIZE = 4096

    def __init__(self):
        from gpuipc_bench.ipc.shared import SharedPages

        self.mm = SharedPages(self.SIZE)  # inherited by forked workers, pickled to spawned ones and MPI ranks

    def close(self) -> None:
        try:
            self.mm.close()
        except BufferError:
            pass


class SharedGate(Gate):
    """A gate whose flag is word 0 of a SharedGatePage, registered in this worker: one host
    store releases the gates of every process. Every worker arms the same number of times
    and crosses a barrier between enqueueing and release(), so every worker stores the same
    generation, and the first store lets all the gates go at once."""

    def __init__(self, kernels, page: SharedGatePage, timeout_s: float = GATE_TIMEOUT_S):
        super().__init__(kernels, timeout_s)
        self._shared_addr, self._keeper = mmap_address(page.mm)
        self._shared: Any = np.frombuffer(page.mm, dtype=np.uint32, count=1)
        self._registration = HostRegistration(self._shared_addr, SharedGatePage.SIZE, kernels.device)
        self.generation = int(self._shared[0])

    @property
    def flag_dptr(self) -> int:
        return self._registration.dptr

    def _flag_store(self, value: int) -> None:
        self._shared[0] = value & 0xFFFFFFFF

    def close(self) -> None:
        try:
            self._registration.close()
        finally:
            self._shared = None
            self._keeper = None
            super().close()


class Marks:
    """Where a batch's interval starts and ends on one stream: CUDA events (`seconds()`), and,
    when `stamps` (device or mapped memory of 16 bytes) is given, globaltimer stamps written there
    as well (`stamped()` reads them: ns at the start and at the end)."""

    def __init__(self, kernels, stream, stamps: int | None = None):
        import cupy

        self.kernels, self.stream, self.stamps, self.device = kernels, stream, stamps, kernels.device
        with cuda_call("cudaEventCreate", self.device):
            self.start, self.end = cupy.cuda.Event(), cupy.cuda.Event()

    def mark_start(self) -> None:
        if self.stamps is not None:
            self.kernels.stamp(self.stamps, self.stream)
        with cuda_call("cudaEventRecord", self.device):
            self.start.record(self.stream)

    def mark_end(self) -> None:
        with cuda_call("cudaEventRecord", self.device):
            self.end.record(self.stream)
        if self.stamps is not None:
            self.kernels.stamp(self.stamps + 8, self.stream)

    def seconds(self) -> float:
        import cupy

        with cuda_call("cudaEventElapsedTime", self.device):
            return cupy.cuda.get_elapsed_time(self.start, self.end) / 1e3

    def stamped(self) -> tuple[int, int]:
        from gpuipc_bench.gpu.memory import read_words

        if self.stamps is None:
            raise ValueError("these marks were made without stamps")
        words = read_words(self.stamps, 2, self.stream, self.device)
        return int(words[0]), int(words[1])


def time_batch(stream, gate: Gate, enqueue: Callable[[int], None], reps: int, *,
               warm: Callable[[], None] | None = None, marks: Marks | None = None,
               before_release: Callable[[], None] | None = None, ops_per_rep: int = 1,
               transfer_bytes: int | None = None) -> Marks:
    """Queue `reps` calls enqueue(r) behind `gate`, after warmup_ops(transfer_bytes) calls of warm()
    (untimed; `transfer_bytes`: the bytes of one of the batch's transfers), between the start and end marks; release
    the gate (after before_release(), e.g. a barrier so that other processes have queued theirs);
    wait for the end. Returns the marks to read.

    The gate is always released (also when enqueue raises), so the stream never stays blocked.
    """
    if not 1 <= reps * ops_per_rep <= QUEUE_OPS:
        raise ValueError(f"{reps} reps of {ops_per_rep} operations would fill the launch queue")
    marks = marks or Marks(gate.kernels, stream)
    released = False
    try:
        gate.arm(stream)
        mark("enqueue")
        if warm is not None:
            for _ in range(warmup_ops(transfer_bytes)):
                warm()
        marks.mark_start()
        for r in range(reps):
            enqueue(r)
        marks.mark_end()
        mark("enqueued")
        if before_release is not None:
            before_release()
        gate.release()
        released = True
        mark("released")
        with cuda_call("cudaStreamSynchronize", gate.device):
            stream.synchronize()
        mark("ran")
    finally:
        if not released:
            gate.release()
            with contextlib.suppress(Exception):
                stream.synchronize()
    gate.check()
    return marks


def time_setup(call: Callable[[], Any], device: int | None = None) -> tuple[Any, float]:
    """(result, seconds) of one synchronised operation: the device is idle before, and the
    clock stops after cudaDeviceSynchronize."""
    with cuda_call("cudaDeviceSynchronize", device):
        rt().deviceSynchronize()
    t0 = time.perf_counter()
    result = call()
    with cuda_call("cudaDeviceSynchronize", device):
        rt().deviceSynchronize()
    return result, time.perf_counter() - t0
