"""The torch side of the torch path (scenarios/torch_share.py): whether PyTorch can run here,
how its workers were started, a CUDA tensor's allocator and pointers, and the tensor queue
between the two workers (torch.multiprocessing) with the tool's abort and silence checks."""

from __future__ import annotations

import ctypes
import importlib.util
import os
import queue as queue_errors
import sys
import time
from pathlib import Path
from typing import Any

from gpuipc_bench.errors import BarrierAborted, BarrierTimeout, BenchError
from gpuipc_bench.engine.pair import PRODUCER
from gpuipc_bench.gpu.visible import cuda_index

EXTRA = "pip install -e '.[torch]'"
POLL_S = 0.05  # a get looks at the abort word and the producer's silence this often
PR_SET_PTRACER = 0x59616D61


def missing_torch() -> str | None:
    """Why this path cannot run for want of PyTorch (None: it is installed). Looks at the
    installed files only: the parent never imports torch."""
    spec = importlib.util.find_spec("torch")
    return f"needs PyTorch: {EXTRA}" if spec is None or not spec.origin else None


def torch_without_cuda() -> str | None:
    """Why the installed PyTorch cannot share CUDA tensors (a CPU-only build), or None."""
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin and not any((Path(spec.origin).parent / "lib").glob("libtorch_cuda*")):
        return f"needs a CUDA build of PyTorch (torch {_torch_version()} has no CUDA): install torch for CUDA"
    return None


def _torch_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return "?"


# --------------------------------------------------------------------------- process facts


def how_started() -> str:
    """'spawned' in a process that multiprocessing spawned (a fresh interpreter, started with
    --multiprocessing-fork; it sets sys.argv to its parent's, but not sys.orig_argv),
    'forkserver' in one forked by multiprocessing's fork server (its argv is the server's), else
    'forked'."""
    argv = " ".join(getattr(sys, "orig_argv", ()))
    return "spawned" if "--multiprocessing-fork" in argv else "forkserver" if "forkserver" in argv else "forked"


def workers_note(started: str) -> str:
    """The run's note on how the workers were started ('spawned', 'forkserver' or 'forked')."""
    how = {"spawned": "a fresh interpreter each, as torch.multiprocessing asks",
           "forkserver": "forked by multiprocessing's fork server, which imported torch and CuPy once and "
                         "never touches CUDA, as torch.multiprocessing allows"}.get(
                             started, "before any CUDA call; not spawned")
    return f"{started} ({how}); the timed parts keep the tool's barrier"


def allow_ptrace(pid: int) -> None:
    """Let process `pid` take this process's file descriptors (pidfd_getfd): Yama's
    ptrace_scope=1 refuses it to a sibling that the process has not named."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PTRACER, ctypes.c_ulong(pid), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # no Yama, no prctl: nothing to allow


def refused(exc: BaseException) -> bool:
    """A receipt the kernel refused: the consumer may not take the producer's fds."""
    return isinstance(exc, RuntimeError) and "pidfd" in str(exc)


class TorchSide:
    """The torch calls a worker makes, in one place (the CPU tests put a fake in its stead).
    Made after the tool's CUDA context, in the worker: the parent never imports torch."""

    def __init__(self, device: int):
        # Expandable segments are shared only where this is on (the default outside Meta's builds).
        os.environ.setdefault("TORCH_CUDA_EXPANDABLE_SEGMENTS_IPC", "1")
        import torch
        import torch.multiprocessing  # noqa: F401  (registers the reductions of CUDA tensors)

        self.torch, self.device = torch, cuda_index(device)  # torch's ordinal in this worker (gpu.visible)
        torch.cuda.set_device(self.device)

    def use_allocator(self, variant: str) -> None:
        """New allocations from now on come from `variant`'s kind of segment (caches emptied)."""
        self.collect()
        # torch 2.10+ names the call for any accelerator (the CUDA one warns that it is deprecated).
        setting = getattr(self.torch._C, "_accelerator_setAllocatorSettings", None) or \
            self.torch.cuda.memory._set_allocator_settings
        try:
            setting(f"expandable_segments:{variant == 'expandable'}")
        except (AttributeError, RuntimeError) as exc:
            raise BenchError(f"torch/{variant}: torch {self.torch.__version__} cannot switch its allocator to "
                             f"expandable_segments:{variant == 'expandable'} ({exc})") from None

    def empty(self, nbytes: int) -> Any:
        return self.torch.empty(max(1, nbytes), dtype=self.torch.uint8, device=f"cuda:{self.device}")

    @staticmethod
    def ptr(tensor) -> int:
        return tensor.data_ptr()

    @staticmethod
    def view(tensor, offset: int, nbytes: int) -> Any:
        return tensor[offset:offset + nbytes]

    def expandable(self, tensor) -> bool | None:
        """Whether `tensor` lies in an expandable segment (None: torch does not say)."""
        ptr = tensor.data_ptr()
        for segment in self.torch.cuda.memory_snapshot():
            if segment["address"] <= ptr < segment["address"] + segment["total_size"]:
                return segment.get("is_expandable")
        return None

    def copy(self, dst, src) -> None:
        dst.copy_(src)
        self.torch.cuda.current_stream().synchronize()

    def collect(self) -> None:
        """Free what consumers have let go of (torch keeps a sent block until they do), and the caches."""
        self.torch.cuda.synchronize()
        self.torch.cuda.ipc_collect()
        self.torch.cuda.empty_cache()


class TensorQueue:
    """The parent's queue as a worker uses it: puts whose pickling errors are not lost, and gets
    that give up (a multiprocessing queue pickles in a feeder thread, which only prints them)."""

    def __init__(self, ctx, q):
        self.ctx, self.q = ctx, q
        self.errors: list[BaseException] = []
        q._on_queue_feeder_error = lambda exc, obj: self.errors.append(exc)  # the queue's hook for this

    def put(self, item) -> None:
        self._raise_feeder_error()
        self.q.put(item)

    def send(self, item) -> None:
        """Put `item` and wait until its message is in the pipe, so that the consumer's get reads it at
        once (the consumer must not get before this returns: it waits at a barrier)."""
        self.put(item)
        deadline = time.monotonic() + self.ctx.config.timeout
        while self.q.empty():
            self._raise_feeder_error()
            if self.ctx.segment.aborted:
                raise BarrierAborted("run aborted")
            if time.monotonic() > deadline:
                raise BenchError(f"the torch queue did not take a tensor within {self.ctx.config.timeout:g} s")
            os.sched_yield()

    def get(self) -> Any:
        ctx = self.ctx
        start = time.monotonic()
        while True:
            try:
                return self.q.get(timeout=POLL_S)
            except queue_errors.Empty:
                pass
            if ctx.segment.aborted:
                raise BarrierAborted("run aborted")
            if time.monotonic() - max(start, ctx.segment.last_progress(PRODUCER)) > ctx.config.timeout:
                raise BarrierTimeout([PRODUCER], ctx.config.timeout, where="a tensor on the torch queue")

    def _raise_feeder_error(self) -> None:
        if self.errors:
            exc = self.errors.pop(0)
            raise BenchError(f"torch could not send a tensor: {type(exc).__name__}: {exc}") from exc


def queue_semaphores(q) -> list[str]:
    """The names of the named semaphores of a multiprocessing queue (its locks and its count)."""
    names = []
    for lock in (getattr(q, "_rlock", None), getattr(q, "_wlock", None), getattr(q, "_sem", None)):
        name = getattr(getattr(lock, "_semlock", None), "name", None)
        if name:
            names.append(name)
    return names


# --------------------------------------------------------------------------- the workers


