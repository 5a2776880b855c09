"""The CUDA C kernels, compiled by NVRTC through CuPy for one GPU.

copy.cu: fill_ring / ring_mismatch (patterns per ring slot), mark (a producer's
per-transfer write), sm_copy (the kernel copy), gate (the spin kernel that holds a
stream until the host releases it) and stamp (%globaltimer into memory).
pingpong.cu: the device-initiated ping-pong (flag + fence, and LL words).
Both start with common.cuh (the pattern hash and the clock), written once.
"""

from __future__ import annotations

import dataclasses
from ctypes import c_uint32, c_uint64
from importlib import resources
from typing import Callable

import numpy as np

from gpuipc_bench.gpu.errors import cuda_call
from gpuipc_bench.gpu.launch import KernelLauncher
from gpuipc_bench.gpu.memory import Ring, rt
from gpuipc_bench.gpu.visible import cuda_index

DEV_ATTR_MULTIPROCESSOR_COUNT = 16
DEV_ATTR_L2_CACHE_SIZE = 38
NO_MISMATCH = (1 << 64) - 1
THREADS = 256


def file_source(name: str) -> str:
    """The text of the kernel file `name` (package data of gpuipc_bench.gpu)."""
    return resources.files("gpuipc_bench.gpu").joinpath(name).read_text()


def source(name: str) -> str:
    """common.cuh followed by the kernel file `name` (package data)."""
    return file_source("common.cuh") + "\n" + file_source(name)


def _module(name: str, device: int):
    import cupy

    with cuda_call("nvrtcCompileProgram", device), cupy.cuda.Device(cuda_index(device)):
        return cupy.RawModule(code=source(name), options=("--std=c++14",))


class Kernels:
    """copy.cu for `device` (compiled when made)."""

    def __init__(self, device: int):
        import cupy

        self.device = device
        module = self.module = _module("copy.cu", device)
        self._fill, self._mismatch = module.get_function("fill_ring"), module.get_function("ring_mismatch")
        self._mark, self._copy = module.get_function("mark"), module.get_function("sm_copy")
        self._gate, self._stamp = module.get_function("gate"), module.get_function("stamp")
        with cuda_call("cudaDeviceGetAttribute", device):
            self.sms = rt().deviceGetAttribute(DEV_ATTR_MULTIPROCESSOR_COUNT, cuda_index(device))
            self.l2_bytes = rt().deviceGetAttribute(DEV_ATTR_L2_CACHE_SIZE, cuda_index(device))
        with cuda_call("cudaMalloc", device), cupy.cuda.Device(cuda_index(device)):
            self._result = cupy.empty(1, dtype=cupy.uint64)  # ring_mismatch's answer
        # (kernel, bytes, stream) -> its launcher: a batch's per-transfer kernels, made once (~20 us each)
        self._launchers: dict[tuple, KernelLauncher] = {}

    def _grid(self, nbytes: int, per_sm: int = 8, slots: int = 1) -> int:
        work = nbytes // 16 + nbytes % 16
        return max(1, min(-(-work // THREADS), max(1, self.sms * per_sm // max(1, slots))))

    def fill_ring(self, ptr: int, ring: Ring, seed: int, stream, count: int | None = None,
                  poison_tag: bool = False) -> None:
        """Fill `count` slots (default all) of `ring` at ptr: slot i with the pattern of seed + i."""
        count = ring.slots if count is None else count
        if ring.nbytes <= 0 or count <= 0:
            return
        with cuda_call("fill_ring launch", self.device):
            self._fill((self._grid(ring.nbytes, slots=count), count), (THREADS,),
                       (np.uint64(ptr), np.uint64(ring.nbytes), np.uint64(ring.stride),
                        np.uint32(seed & 0xFFFFFFFF), np.int32(1 if poison_tag else 0)), stream=stream)

    def mismatch(self, ptr: int, ring: Ring, seed: int, stream, count: int | None = None,
                 xor_mask: int = 0) -> tuple[int, int] | None:
        """(slot, offset) of the first byte of the ring that is not its slot's pattern, or None.
        Synchronises `stream`."""
        count = ring.slots if count is None else count
        if ring.nbytes <= 0 or count <= 0:
            return None
        with cuda_call("ring_mismatch", self.device):
            rt().memsetAsync(self._result.data.ptr, 0xFF, 8, stream.ptr)
            self._mismatch((self._grid(ring.nbytes, slots=count), count), (THREADS,),
                           (np.uint64(ptr), np.uint64(ring.nbytes), np.uint64(ring.stride),
                            np.uint32(seed & 0xFFFFFFFF), np.uint32(xor_mask & 0xFFFFFFFF), self._result),
                           stream=stream)
            host = np.empty(1, dtype=np.uint64)
            rt().memcpyAsync(host.ctypes.data, self._result.data.ptr, 8, 4, stream.ptr)
            stream.synchronize()
        value = int(host[0])
        return None if value == NO_MISMATCH else (value >> 40, value & ((1 << 40) - 1))

    def mark_launcher(self, nbytes: int, stream) -> Callable[[int, int], None]:
        """f(ptr, seed) enqueues the mark of one slot (its first min(n, 16) bytes)."""
        key = ("mark", nbytes, stream.ptr)
        if key not in self._launchers:
            self._launchers[key] = KernelLauncher(self._mark.kernel, (1,), (32,), (c_uint64, c_uint64, c_uint32),
                                                  stream, self.device, "mark launch", constants={1: nbytes})
        return self._launchers[key]

    def copy_launcher(self, nbytes: int, stream) -> Callable[[int, int], None]:
        """f(dst, src) enqueues one kernel copy of nbytes (cheap to call in a batch)."""
        key = ("copy", nbytes, stream.ptr)
        if key not in self._launchers:
            self._launchers[key] = KernelLauncher(self._copy.kernel, (self._grid(nbytes, per_sm=4),), (512,),
                                                  (c_uint64, c_uint64, c_uint64), stream, self.device,
                                                  "sm_copy launch", constants={2: nbytes})
        return self._launchers[key]

    def launch_gate(self, flag_dptr: int, target: int, err_dptr: int, stream, timeout_s: float) -> None:
        with cuda_call("gate launch", self.device):
            self._gate((1,), (1,), (np.uint64(flag_dptr), np.uint32(target & 0xFFFFFFFF),
                                     np.uint64(err_dptr), np.uint64(int(timeout_s * 1e9))), stream=stream)

    def stamp(self, out: int, stream) -> None:
        """Enqueue a write of the GPU's globaltimer (ns) into the 8 bytes at `out`."""
        with cuda_call("stamp launch", self.device):
            self._stamp((1,), (1,), (np.uint64(out),), stream=stream)

    def close(self) -> None:
        self._result = None  # back to CuPy's pool; Gpu.close() empties the pool


# --------------------------------------------------------------------------- ping-pong

PP_OK, PP_NO_ANSWER, PP_DEADLINE = 0, 1, 2
PINGPONG_MAX_THREADS = 1024
PINGPONG_RESULT_BYTES = 64


def ll_words(nbytes: int) -> int:
    """8-byte LL words that carry `nbytes` of payload (4 bytes each)."""
    return -(-int(nbytes) // 4)


def pingpong_threads(nbytes: int, ll: bool = False) -> int:
    """Threads of the one ping-pong block: one per 16-byte vector (LL: per 4-byte word), whole
    warps, 32 to 1024."""
    units = ll_words(nbytes) if ll else -(-int(nbytes) // 16)
    return max(32, min(PINGPONG_MAX_THREADS, -(-units // 32) * 32))


@dataclasses.dataclass(frozen=True)
class PingPongResult:
    status: int  # PP_OK, PP_NO_ANSWER or PP_DEADLINE
    round: int  # the round that failed (0: the handshake)
    t_start: int  # globaltimer ns after the handshake
    t_end: int
    seen: int  # the flag (word) value the failing wait saw last
    rounds: int
    sm: int = -1  # the SM the kernel's block ran on (%smid; the trace's, GPUIPC_BENCH_TRACE)

    @property
    def seconds(self) -> float:
        """Seconds of the timed rounds (all but the handshake)."""
        return max(0, self.t_end - self.t_start) / 1e9

    @property
    def round_trip(self) -> float:
        return self.seconds / max(1, self.rounds)


class PingPongKernels:
    """pingpong.cu for `device`."""

    def __init__(self, device: int):
        self.device = device
        module = self.module = _module("pingpong.cu", device)
        self._simple, self._ll = module.get_function("pingpong"), module.get_function("pingpong_ll")

    def launch(self, stream, *, my_flag: int, peer_flag: int, my_payload: int, peer_payload: int,
               src: int, nbytes: int, first: int, rounds: int, initiator: bool, timeout_s: float,
               deadline_s: float, result: int) -> None:
        """Enqueue the flag-and-fence ping-pong kernel."""
        u64, u32 = np.uint64, np.uint32
        args = (u64(my_flag), u64(peer_flag), u64(my_payload), u64(peer_payload), u64(src), u64(nbytes),
                u32(first & 0xFFFFFFFF), u32(rounds), np.int32(1 if initiator else 0),
                u64(int(timeout_s * 1e9)), u64(int(deadline_s * 1e9)), u64(result))
        with cuda_call("pingpong launch", self.device):
            self._simple((1,), (pingpong_threads(nbytes),), args, stream=stream)

    def launch_ll(self, stream, *, my_ll: int, peer_ll: int, src: int, nbytes: int, first: int,
                  rounds: int, initiator: bool, timeout_s: float, deadline_s: float, result: int) -> None:
        """Enqueue the LL ping-pong kernel: ll_words(nbytes) words of 4 payload bytes + the round."""
        u64, u32 = np.uint64, np.uint32
        args = (u64(my_ll), u64(peer_ll), u64(src), u32(ll_words(nbytes)), u32(first & 0xFFFFFFFF),
                u32(rounds), np.int32(1 if initiator else 0), u64(int(timeout_s * 1e9)),
                u64(int(deadline_s * 1e9)), u64(result))
        with cuda_call("pingpong_ll launch", self.device):
            self._ll((1,), (pingpong_threads(nbytes, ll=True),), args, stream=stream)

    def result(self, result: int, stream) -> PingPongResult:
        """Read a ping-pong result block (after everything queued on `stream`)."""
        from gpuipc_bench.gpu.memory import read_words

        words = read_words(result, 7, stream, self.device)
        return PingPongResult(status=int(words[0]), round=int(words[1]), t_start=int(words[2]),
                              t_end=int(words[3]), seen=int(words[4]), rounds=int(words[5]), sm=int(words[6]))

    def close(self) -> None:
        self.module = None
