"""The torch side of the symm path (scenarios/symm.py): which backend each scenario uses, the
torch it needs, the environment its workers set, and the torch calls a worker makes (SymmSide,
which the CPU tests replace by a fake). The parent never imports torch."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import time
import warnings
from typing import Any, Iterator

from gpuipc_bench.errors import BenchError
from gpuipc_bench.gpu.visible import cuda_index
from gpuipc_bench.scenarios.torch_support import EXTRA, missing_torch, torch_without_cuda

# The scenario of each backend (each in processes of its own: torch sets the backend once per process).
BACKENDS = {"symm": "CUDA", "symm-nvshmem": "NVSHMEM", "symm-nccl": "NCCL"}
# The first torch release with each backend of torch.distributed._symmetric_memory: CUDA (empty,
# rendezvous, get_buffer, the signal pad) in 2.5, set_backend and NVSHMEM in 2.8, NCCL in 2.9.
# A worker also checks for the calls themselves and says which one this torch lacks.
MIN_TORCH = {"CUDA": (2, 5), "NVSHMEM": (2, 8), "NCCL": (2, 9)}
# NVLink multicast stays off in every library the workers load (NCCL, NVSHMEM, torch's own).
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
# Two ranks on one GPU: torch's CUDA backend refuses them unless this is set.
OVERLAPPING = {"TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES": "1"}
NCCL_ONE_GPU = "needs 2 GPUs, one per rank: NCCL refuses two ranks on one GPU"
# Seen on an H200 (torch 2.11, NVSHMEM 3.4): two processes on one GPU run NVSHMEM in its limited MPG mode,
# which refuses the team calls the symmetric-memory backend makes.
NVSHMEM_ONE_GPU = ("needs 2 GPUs, one per rank: NVSHMEM runs two processes on one GPU only in its "
                   "limited MPG mode, which refuses the team calls torch makes")

ONE_GPU_REFUSALS = {"NCCL": NCCL_ONE_GPU, "NVSHMEM": NVSHMEM_ONE_GPU}


def torch_version() -> tuple[int, int] | None:
    """(major, minor) of the installed torch from its metadata (no import), None if unknown."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        text = version("torch")
    except PackageNotFoundError:
        return None
    parts = text.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def nvshmem_libraries() -> bool:
    """Whether NVSHMEM's host library is installed (the nvidia-nvshmem wheel torch loads)."""
    if importlib.util.find_spec("nvidia") is None:
        return False
    spec = importlib.util.find_spec("nvidia.nvshmem")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        lib = os.path.join(folder, "lib")
        if os.path.isdir(lib) and any(n.startswith("libnvshmem_host") for n in os.listdir(lib)):
            return True
    return False


def missing_reason(backend: str, gpu_count: int) -> str | None:
    """Why the symm path of `backend` cannot run here (one line), or None. No torch import."""
    if gpu_count == 1 and backend in ONE_GPU_REFUSALS:
        return ONE_GPU_REFUSALS[backend]
    reason = missing_torch() or torch_without_cuda()
    if reason:
        return reason
    have, need = torch_version(), MIN_TORCH[backend]
    if have is not None and have < need:
        return (f"needs torch >= {need[0]}.{need[1]} for the {backend} backend of symmetric memory "
                f"(torch {have[0]}.{have[1]} here): {EXTRA}")
    if backend == "NVSHMEM" and not nvshmem_libraries():
        return "needs NVSHMEM's libraries for torch's NVSHMEM backend: pip install nvidia-nvshmem-cu12 (or -cu13)"
    return None


def worker_environment(same_gpu: bool, folder: str) -> dict[str, str]:
    """What a worker sets before torch starts a backend: multicast off; on one GPU, the overlap;
    TMPDIR in the run's folder, where torch's CUDA backend binds its socket (symm_mem-<pid>, which a
    killed process leaves behind: the folder goes with the run)."""
    return {**MULTICAST_OFF, **(OVERLAPPING if same_gpu else {}), "TMPDIR": folder}


class SymmSide:
    """The torch calls of a symm worker, in one place. Made in the worker after the tool's CUDA
    context; every GPU operation goes on the stream given to on_stream (the tool's)."""

    def __init__(self, device: int, timeout_s: float):
        import torch
        import torch.distributed as dist

        self.torch, self.dist, self.device = torch, dist, cuda_index(device)  # torch's ordinal here (gpu.visible)
        self.timeout_ms = max(1, int(timeout_s * 1000))  # a signal wait traps rather than spin forever
        torch.cuda.set_device(self.device)
        try:
            import torch.distributed._symmetric_memory as symm_mem
        except ImportError as exc:
            raise BenchError(f"symm: torch {torch.__version__} has no torch.distributed._symmetric_memory "
                             f"({exc})") from None
        self.symm = symm_mem
        self.group_name = ""

    @property
    def version(self) -> str:
        return str(self.torch.__version__)

    def use_backend(self, backend: str) -> None:
        """Set the backend before any symmetric allocation; BenchError naming what is missing."""
        symm, torch = self.symm, self.torch
        if not hasattr(symm, "set_backend"):
            if backend == "CUDA":
                return  # the only backend of this torch
            raise BenchError(f"symm: torch {torch.__version__} has no set_backend: no {backend} backend")
        if backend == "NVSHMEM" and hasattr(symm, "is_nvshmem_available") and not symm.is_nvshmem_available():
            raise BenchError(f"symm: torch {torch.__version__} says NVSHMEM is not available here")
        try:
            symm.set_backend(backend)
        except (RuntimeError, ValueError) as exc:
            if backend == "CUDA":
                # torch 2.11 registers no allocation backend by that name; its default for a CUDA
                # tensor is the CUDA one (cuMem memory shared as file descriptors)
                return
            raise BenchError(f"symm: torch {torch.__version__} refuses the {backend} backend: "
                             f"{str(exc).splitlines()[0]}") from None

    def start_group(self, store_path: str, rank: int, world_size: int, backend: str) -> float:
        """The process group (a file store in the run's folder; NCCL for the NCCL backend, which
        takes its communicator, gloo otherwise): seconds it took."""
        dist, torch = self.dist, self.torch
        store = dist.FileStore(store_path, world_size)
        start = time.perf_counter()
        if backend == "NCCL":
            dist.init_process_group("nccl", store=store, rank=rank, world_size=world_size,
                                    device_id=torch.device("cuda", self.device))
        else:
            dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
        seconds = time.perf_counter() - start
        self.group_name = dist.group.WORLD.group_name
        enable = getattr(self.symm, "enable_symm_mem_for_group", None)
        if enable is not None:  # needed before torch 2.9, a deprecated no-op since
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                enable(self.group_name)
        return seconds

    def empty(self, nbytes: int) -> Any:
        return self.symm.empty(max(1, nbytes), dtype=self.torch.uint8, device=f"cuda:{self.device}")

    def rendezvous(self, tensor) -> Any:
        return self.symm.rendezvous(tensor, self.group_name)

    def peer_buffer(self, handle, rank: int, nbytes: int) -> Any:
        """Rank `rank`'s buffer as a tensor of this process (get_buffer)."""
        return handle.get_buffer(rank, (nbytes,), self.torch.uint8)

    @staticmethod
    def ptr(tensor) -> int:
        return tensor.data_ptr()

    @staticmethod
    def copier(dst, src, nbytes: int):
        """f(dst_offset, src_offset): Tensor.copy_ of nbytes on the current stream (cudaMemcpyAsync
        between two contiguous uint8 tensors: the copy engine)."""
        def copy(at: int, frm: int) -> None:
            dst[at:at + nbytes].copy_(src[frm:frm + nbytes])

        return copy

    @contextlib.contextmanager
    def on_stream(self, stream_ptr: int) -> Iterator[None]:
        torch = self.torch
        with torch.cuda.stream(torch.cuda.ExternalStream(stream_ptr, device=torch.device("cuda", self.device))):
            yield

    def signals(self, handle) -> str | None:
        """Why this handle has no stream-ordered put_signal/wait_signal (None: it has them)."""
        missing = [name for name in ("put_signal", "wait_signal") if not hasattr(handle, name)]
        return f"torch {self.torch.__version__}'s handle has no {' or '.join(missing)}" if missing else None

    def put_signal(self, handle, peer: int, channel: int) -> None:
        handle.put_signal(peer, channel, self.timeout_ms)

    def wait_signal(self, handle, peer: int, channel: int) -> None:
        handle.wait_signal(peer, channel, self.timeout_ms)

    def synchronize(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def close(self) -> None:
        if self.dist.is_initialized():
            self.dist.destroy_process_group()
