"""Stand-ins for the CUDA objects of gpuipc_bench.cuda, for CPU tests of scenario orchestration.

`install(monkeypatch)` replaces them in the cuda module before the launcher forks, so the
workers of the latency and sharing scenarios run their real control flow (barriers, mailbox,
roles, rows, the MPS half's decisions) with no GPU. Kernels "run" instantly: a ping-pong
reports `rounds` round trips of 1 us each; the timestamp kernel writes time.monotonic_ns().
"""

from __future__ import annotations

import itertools
import time

from gpuipc_bench import cuda

_ptrs = itertools.count(1 << 20, 1 << 20)


class FakeBuffer:
    def __init__(self, nbytes=0, device=0, *args, **kwargs):
        self.nbytes, self.device, self.ptr = nbytes, device, next(_ptrs)
        self.dptr = self.ptr

    def export(self):
        return self.ptr.to_bytes(8, "little").ljust(64, b"\0")

    def close(self):
        self.ptr = 0

    free = close


class FakeMapped(FakeBuffer):
    def __init__(self, handle, nbytes, device):
        super().__init__(nbytes, device)
        self.ptr = int.from_bytes(bytes(handle)[:8], "little") + 7  # somewhere else, but known


class FakeStream:
    ptr = 0

    def synchronize(self):
        pass


class FakeGate:
    def __init__(self):
        self.generation = 0
        self.released = 0

    def arm(self, stream):
        self.generation += 1

    def release(self):
        self.released = self.generation

    def check(self):
        pass

    def close(self):
        pass


STAMPS: dict[int, int] = {}


class FakeKernels:
    def __init__(self, device):
        self.device = device
        self.last = None

    def launch(self, stream, **kw):
        self.last = kw

    def launch_ll(self, stream, **kw):
        self.last = kw

    def stamp(self, out, stream):
        STAMPS[out] = time.monotonic_ns()

    def result(self, result, stream):
        rounds = self.last["rounds"]
        return cuda.PingPongResult(status=cuda.PP_OK, round=0, t_start=1000, t_end=1000 + rounds * 1000,
                                   seen=0, rounds=rounds)

    def close(self):
        pass


class FakeGpu:
    def __init__(self, device, shared_gate=None):
        self.device = device
        self.stream = FakeStream()
        self.gate = FakeGate()
        self.shared_gate = FakeGate() if shared_gate is not None else None
        self.owned = []

    def alloc(self, nbytes):
        return self.adopt(FakeBuffer(nbytes, self.device))

    pinned = alloc

    def adopt(self, resource):
        self.owned.append(resource)
        return resource

    def release(self, resource):
        if resource in self.owned:
            self.owned.remove(resource)
        resource.close()

    def fill(self, ptr, nbytes, seed):
        pass

    def memcpy(self, dst, src, nbytes):
        pass

    def memcpy_launcher(self, dst, src, nbytes):
        return lambda: None

    def synchronize(self):
        pass

    def verify(self, ptr, nbytes, seed, path, variant, corrupt=False):
        return True

    def close(self):
        for item in reversed(self.owned):
            item.close()
        self.owned = []


class FakeEvent:
    @classmethod
    def create(cls, device):
        return cls()

    @classmethod
    def open(cls, handle, device):
        return cls()

    def export(self):
        return b"e" * 64

    def record(self, stream):
        pass

    def wait(self, stream):
        pass

    def close(self):
        pass


class FakeCeilings:
    def __init__(self, gpu, max_bytes, **kw):
        self.gpu = gpu

    def rows(self, key, nbytes, warmup, iterations, on_sample=None, **fields):
        from gpuipc_bench.results import new_row

        kind, src, dst = cuda.parse_ceiling(key)
        for i in range(iterations):
            yield new_row(path="ceiling", variant=key, metric="bandwidth", src=src, dst=dst, bytes=nbytes,
                          iteration=i, batch=1, seconds=1e-3, verified=True, **fields)


def _read_words(ptr, count, stream, device):
    import numpy as np

    return np.array([STAMPS.get(ptr + 8 * k, 0) for k in range(count)], dtype=np.uint64)


def install(monkeypatch, ll_verify=True):
    """Replace the CUDA objects with the fakes (call before forking workers)."""
    from gpuipc_bench.scenarios import latency

    monkeypatch.setattr(cuda, "Gpu", FakeGpu)
    monkeypatch.setattr(cuda, "MappedBuffer", FakeMapped)
    monkeypatch.setattr(cuda, "PingPongKernels", FakeKernels)
    monkeypatch.setattr(cuda, "IpcEvent", FakeEvent)
    monkeypatch.setattr(cuda, "Ceilings", FakeCeilings)
    monkeypatch.setattr(cuda, "memset", lambda *a, **k: None)
    monkeypatch.setattr(cuda, "read_words", _read_words)
    monkeypatch.setattr(latency.DevicePingPong, "_verify", lambda self, *a: None)
