"""What each path/variant does to move the bytes, declared once: the mechanism that names a
class of figures in the answer, which side issues the copy (push or pull), what it needs
beyond CUDA (torch, NVSHMEM, NCCL), and whether the hand-over is signalled by a GPU kernel.

Two figures with the same mechanism are the same copy reached through different APIs; where
time per transfer is below twice the per-call floor "% of the ceiling" tells nothing, so the
declared mechanism (not the ceiling) says which figures may form one class there
(classes.py). A path/variant missing here is its own mechanism, named by its label.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Mechanism:
    name: str  # "IPC mapping, copy engine"
    direction: str = ""  # 'pull' (the consumer copies), 'push' (the producer does), '' (neither)
    needs: tuple[str, ...] = ()  # what beyond CUDA it needs: 'torch', 'nvshmem', 'nccl'
    gpu_signalled: bool = False  # the hand-over is a kernel polling on both GPUs (a latency row)
    # what hands a message over where it is not the tool's own signal (an event or a flag between the two
    # processes): a hand-off through it is another mechanism, whatever copies the bytes
    handover: str = ""
    cost: str = ""  # what it costs besides the transfer, said where it is chosen


IPC_CE = "IPC mapping, copy engine"
IPC_SM = "IPC mapping, kernel copy"
PEER_CE = "peer copy engine"
PEER_SM = "peer kernel copy"
RESIDENT = "a polling kernel on both GPUs"

_TABLE: dict[tuple[str, str], Mechanism] = {}


def _declare(paths: tuple[str, ...], variant: str, mechanism: Mechanism) -> None:
    for path in paths:
        _TABLE[(path, variant)] = mechanism


_declare(("ipc", "vmm", "mempool"), "ce", Mechanism(IPC_CE, "pull"))
_declare(("ipc", "vmm", "mempool"), "push", Mechanism(IPC_CE, "push"))
_declare(("ipc", "vmm", "mempool"), "sm", Mechanism(IPC_SM, "pull"))
# torch hands every tensor over through its multiprocessing queue (a pickled handle and a host round trip)
TORCH_QUEUE = "a torch.multiprocessing queue"
_declare(("torch",), "caching", Mechanism(IPC_CE, "pull", ("torch",), handover=TORCH_QUEUE))
_declare(("torch",), "expandable", Mechanism(IPC_CE, "pull", ("torch",), handover=TORCH_QUEUE))
# torch's symmetric memory: the consumer copies from the peer's buffer, mapped into its process by
# every backend (CUDA: cuMem handles; NVSHMEM: its heap; NCCL: its window), as IPC maps it.
_declare(("symm",), "cuda-ce", Mechanism(IPC_CE, "pull", ("torch",)))
_declare(("symm",), "cuda-sm", Mechanism(IPC_SM, "pull", ("torch",)))
_declare(("symm",), "nvshmem-ce", Mechanism(IPC_CE, "pull", ("torch", "nvshmem")))
_declare(("symm",), "nvshmem-sm", Mechanism(IPC_SM, "pull", ("torch", "nvshmem")))
_declare(("symm",), "nccl-ce", Mechanism(IPC_CE, "pull", ("torch", "nccl")))
_declare(("symm",), "nccl-sm", Mechanism(IPC_SM, "pull", ("torch", "nccl")))
_declare(("peer",), "ce", Mechanism(PEER_CE, "pull"))
_declare(("peer",), "push", Mechanism(PEER_CE, "push"))
_declare(("peer",), "sm", Mechanism(PEER_SM, "pull"))
_declare(("staging",), "pinned", Mechanism("two hops via pinned host, GPU-ordered"))
_declare(("staging",), "pipelined", Mechanism("two hops via pinned host, pipelined"))
_declare(("staging",), "pinned-hostsync", Mechanism("two hops via pinned host, host-synced"))
_declare(("staging",), "pageable", Mechanism("two hops via pageable host memory"))
_declare(("hostpool",), "host-pool", Mechanism("two hops via a pinned host pool"))
_declare(("mmap",), "dma", Mechanism("two copy-engine hops via mapped host memory"))
_declare(("mmap",), "zero-copy", Mechanism("kernel loads and stores to mapped host memory"))
_declare(("mmap",), "d2h", Mechanism("copy engine to mapped host memory"))
_declare(("mmap",), "h2d", Mechanism("copy engine from mapped host memory"))
_declare(("mmap",), "zero-copy-read", Mechanism("kernel loads from mapped host memory"))
_declare(("mmap",), "zero-copy-write", Mechanism("kernel stores to mapped host memory"))
_declare(("nccl",), "send-recv", Mechanism("NCCL send/recv kernels", needs=("nccl",)))
_declare(("nccl",), "sendrecv", Mechanism("NCCL send/recv kernels, one message at a time", needs=("nccl",)))
# On one node NVSHMEM maps the peer's memory through CUDA IPC, and a put or get on a stream is
# a copy-engine copy (its ceiling is the same d2d copy, nvshmem.py).
_declare(("nvshmem",), "put", Mechanism(IPC_CE, "push", ("nvshmem",)))
_declare(("nvshmem",), "get", Mechanism(IPC_CE, "pull", ("nvshmem",)))
# GPU-signalled hand-offs: one-way latency rows (round trip / 2) that hand a message over.
_declare(("ipc", "peer"), "device-pingpong",
         Mechanism("kernel ping-pong, IPC-mapped flags", gpu_signalled=True, cost=RESIDENT))
_declare(("ipc", "peer"), "device-ll",
         Mechanism("kernel ping-pong, IPC-mapped LL words", gpu_signalled=True, cost=RESIDENT))
_declare(("nvshmem",), "device-putsig",
         Mechanism("NVSHMEM put with signal", needs=("nvshmem",), gpu_signalled=True, cost=RESIDENT))


def mechanism(path: str, variant: str) -> Mechanism:
    """The declared mechanism of path/variant; one named by the label when none is declared."""
    found = _TABLE.get((str(path), str(variant)))
    return found if found is not None else Mechanism(f"{path}/{variant}")


def declared(path: str, variant: str) -> bool:
    return (str(path), str(variant)) in _TABLE


def gpu_signalled(path: str, variant: str) -> bool:
    """Whether path/variant is a GPU-signalled hand-off (its latency rows are hand-off candidates)."""
    return mechanism(path, variant).gpu_signalled


def declaration_order(path: str, variant: str) -> int:
    keys = list(_TABLE)
    key = (str(path), str(variant))
    return keys.index(key) if key in _TABLE else len(keys)
