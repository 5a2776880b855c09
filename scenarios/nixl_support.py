"""What the nixl path needs around NIXL itself: finding the wheel, the metadata channel the
parent makes before the fork, and the workers' rings in host or GPU memory (scenarios/nixl.py)."""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import importlib.util
import os
import pickle
import re
import shutil
import struct
import sys
import tempfile
from typing import Any

import numpy as np

from gpuipc_bench.errors import BenchError
from gpuipc_bench.gpu.memory import Ring
from gpuipc_bench.gpu.visible import cuda_index
from gpuipc_bench.patterns import check, pattern_bytes
from gpuipc_bench.ipc.shared import SharedPages

MODULES = ("nixl_cu13", "nixl_cu12")  # the wheels' modules (the `nixl` meta package only re-exports one)
INSTALL = ('pip install --no-deps "nixl-cu12==1.5.1" (nixl-cu13 for CUDA 13; --no-deps: the torch it requires '
           'is for nixl_ep only)')
BOX_BYTES = 1 << 20  # each worker's half of the metadata channel


HOST_BATCH_BYTES = 16 << 20  # a host sample moves about this much (pattern filling and checking is numpy)
BLOCKS = (16, 256, 4096)  # descriptors per request in the blocks study
BLOCKS_FROM = 1 << 20
MIN_BLOCK = 64  # bytes per descriptor at least
FORCED = {  # scenario: (UCX variables, variant suffix)
    "nixl-host": ({}, ""),
    "nixl-host-tcp": ({"UCX_TLS": "tcp"}, ":tcp"),
    "nixl": ({}, ""),
    "nixl-read": ({}, ""),
    "nixl-host-read": ({}, ""),
    "nixl-cuda-copy": ({"UCX_TLS": "cuda_copy,tcp"}, ":cuda_copy"),
    "nixl-tcp": ({"UCX_TLS": "tcp"}, ":tcp"),
}

def missing() -> str | None:
    """Why NIXL cannot be used here (None when a wheel is installed)."""
    if any(importlib.util.find_spec(m) is not None for m in MODULES):
        return None
    return f"needs NIXL: {INSTALL}"


def api():
    """NIXL's Python API (nixl_agent, nixl_agent_config) from whichever wheel is installed."""
    for name in MODULES:
        if importlib.util.find_spec(name) is not None:
            return importlib.import_module(f"{name}._api")
    raise BenchError(f"nixl: {missing()}")


def user_ucx_settings(environ=os.environ) -> str:
    """The UCX_ variables the user's environment sets (they decide UCX's own choice)."""
    found = [f"{k}={v}" for k, v in sorted(environ.items()) if k.startswith("UCX_")]
    return " ".join(found) or "none"


def flush_c_streams() -> None:
    """UCX writes its log through C stdio, buffered: flush it so that the file holds what UCX said."""
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass


# NIXL's own error lines (glog): 'E1126 02:09:38.166571    1470 config.cpp:84] Invalid UCX_TLS=tcp ...'
_NIXL_ERROR = re.compile(r"^E\d{4} [\d:.]+\s+\d+ [^\]]*\] (.*)$")


@contextlib.contextmanager
def stderr_kept(kept: list[str]):
    """Run the block with this process's stderr (fd 2, where NIXL's C++ logs) going to a file too:
    what was written is appended to `kept` and still reaches the real stderr afterwards."""
    sys.stderr.flush()
    flush_c_streams()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            flush_c_streams()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode(errors="replace")
            kept.append(text)
            if text:
                try:
                    os.write(2, text.encode())
                except OSError:
                    pass


def nixl_error(text: str) -> str:
    """NIXL's first error line in `text` (the cause; the later ones say what failed because of it),
    without its log prefix ('' if none)."""
    found = [m.group(1).strip() for m in map(_NIXL_ERROR.match, text.splitlines()) if m]
    return found[0] if found else ""


class NixlShared:
    """What the parent makes before the fork: the metadata channel and the UCX log folder."""

    def __init__(self, gate=None):
        self.gate = gate
        self.box = SharedPages(2 * BOX_BYTES)
        self.folder = tempfile.mkdtemp(prefix="gpuipc-bench-ucx-")

    def put(self, rank: int, obj: Any) -> None:
        data = pickle.dumps(obj)
        if len(data) + 8 > BOX_BYTES:
            raise BenchError(f"nixl: the agent metadata ({len(data)} bytes) does not fit the channel")
        self.box[rank * BOX_BYTES:rank * BOX_BYTES + 8 + len(data)] = struct.pack("<Q", len(data)) + data

    def get(self, rank: int) -> Any:
        (size,) = struct.unpack("<Q", self.box[rank * BOX_BYTES:rank * BOX_BYTES + 8])
        return pickle.loads(self.box[rank * BOX_BYTES + 8:rank * BOX_BYTES + 8 + size])  # noqa: S301 - our own pages

    def close(self) -> None:
        if self.gate is not None:
            self.gate.close()
        self.box.close()
        shutil.rmtree(self.folder, ignore_errors=True)


class HostBuffer:
    """A worker's host ring, page-aligned (numpy); ptr for NIXL, fill and check in numpy."""

    kind = "DRAM"

    def __init__(self, nbytes: int):
        self.array = np.zeros(nbytes, dtype=np.uint8)  # touched below: first-touch faults stay out of timing
        self.array[::4096] = 0
        self.ptr, self.device = self.array.ctypes.data, 0

    def fill(self, ring: Ring, seed: int, count: int) -> None:
        for i in range(count):
            at = ring.offset(i)
            self.array[at:at + ring.nbytes] = pattern_bytes(ring.nbytes, seed + i)

    def verify(self, ring: Ring, seed: int, count: int, path: str, variant: str, corrupt: bool) -> None:
        if corrupt and ring.nbytes:
            self.array[ring.offset(count - 1)] ^= 0xFF
        for i in range(count):
            at = ring.offset(i)
            check(self.array[at:at + ring.nbytes], seed + i, path, variant, ring.nbytes, slot=i)


class GpuBuffer:
    """A ring in GPU memory (the worker's Gpu allocates, fills and verifies with its kernels)."""

    kind = "VRAM"

    def __init__(self, gpu, nbytes: int):
        self.gpu, self.memory = gpu, gpu.alloc(nbytes)
        # NIXL's descriptors name the GPU by its CUDA ordinal in this worker (gpu.visible)
        self.ptr, self.device = self.memory.ptr, cuda_index(gpu.device)

    def fill(self, ring: Ring, seed: int, count: int) -> None:
        self.gpu.fill(self.ptr, ring, seed, count)
        self.gpu.synchronize()

    def verify(self, ring: Ring, seed: int, count: int, path: str, variant: str, corrupt: bool) -> None:
        self.gpu.verify(self.ptr, ring, seed, path, variant, count=count, corrupt=corrupt)
