"""nvshmem: host-initiated put and get on NVSHMEM symmetric memory, two PEs, through nvshmem4py.

Also device-initiated put and get (a kernel per message), a device put+signal ping-pong, and where
a small put's time goes ('nvshmem-call'). Each variant is bounded by the copy it issues, measured
by the same process. The method in full: docs/methods/nvshmem.md.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import subprocess
import threading
import time
from ctypes import c_int32, c_uint64
from typing import Iterator

import numpy as np

from gpuipc_bench.gpu import kernel_cache
from gpuipc_bench.errors import BenchError
from gpuipc_bench.gpu.launch import KernelLauncher
from gpuipc_bench.gpu.memory import Ring, memset, reps_for
from gpuipc_bench.gpu.timing import SharedGatePage, time_setup
from gpuipc_bench.gpu.visible import cuda_index
from gpuipc_bench.engine.pair import PRODUCER, PairScenario, PairShared, PairWorker
from gpuipc_bench.paths import PathInfo
from gpuipc_bench.engine.sampler import Sample

INSTALL_HINT = "pip install -e '.[nvshmem12]' (or '.[nvshmem13]')"
NVSHMEM_ENV = {"NVSHMEM_DISABLE_NVLS": "1"}  # NVLink multicast stays off, always
UID_SLOTS = 4  # 64-byte handle slots for the unique id (128 bytes in NVSHMEM 3)
CALL_SIZES = (4, 4096)
CALLS = 200
VARIANTS = ("put", "get")
DEVICE_VARIANTS = ("device-put", "device-get")  # issued from a kernel (put_block / get_block)
DEVICE_THREADS = 512
DEVICE_MAX_BLOCKS = 32
DEVICE_BYTES_PER_BLOCK = 64 << 10
PUTSIG_SIZES = (4, 4096)
PUTSIG_ROUNDS = 200  # before calibration to about 5 ms a sample
PUTSIG_FIRST_ROUNDS = 10  # the first warm-up's: a time-sliced round trip takes ~4 ms (200: a 0.9 s warm-up)
KERNEL = "nvshmem_putsig.cu"
REPLY = 0x5A5A5A5A  # PE 1's payload has the pattern of seed ^ REPLY
CEILING_SEEDS = 0xCE11  # a paired ceiling sample's seed differs from its path sample's


def nvshmem_home() -> str | None:
    """The folder of NVSHMEM's include/ and lib/ (the nvidia-nvshmem wheel), or None."""
    spec = importlib.util.find_spec("nvidia.nvshmem") if importlib.util.find_spec("nvidia") else None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if os.path.isfile(os.path.join(folder, "include", "nvshmem.h")):
            return folder
    home = os.environ.get("NVSHMEM_HOME")
    return home if home and os.path.isfile(os.path.join(home, "include", "nvshmem.h")) else None


_BUILT: dict[str, str] = {}  # this run's cubin (or why not), built once per run (every mode, every pair)


_BUILDING = threading.Lock()  # the background build (prebuild) and the scenario's own ask wait for each other


def putsig_for_run() -> str:
    """The put+signal kernel of this run: from the on-disk cache (gpuipc_bench.gpu.kernel_cache), or
    built by nvcc on first use and kept there."""
    with _BUILDING:
        if "cubin" not in _BUILT:
            try:
                _BUILT["cubin"] = putsig_cubin()
            except (BenchError, OSError, subprocess.TimeoutExpired) as exc:
                _BUILT["cubin"], _BUILT["reason"] = "", str(exc)
    if not _BUILT["cubin"]:
        raise BenchError(_BUILT["reason"])
    return _BUILT["cubin"]


def putsig_cubin() -> str:
    """The cached cubin for this source, nvcc, NVSHMEM device library and these GPUs (built if none)."""
    nvcc, home, source = build_tools()
    libraries = sorted(glob.glob(os.path.join(home, "lib", "libnvshmem_device*")))
    key = kernel_cache.key_for(source, nvcc, libraries, kernel_cache.gpu_architectures())
    return kernel_cache.cached_build("putsig", key, build_putsig)[0]


def build_tools() -> tuple[str, str, str]:
    """nvcc, NVSHMEM's folder and the kernel's source; BenchError with the reason where one is missing."""
    nvcc, home = shutil.which("nvcc"), nvshmem_home()
    if nvcc is None:
        raise BenchError("needs nvcc (the CUDA toolkit) to link a kernel with NVSHMEM's device library")
    if home is None:
        raise BenchError("found no NVSHMEM headers and device library (the nvidia-nvshmem wheel, or NVSHMEM_HOME)")
    from importlib import resources

    return nvcc, home, str(resources.files("gpuipc_bench.gpu") / KERNEL)


def build_putsig(folder: str) -> str:
    """Compile and device-link the put+signal kernel into `folder`; the cubin's path. Runs nvcc
    (a separate process: no CUDA call here). BenchError with the reason where it cannot."""
    nvcc, home, source = build_tools()
    obj, cubin = os.path.join(folder, "putsig.o"), os.path.join(folder, "putsig.cubin")
    steps = ([nvcc, "-rdc=true", "-arch=native", f"-I{home}/include", "-c", source, "-o", obj],
             [nvcc, "-dlink", "-cubin", "-arch=native", obj, f"-L{home}/lib", "-lnvshmem_device", "-o", cubin])
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, timeout=300)
        if done.returncode:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise BenchError(f"nvcc could not build the put+signal kernel: {last}")
    return cubin


class NvshmemShared(PairShared):
    """The pair's gate page, and the device-initiated kernel built for this run (or why not)."""

    def __init__(self):
        super().__init__(SharedGatePage())
        self.cubin, self.reason = None, ""
        try:
            self.cubin = putsig_for_run()
        except BenchError as exc:
            self.reason = str(exc)


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
        device = Device(cuda_index(self.device))
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
        self.putsig, self.device_kernels = None, {}
        self.device_launchers: dict[tuple, KernelLauncher] = {}  # (variant, nbytes, peer) -> its launch
        shared = ctx.shared
        if shared.cubin:
            import cupy

            module = cupy.RawModule(path=shared.cubin)
            bindings.cumodule_init(int(module.module.ptr))  # the module's view of this PE's NVSHMEM state
            self.device_module = module
            bulk = module.get_function("bulk_block")
            self.device_kernels = {"device-put": (bulk, 0), "device-get": (bulk, 1)}
        if shared.cubin and any(n in PUTSIG_SIZES for n in self.sizes):
            self.putsig = self.device_module.get_function("putsig_pingpong")
            self.signal, self.dest, self.payload = (bindings.malloc(n) for n in (8, 4096, 4096))  # collectives
            memset(self.signal, 0, 8, self.gpu.stream, self.device)  # rounds count from 1
            self.gpu.synchronize()
            self.rounds = 0
        elif self.producer:
            why = shared.reason or "no size of 4 B or 4 KiB in the sweep"
            ctx.note("device_putsig", f"skipped: {why}")
        if not shared.cubin and self.producer:
            ctx.note("device_bulk", f"skipped: {shared.reason}")
        ctx.sync()
        yield from rows

    # ------------------------------------------------------------------ measuring

    def measure(self, nbytes: int) -> Iterator[dict]:
        for variant in VARIANTS + tuple(self.device_kernels):
            reps = reps_for(nbytes)
            timer = self.producer if variant.endswith("put") else not self.producer
            key = self.ceiling_for(variant)
            group = self.group(variant, "stream", nbytes, self.pdev, self.cdev, key, reps)
            self.paired: list[tuple[Sample, dict | None]] = []  # each ceiling sample and its lane columns
            yield from self.sampler.run(group, lambda trial, v=variant: self.one_sided(v, nbytes, trial),
                                        timer=timer, reps=reps)
            if timer:  # the ceiling's samples, each taken right after the variant's
                ceiling = self.ceiling_group(key, nbytes, reps)
                for i, (sample, lane) in enumerate(self.paired):
                    yield self.sampler.row(ceiling, sample, i, lane=lane)
        if nbytes in CALL_SIZES:
            yield from self.call_costs(nbytes)
        if nbytes in PUTSIG_SIZES and self.putsig is not None:
            group = dict(path=self.path, variant="device-putsig", measure="pingpong", metric="latency",
                         src=self.pdev, dst=self.cdev, bytes=nbytes, ceiling="")
            yield from self.sampler.run(group, lambda trial: self.putsig_sample(nbytes, trial), timer=self.producer,
                                        reps=PUTSIG_ROUNDS, min_reps=1, phase="latency", first_reps=PUTSIG_FIRST_ROUNDS)

    def ceiling_for(self, variant: str) -> str:
        """The put is issued by the producer, the get by the consumer: each is bounded by the
        copy it makes (pushed from the producer's GPU), measured by the process that issues it;
        by the copy engine for the host-initiated ones, by a kernel for the device-initiated ones."""
        sm = "-sm" if variant.startswith("device") else ""
        link = f"d2d{sm}@{self.cdev}" if self.pdev == self.cdev else f"peer{sm}@{self.pdev}>{self.cdev}"
        return f"{link}/{'producer' if variant.endswith('put') else 'consumer'}"

    def device_call(self, variant: str):
        """The device-initiated transfer as a call like putmem_on_stream's: one kernel launch,
        each block moving its share of the message."""
        (kernel, get), stream = self.device_kernels[variant], self.gpu.stream
        launchers = self.device_launchers  # made once per size for the worker, not per sample

        def call(dest: int, src: int, nbytes: int, peer: int, _stream: int) -> None:
            launch = launchers.get((variant, nbytes, peer))
            if launch is None:
                blocks = max(1, min(DEVICE_MAX_BLOCKS, nbytes // DEVICE_BYTES_PER_BLOCK))
                launch = launchers[(variant, nbytes, peer)] = KernelLauncher(
                    kernel.kernel, (blocks,), (DEVICE_THREADS,), (c_uint64, c_uint64, c_uint64, c_int32, c_int32),
                    stream, self.device, f"{variant} launch", constants={2: nbytes, 3: peer, 4: get})
            launch(dest, src)

        return call

    def one_sided(self, variant: str, nbytes: int, trial) -> Sample | None:
        """A batch of puts (by the producer) or gets (by the consumer), slot r to slot r."""
        gpu, b, ring = self.gpu, self.bindings, Ring.for_size(nbytes, trial.reps)
        sym, stream, peer = self.sym, gpu.stream.ptr, self.other
        if self.producer:
            gpu.fill(sym, ring, trial.seed)
            gpu.synchronize()
        self.ctx.sync()  # the source is filled
        sample = None
        if variant.endswith("put") == self.producer:
            device = variant in self.device_kernels
            call = (self.device_call(variant) if device else
                    b.putmem_on_stream if variant == "put" else b.getmem_on_stream)
            # warm-up: a put into the peer's scratch, or a get from the peer's ring into ours
            warm = lambda: call(self.scratch, sym, nbytes, peer, stream)  # noqa: E731
            last = trial.reps - 1

            def op(r: int) -> None:
                call(sym + ring.offset(r), sym + ring.offset(r), nbytes, peer, stream)
                if r == last and not device:  # completion, as NVSHMEM defines it, inside the timed interval
                    b.quiet_on_stream(stream)  # (a device-initiated transfer's kernel ends with nvshmem_quiet)

            marks = gpu.time_batch(op, trial.reps, warm=warm, transfer_bytes=nbytes)
            gpu.synchronize()
            sample = Sample(marks.seconds() / trial.reps, trial.reps)
        self.ctx.sync()  # the bytes have landed
        if self.sampler.window is not None:  # the lane reading: the verification and the ceiling are not the sample
            self.sampler.window.end()
        if not self.producer:
            gpu.verify(sym, ring, trial.seed, self.path, variant, corrupt=self.ctx.corrupt)
        self.ctx.sync()  # verified: the GPU is idle
        if sample is not None and not trial.warm:
            # the bound of this sample: the same copy, by this process on this stream, at once
            # after it (a copy's fixed cost drifts a few % over time, and differs per process);
            # its lane read around it, as the sampler reads the variant's
            key = self.ceiling_for(variant)
            lanes = self.sampler.lanes
            watch = lanes.watch(self.ceiling_group(key, nbytes, trial.reps), trial.reps) if lanes is not None else None
            seconds, batch = self.meter().bandwidth(key, nbytes, trial.seed ^ CEILING_SEEDS, trial.reps,
                                                    window=watch if hasattr(watch, "end") else None)
            self.paired.append((Sample(seconds, batch), watch(batch) if watch is not None else None))
        self.ctx.sync()  # the other process waits while it is measured
        return sample

    def putsig_sample(self, nbytes: int, trial) -> Sample | None:
        """`trial.reps` device-initiated round trips; each PE then checks the peer's payload."""
        import numpy as np

        gpu, one = self.gpu, Ring.for_size(nbytes, 1)
        mine, theirs = (trial.seed, trial.seed ^ REPLY) if self.producer else (trial.seed ^ REPLY, trial.seed)
        gpu.fill(self.payload, one, mine)
        gpu.synchronize()
        first, self.rounds = self.rounds + 1, self.rounds + trial.reps
        self.ctx.sync()
        start = time.perf_counter()
        self.putsig((1,), (32,), (np.uint64(self.dest), np.uint64(self.payload), np.uint64(nbytes),
                                  np.uint64(self.signal), np.int32(trial.reps), np.uint64(first),
                                  np.int32(self.ctx.rank)), stream=gpu.stream)
        gpu.synchronize()
        seconds = (time.perf_counter() - start) / trial.reps / 2
        gpu.verify(self.dest, one, theirs, self.path, "device-putsig", corrupt=self.ctx.corrupt)
        self.ctx.sync()
        return Sample(seconds, trial.reps) if self.producer else None

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
            if getattr(self, "putsig", None) is not None:
                for ptr in (self.payload, self.dest, self.signal):
                    self.bindings.free(ptr)
            self.bindings.free(self.scratch)
            self.bindings.free(self.sym)
            self.core.finalize()
            self.initialised = False
        super().teardown(clean)


class NvshmemScenario(PairScenario):
    persistent_workers = False  # NVSHMEM initialises once per process
    # Its processes are forked by the run's fork server, which imported nvshmem4py once: that import
    # takes 3.3 s on an H100 node (it imports torch where torch is installed), per process and mode.
    start_method = "forkserver"
    preload = ("cupy", "cuda.core", "nvshmem.core", "nvshmem.bindings")
    name = "nvshmem"
    in_quick_run = False  # NVSHMEM's initialisation and its processes: 1-2 s a mode
    summary = "NVSHMEM (nvshmem4py): host-initiated put/get on symmetric memory, two PEs; small-put cost"
    worker_class = NvshmemWorker
    mpi_waiver = ""
    paths = (PathInfo("nvshmem", colour="#e377c2", setup=("nvshmem_init",)),
             PathInfo("nvshmem-call", role="reference", colour="#f7b6d2"))

    def prepare(self, config, specs):
        return NvshmemShared()

    def prebuild(self) -> threading.Thread:
        """Start finding (or building, with nvcc) this run's put+signal kernel in a thread of the
        parent while the paths before nvshmem run; prepare() then waits for it, or builds it."""
        def build() -> None:
            try:
                putsig_for_run()
            except BenchError:
                pass  # said by prepare(), in its scenario
        thread = threading.Thread(target=build, name="gpuipc-bench nvcc", daemon=True)
        thread.start()
        return thread

    def waive_reason(self, machine):
        return super().waive_reason(machine) or missing_reason()
