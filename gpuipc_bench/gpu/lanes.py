"""The known copies that prove the lane counters (gpuipc_bench.machine.lanes.prove): a GPU's
buffer to pinned host memory and back (PCIe), and one GPU's buffer to another's (their link,
where peer access is on both ways in this process; without it the driver stages the copy
through host memory). Each copy is synchronous: it has ended when the call returns."""

from __future__ import annotations

from typing import Any, Callable

from gpuipc_bench.gpu.errors import cuda_call
from gpuipc_bench.gpu.memory import DeviceBuffer, PinnedHostBuffer, on_device, rt
from gpuipc_bench.gpu.visible import cuda_index

MEMCPY_HOST_TO_DEVICE, MEMCPY_DEVICE_TO_HOST = 1, 2


class KnownCopies:
    """copy(kind, a, b): 'd2h' and 'h2d' on GPU a, 'peer' from GPU a to GPU b, `nbytes` each; with
    `kernel_gpu` (device -> its gpu.device.Gpu), 'd2h-sm' and 'h2d-sm' too: the same copies made by
    the tool's copy kernel on GPU a, loading or storing pinned host memory."""

    def __init__(self, devices: list[int], nbytes: int, kernel_gpu: Callable[[int], Any] | None = None):
        self.nbytes, self.kernel_gpu = int(nbytes), kernel_gpu
        self.buffers: dict[int, DeviceBuffer] = {}
        self.host: PinnedHostBuffer | None = None
        try:
            for dev in devices:
                self.buffers[dev] = DeviceBuffer(self.nbytes, dev)
            self.host = PinnedHostBuffer(self.nbytes, devices[0])
        except BaseException:
            self.close()
            raise

    def __call__(self, kind: str, a: int, b: int) -> None:
        host = self.host.ptr if self.host is not None else 0
        with on_device(a):
            if kind == "d2h":
                with cuda_call("cudaMemcpy", a):
                    rt().memcpy(host, self.buffers[a].ptr, self.nbytes, MEMCPY_DEVICE_TO_HOST)
            elif kind == "h2d":
                with cuda_call("cudaMemcpy", a):
                    rt().memcpy(self.buffers[a].ptr, host, self.nbytes, MEMCPY_HOST_TO_DEVICE)
            elif kind in ("d2h-sm", "h2d-sm") and self.kernel_gpu is not None:
                gpu = self.kernel_gpu(a)
                mapped = self.host.dptr if self.host is not None else 0  # the host buffer as the kernel sees it
                dst, src = (mapped, self.buffers[a].ptr) if kind == "d2h-sm" else (self.buffers[a].ptr, mapped)
                gpu.copy_launcher(self.nbytes, "sm")(dst, src)
                gpu.synchronize()
            elif kind == "peer":
                with cuda_call("cudaMemcpyPeer", a):
                    rt().memcpyPeer(self.buffers[b].ptr, cuda_index(b), self.buffers[a].ptr, cuda_index(a), self.nbytes)
            else:
                raise ValueError(f"unknown copy {kind!r}")
        for dev in {a, b}:  # cudaMemcpyPeer returns before the copy has ended
            with on_device(dev), cuda_call("cudaDeviceSynchronize", dev):
                rt().deviceSynchronize()

    def close(self) -> None:
        for buffer in self.buffers.values():
            buffer.close()
        self.buffers = {}
        if self.host is not None:
            self.host.close()
            self.host = None
