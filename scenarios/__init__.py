"""The scenarios, in the order `list` shows and `run` runs them.

An explicit registry, not discovery: an import error fails loudly, and the
order is stable. To add a path, write a module here and add it to the list.
"""

from gpuipc_bench.engine.scenario import Scenario
from gpuipc_bench.scenarios import (
    barrier, handles, host, ipc, latency, mempool, mmap, nccl, nixl, nvshmem, peer, sharing, staging, symm,
    torch_share, vmm,
)

_ORDER: list[Scenario] = [
    staging.StagingScenario(),
    ipc.IpcScenario(),
    vmm.VmmScenario(),
    mempool.MempoolScenario(),
    mempool.HostPoolScenario(),
    mmap.MmapScenario(),
    latency.LatencyScenario(),  # in the paths' process set (before torch's own processes end it)
    peer.PeerScenario(),
    nccl.NcclScenario(),
    torch_share.TorchScenario(),
    nvshmem.NvshmemScenario(),
    sharing.SharingScenario(),
    host.HostScenario(),
    barrier.BarrierScenario(),
    handles.HandlesScenario(),
    torch_share.TorchSizesScenario(),
    *nccl.TRANSPORT_SCENARIOS,
    nixl.NixlScenario(),
    nixl.NixlHostScenario(),
    nixl.NixlReadScenario(),
    nixl.NixlHostReadScenario(),
    *nixl.FORCED_SCENARIOS,
    *symm.SCENARIOS,  # PyTorch symmetric memory, one scenario per backend: named with -s
]

SCENARIOS: dict[str, Scenario] = {s.name: s for s in _ORDER}
