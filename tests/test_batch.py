"""How a batch is queued and timed, without a GPU: the ctypes kernel launcher packs what the kernel
receives (a stand-in cuLaunchKernel reads it back through the parameter array, as the driver does);
cuda_call translates CUDA errors only; a batch queues two warm-up operations below 16 MiB and one
from there; an h2d ceiling takes two host rings in turn; a two-process exchange starts its clock
once both sides have warmed up; a traced run writes its timeline and the scripts add it up."""

import ctypes

import pytest

from gpuipc_bench.errors import BenchError
from gpuipc_bench.gpu import launch
from gpuipc_bench.gpu.errors import CudaError, cuda_call

LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *(ctypes.c_uint,) * 7, ctypes.c_void_p,
                          ctypes.c_void_p, ctypes.c_void_p)


class FakeDriver:
    """cuLaunchKernel that records (function, grid, block, shared bytes, stream, the argument
    values read through kernelParams) and returns `code`; cuGetErrorName for that code."""

    def __init__(self, types, code=0):
        self.calls, self.types, self.code = [], types, code

        def launch_kernel(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            pointers = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
            values = [kind.from_address(pointers[i]).value for i, kind in enumerate(self.types)]
            self.calls.append((function, (gx, gy, gz), (bx, by, bz), shared, stream, values, extra))
            return self.code

        self.cuLaunchKernel = LAUNCH(launch_kernel)

    def cuGetErrorName(self, code, out):
        ctypes.cast(out, ctypes.POINTER(ctypes.c_char_p))[0] = b"CUDA_ERROR_LAUNCH_FAILED"
        return 0


class Handle:
    def __init__(self, ptr):
        self.ptr = ptr


@pytest.fixture
def fake_driver(monkeypatch):
    def install(types, code=0):
        driver = FakeDriver(types, code)
        monkeypatch.setattr(launch, "_DRIVER", driver)
        return driver
    return install


def test_launcher_passes_the_values_of_each_call_and_its_constants(fake_driver):
    types = (ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint32)
    driver = fake_driver(types)
    mark = launch.KernelLauncher(Handle(0x1234), (3,), (32,), types, Handle(0x77), 0, "mark launch",
                                 constants={1: 4096})
    mark(0x7F00_0000_1000, 5)
    mark(0xFFFF_FFFF_FFFF_FF00, (1 << 32) + 9)  # a seed wider than u32 is cut to it, as C would
    assert [c[5] for c in driver.calls] == [[0x7F00_0000_1000, 4096, 5], [0xFFFF_FFFF_FFFF_FF00, 4096, 9]]
    function, grid, block, shared, stream, _, extra = driver.calls[0]
    assert (function, grid, block, shared, stream, extra) == (0x1234, (3, 1, 1), (32, 1, 1), 0, 0x77, None)


def test_launcher_raises_the_drivers_error_naming_the_call_and_gpu(fake_driver):
    types = (ctypes.c_uint64,) * 3
    fake_driver(types, code=719)
    copy = launch.KernelLauncher(Handle(1), (8,), (512,), types, Handle(2), 3, "sm_copy launch", constants={2: 64})
    with pytest.raises(CudaError, match="CUDA_ERROR_LAUNCH_FAILED in sm_copy launch on GPU 3"):
        copy(16, 32)


class CUDARuntimeError(RuntimeError):
    """Named as CuPy's is."""


def test_cuda_call_translates_cuda_errors_and_lets_others_through():
    with pytest.raises(CudaError, match="cudaErrorInvalidValue in cudaMemcpyAsync on GPU 1 .invalid argument."):
        with cuda_call("cudaMemcpyAsync", 1):
            raise CUDARuntimeError("cudaErrorInvalidValue: invalid argument")
    with pytest.raises(ValueError, match="not CUDA"):
        with cuda_call("cudaMemcpyAsync", 1):
            raise ValueError("not CUDA")
    mine = BenchError("already said")
    with pytest.raises(BenchError) as caught:
        with cuda_call("cudaMemcpyAsync", 1):
            raise mine
    assert caught.value is mine
    with pytest.raises(KeyboardInterrupt):
        with cuda_call("cudaMemcpyAsync", 1):
            raise KeyboardInterrupt
    with cuda_call("cudaMemcpyAsync", 1):
        pass


def test_cuda_call_out_of_memory_names_the_size():
    with pytest.raises(BenchError, match="cannot allocate 1 GiB on GPU 0"):
        with cuda_call("cudaMalloc", 0, nbytes=1 << 30):
            raise CUDARuntimeError("cudaErrorMemoryAllocation: out of memory")


class Recorder:
    """A stand-in gate, stream and marks for time_batch: every call in the order it came."""

    def __init__(self):
        self.calls, self.device, self.kernels = [], 0, None

    def arm(self, stream):
        self.calls.append("arm")

    def release(self):
        self.calls.append("release")

    def check(self):
        self.calls.append("check")

    def synchronize(self):
        self.calls.append("sync")

    def mark_start(self):
        self.calls.append("start")

    def mark_end(self):
        self.calls.append("end")


@pytest.mark.parametrize("transfer_bytes, warm_ops", [(None, 2), (4, 2), ((16 << 20) - 1, 2), (16 << 20, 1),
                                                      (256 << 20, 1)])
def test_a_batch_queues_two_warm_up_operations_below_16_mib_and_one_from_there(transfer_bytes, warm_ops):
    from gpuipc_bench.gpu.timing import time_batch, warmup_ops

    assert warmup_ops(transfer_bytes) == warm_ops
    rec = Recorder()
    time_batch(rec, rec, lambda r: rec.calls.append(f"rep{r}"), 3, warm=lambda: rec.calls.append("warm"),
               marks=rec, before_release=lambda: rec.calls.append("barrier"), transfer_bytes=transfer_bytes)
    assert rec.calls == (["arm"] + ["warm"] * warm_ops + ["start", "rep0", "rep1", "rep2", "end", "barrier",
                                                          "release", "sync", "check"])


def test_a_batch_releases_its_gate_when_queueing_fails():
    from gpuipc_bench.gpu.timing import time_batch

    rec = Recorder()

    def enqueue(r):
        if r == 1:
            raise RuntimeError("queue full")
        rec.calls.append(f"rep{r}")

    with pytest.raises(RuntimeError, match="queue full"):
        time_batch(rec, rec, enqueue, 3, marks=rec)
    assert rec.calls == ["arm", "start", "rep0", "release", "sync"]


def test_an_h2d_ceiling_takes_two_host_rings_in_turn_each_filled_once_per_shape(monkeypatch):
    """Filling a pinned source crosses the bus as the copy does: two rings, filled once per ring
    shape with different patterns, so the destination changes from every sample to the next."""
    import contextlib

    from gpuipc_bench.gpu import ceilings
    from gpuipc_bench.gpu.memory import Ring

    class Buffer:
        def __init__(self, dptr):
            self.dptr = dptr

    class StubGpu:
        device, fills = 0, []

        def kept_pinned(self, nbytes):
            return Buffer(0x2000)

        def fill(self, ptr, ring, seed):
            self.fills.append((ptr, ring.nbytes, ring.slots, seed))

        def synchronize(self):
            pass

    monkeypatch.setattr(ceilings, "on_device", lambda device: contextlib.nullcontext())
    table = ceilings.Ceilings(StubGpu(), 1 << 20)
    ends, first = ("h2d", "host", 0), Buffer(0x1000)
    small, large = Ring.for_size(4096, 8), Ring.for_size(1 << 16, 4)
    taken = [table._host_source(ends, first, small, seed) for seed in (7, 7, 9, 11, 13)]
    assert [ptr for ptr, _, _ in taken] == [0x1000, 0x2000, 0x1000, 0x2000, 0x1000]
    assert [seed for _, seed, _ in taken] == [7, 6, 7, 6, 7]  # the second ring's pattern differs from the first's
    assert [filled for _, _, filled in taken] == [True, True, False, False, False]  # (the lane window begins after)
    assert table.gpu.fills == [(0x1000, 4096, 8, 7), (0x2000, 4096, 8, 6)]
    ptr, seed, filled = table._host_source(ends, first, large, 21)  # another shape: that ring is filled again
    assert (ptr, seed, filled) == (0x2000, 21, True) and table.gpu.fills[-1] == (0x2000, 1 << 16, 4, 21)
    one = ceilings.Ceilings(StubGpu(), 1 << 20, host_rings=1)  # the health form's: one ring, filled every sample
    one.gpu.fills = []
    assert [one._host_source(ends, first, small, seed) for seed in (7, 9, 9)] == [
        (0x1000, 7, True), (0x1000, 9, True), (0x1000, 9, True)]
    assert len(one.gpu.fills) == 3


@pytest.mark.parametrize("nbytes, warm", [(4, 4), ((16 << 20) - 1, (16 << 20) - 1), (16 << 20, 1 << 20),
                                           (256 << 20, 1 << 20)])
def test_a_large_transfer_over_pcie_warms_up_with_1_mib(nbytes, warm):
    from gpuipc_bench.gpu.timing import host_warm_bytes

    assert host_warm_bytes(nbytes) == warm


def test_the_host_paths_regions_hold_the_ring_and_a_scratch_of_the_warm_ups_not_of_the_largest_size():
    """A region of 512 MiB for a 256 MiB ring made each process fault in and register twice what
    its copies use; the warm-ups land in a scratch of at most the largest warm-up."""
    from gpuipc_bench.defaults import DEFAULT_GPU_SIZES
    from gpuipc_bench.gpu.memory import ring_capacity
    from gpuipc_bench.gpu.timing import host_scratch_bytes
    from gpuipc_bench.harness.plan import PlanOptions, registry, run_config

    assert host_scratch_bytes(DEFAULT_GPU_SIZES) == (4 << 20) + 256  # the largest under 16 MiB: 4 MiB
    assert host_scratch_bytes((4, 4096)) == 4096 + 256
    config = run_config(PlanOptions(scenario_names=("staging", "mmap")))
    staging, mmap = registry()["staging"], registry()["mmap"]
    ring = ring_capacity(staging.sizes(config))
    assert staging.host_bytes(config)[0] == ring + (4 << 20) + 256
    assert mmap.region_bytes(config) == ring + (4 << 20) + 256


@pytest.mark.parametrize("key, warm_bytes", [("d2h@0", 1 << 20), ("h2d-sm@0", 1 << 20), ("d2d@0", 256 << 20),
                                             ("d2d-sm@0", 256 << 20)])
def test_a_ceiling_over_pcie_warms_up_with_1_mib_and_one_within_the_gpu_with_a_whole_transfer(monkeypatch, key,
                                                                                              warm_bytes):
    """The warm-up takes the gate's switch out of the interval: over PCIe 1 MiB of the same engine
    does (a whole 256 MiB copy doubled the sample); within the GPU, where a copy is clock-bound,
    it stays a whole transfer. The timed copies are the transfer's size either way."""
    import contextlib

    from gpuipc_bench.gpu import ceilings

    class Buffer:
        def __init__(self, dptr):
            self.dptr = dptr

    class StubMarks:
        def seconds(self):
            return 1e-3

    class StubGpu:
        device = 0

        def __init__(self):
            self.copies = []  # (bytes, engine, what: 'warm' or 'timed')
            self.what = "warm"

        def kept_pinned(self, nbytes):
            return Buffer(0x2000)

        def alloc(self, nbytes):
            return Buffer(0x3000)

        def fill(self, ptr, ring, seed):
            pass

        def synchronize(self):
            pass

        def verify(self, *args, **kwargs):
            return True

        def copy_launcher(self, nbytes, engine="ce"):
            return lambda dst, src: self.copies.append((nbytes, engine, self.what))

        def time_batch(self, enqueue, reps, *, warm=None, transfer_bytes=None, **kwargs):
            from gpuipc_bench.gpu.timing import warmup_ops

            for _ in range(warmup_ops(transfer_bytes)):
                warm()
            self.what = "timed"
            for r in range(reps):
                enqueue(r)
            return StubMarks()

    monkeypatch.setattr(ceilings, "on_device", lambda device: contextlib.nullcontext())
    gpu = StubGpu()
    table = ceilings.Ceilings(gpu, 512 << 20)
    table.bandwidth(key, 256 << 20, 7, reps=1)
    engine = "sm" if "-sm" in key else "ce"
    assert gpu.copies == [(warm_bytes, engine, "warm"), (256 << 20, engine, "timed")]


class StubCtx:
    """The mailbox of two workers in one thread: what one stores, the other loads."""

    def __init__(self, rank, words):
        self.rank, self.words = rank, words

    def slot(self, name):
        return name

    def handle_slot(self, name):
        return name

    def store(self, name, value):
        self.words[name] = value

    def load(self, name):
        return self.words[name]

    def sync(self):
        pass


class StubMarks:
    def __init__(self, start, end):
        self.start, self.end = start, end

    def stamped(self):
        return self.start, self.end


class StubSignal:
    def __init__(self, calls, name):
        self.calls, self.name = calls, name

    def send(self, stream):
        self.calls.append(f"{self.name}.send")

    def receive(self, stream):
        self.calls.append(f"{self.name}.receive")


class StubGpu:
    """time_batch runs the enqueue of the batch's first transfer and returns the given stamps."""

    def __init__(self, start, end):
        self.stamps, self.stream = (start, end), None

    def alloc(self, nbytes):
        return type("Buffer", (), {"ptr": 0})()

    def marks(self, stamps):
        return StubMarks(*self.stamps)

    def time_batch(self, enqueue, reps, **kwargs):
        enqueue(0)
        return kwargs["marks"]


def test_an_exchange_on_one_gpu_starts_its_clock_once_both_sides_have_warmed_up():
    """The receiver's 'go' gates the sender's first operation, and the batch is timed from the
    later of the two start stamps: a consumer's warm-up copies still running when the producer
    started are no longer in the figure."""
    from gpuipc_bench.engine.exchange import Exchange

    words, calls = {}, []
    sides = {}
    for rank in (0, 1):
        ex = sides[rank] = Exchange(StubCtx(rank, words), "pull", 0, 1, same_gpu=True)
        assert ex.go in ex.signals  # on one GPU too, as on two
        ex.stamps = 0
        ex.go, ex.filled, ex.drained = (StubSignal(calls, f"{rank}:{n}") for n in ("go", "filled", "drained"))
    # the sender (producer) warmed up quickly and started at 100 ns; the receiver at 400 ns
    assert sides[0].run(StubGpu(100, 900), 2, 1, None, handoff=True) is None
    seconds = sides[1].run(StubGpu(400, 1000), 2, 1, None, handoff=True)
    assert seconds == (1000 - 400) / 1e9 / 2
    assert calls == ["0:go.receive", "0:filled.send", "1:go.send", "1:filled.receive", "1:drained.send"]


def test_a_traced_run_writes_every_workers_timeline_and_the_scripts_add_it_up(tmp_path):
    """GPUIPC_BENCH_TRACE: the parent's steps and each worker's phases and sample steps, one file
    per scenario, worker and mode; scripts/trace/trace_summary.py and scripts/trace/trace_samples.py read them."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    trace = tmp_path / "trace"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUIPC_BENCH_")}
    env["GPUIPC_BENCH_TRACE"] = str(trace)
    run = subprocess.run([sys.executable, "-m", "gpuipc_bench.cli", "run", "-s", "host", "--quick", "--sizes", "4K",
                          "-o", str(tmp_path / "r.csv")], capture_output=True, text=True, timeout=180, env=env)
    assert run.returncode == 0, run.stderr
    names = sorted(p.name for p in trace.glob("*.jsonl"))
    assert [n for n in names if n.startswith("parent-")] and len([n for n in names if n.startswith("host-")]) == 2
    for path in trace.glob("host-*.jsonl"):
        assert path.name.split("-")[2] == "none"  # a CPU scenario's mode
        events = [json.loads(line)[1] for line in path.read_text().splitlines()]
        assert {"begin", "phase", "decided", "end"} <= set(events)
        assert events[0] == "forked" and events.index("forked") < events.index("begin")  # its start, first
    took = [json.loads(line) for p in trace.glob("host-*.jsonl") for line in p.read_text().splitlines()]
    assert any(e[1] == "took" and e[2] > 0 for e in took)  # the timing worker's figures
    for script in ("trace/trace_summary.py", "trace/trace_samples.py"):
        out = subprocess.run([sys.executable, str(repo / "scripts" / script), str(trace)], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0 and "host" in out.stdout, out.stderr
