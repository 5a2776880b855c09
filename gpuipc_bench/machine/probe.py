"""What this machine is: CPU, GPUs, links between them, driver and library versions.

The parent process must never initialise CUDA: a child forked after the parent
touched the CUDA driver fails with cudaErrorInitializationError. So the facts
come from two places:

- NVML (nvidia-ml-py) in the parent: driver version, PCI bus ids, PCIe links,
  MIG mode, NVLink and PCIe topology. NVML creates no CUDA context.
- a short-lived probe child, forked before any worker, that imports CuPy and asks
  the CUDA runtime what it sees (device count and order, properties, peer
  access) and sends a plain dict back through a pipe.

The two are joined by PCI bus id, because the CUDA order (CUDA_DEVICE_ORDER,
CUDA_VISIBLE_DEVICES) is not the NVML order. GpuInfo.index is the CUDA index.
"""

from __future__ import annotations

import dataclasses
import contextlib
import multiprocessing
import os
import platform
import socket
from pathlib import Path
from typing import Any, Callable, Iterable

from gpuipc_bench.errors import UsageError
from gpuipc_bench.machine.nvml import cpu_list_text, decoded_text, nvml_facts, read_timeslices

CUPY_MISSING = 'CuPy is not installed: pip install -e ".[cuda12]" in the checkout (".[cuda13]" for CUDA 13)'
NO_DRIVER = "no NVIDIA driver on this machine (NVML could not be loaded)"
NO_DEVICE = "cudaErrorNoDevice: no CUDA-capable device is detected"

# nvmlGpuTopologyLevel_t -> the words nvidia-smi topo -m uses.


@dataclasses.dataclass(frozen=True)
class GpuInfo:
    index: int  # CUDA device index, as the CUDA runtime numbers them in this environment
    name: str
    uuid: str  # '' if unknown
    pci_bus_id: str  # '0000:17:00.0', '' if unknown
    memory_bytes: int
    compute_capability: str  # '9.0'
    pcie_gen: int | None  # current link
    pcie_width: int | None
    pcie_max_gen: int | None
    pcie_max_width: int | None
    mig_mode: str  # 'enabled', 'disabled' or 'n/a'
    mig_instances: tuple[str, ...] = ()  # MIG device UUIDs when enabled
    mig_profiles: tuple[str, ...] = ()  # each instance's profile ('1g.10gb'), in the same order
    cpus: tuple[int, ...] = ()  # CPUs local to the GPU (NVML affinity), () if unknown
    l2_bytes: int = 0
    # Read-only state that changes what a run measures (never changed by this tool):
    clocks: str = ""  # 'SM 345/1980 MHz, memory 2619/2619 MHz (now/max), application 1980/2619 MHz'
    persistence: str = ""  # 'on', 'off' or ''
    timeslice: str = ""  # the compute-policy time slice: 'default', 'short', 'medium', 'long' or ''

    def pcie_text(self) -> str:
        """'Gen5 x16 (max Gen5 x16)', or '' when NVML said nothing about the link."""
        current = _link_text(self.pcie_gen, self.pcie_width)
        maximum = _link_text(self.pcie_max_gen, self.pcie_max_width)
        if current and maximum:
            return f"{current} (max {maximum})"
        return current or (f"max {maximum}" if maximum else "")


@dataclasses.dataclass(frozen=True)
class Machine:
    hostname: str
    cpu_model: str
    cpu_count: int
    os: str
    python: str
    gpus: tuple[GpuInfo, ...]
    cuda_error: str | None  # why CUDA is unusable, CUDA error name first; None when fine
    driver_version: str | None  # NVIDIA driver, from NVML
    cuda_driver_version: str | None  # '13.0', cudaDriverGetVersion
    cuda_runtime_version: str | None  # cudaRuntimeGetVersion
    cupy_version: str | None
    peer_access: frozenset[tuple[int, int]]  # (i, j) where deviceCanAccessPeer(i, j)
    links: dict[tuple[int, int], str]  # both orders: 'NV18', 'PIX', 'PXB', 'PHB', 'NODE', 'SYS'
    mps: str  # 'running' or 'not running' (best effort)

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def no_gpu_reason(self) -> str:
        """Why there is no usable GPU, in words a user reads: no NVIDIA driver, no GPU, CuPy
        missing, or the CUDA error when it is something else."""
        error = self.cuda_error or ""
        if no_driver(self.driver_version, error):  # before CuPy: installing it would change nothing
            return NO_DRIVER + ("; CuPy is not installed either" if error == CUPY_MISSING else "")
        if error.startswith("CuPy"):
            return error
        if "NoDevice" in error or (not error and not self.gpus):
            return "no NVIDIA GPU found (the driver is there, but CUDA sees no device)"
        return error or "none found"

    def metadata(self) -> dict[str, str]:
        """Flat str -> str facts that travel with every results file (pyperf style).

        The top-level keys are always present ('' when unknown), so readers can rely on them.
        """
        metadata: dict[str, str] = {}
        for collect in (collect_host, collect_versions, collect_gpus, collect_topology):
            collect(self, metadata)
        return metadata

    def check_devices(self, devices: Iterable[int] | None) -> None:
        """Refuse device indices that do not exist here, before any work starts."""
        for device in devices or ():
            if 0 <= device < self.gpu_count:
                continue
            if self.gpu_count == 0:
                why = self.no_gpu_reason
                raise UsageError(f"--devices {device}: this machine has no usable CUDA GPU ({why})")
            plural = "GPU" if self.gpu_count == 1 else "GPUs"
            span = "0" if self.gpu_count == 1 else f"0-{self.gpu_count - 1}"
            raise UsageError(f"--devices {device}: this machine has {self.gpu_count} {plural} ({span})")


# ---------------------------------------------------------------- metadata


def collect_host(machine: Machine, metadata: dict[str, str]) -> None:
    metadata["host"] = machine.hostname
    metadata["cpu"] = machine.cpu_model
    metadata["cpu_count"] = str(machine.cpu_count)
    metadata["os"] = machine.os
    metadata["python"] = machine.python
    # Which GPUs a process sees depends on these; keep them when they are set.
    for var in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        if var in os.environ:
            metadata[var.lower()] = os.environ[var]


def collect_versions(machine: Machine, metadata: dict[str, str]) -> None:
    metadata["cupy"] = machine.cupy_version or ""
    metadata["driver"] = machine.driver_version or ""
    metadata["cuda_driver"] = machine.cuda_driver_version or ""
    metadata["cuda_runtime"] = machine.cuda_runtime_version or ""
    metadata["cuda_error"] = machine.cuda_error or ""
    metadata["mps"] = machine.mps


def collect_gpus(machine: Machine, metadata: dict[str, str]) -> None:
    metadata["gpu_count"] = str(machine.gpu_count)
    for gpu in machine.gpus:
        key = f"gpu.{gpu.index}"
        metadata[f"{key}.name"] = gpu.name
        metadata[f"{key}.uuid"] = gpu.uuid
        metadata[f"{key}.memory_bytes"] = str(gpu.memory_bytes)
        metadata[f"{key}.pci_bus_id"] = gpu.pci_bus_id
        metadata[f"{key}.pcie"] = gpu.pcie_text()
        metadata[f"{key}.cc"] = gpu.compute_capability
        metadata[f"{key}.mig"] = gpu.mig_mode
        metadata[f"{key}.l2_bytes"] = str(gpu.l2_bytes or "")
        metadata[f"{key}.cpus"] = cpu_list_text(gpu.cpus)
        metadata[f"{key}.clocks"] = gpu.clocks
        metadata[f"{key}.persistence"] = gpu.persistence
        metadata[f"{key}.timeslice"] = gpu.timeslice
        if gpu.mig_instances:
            metadata[f"{key}.mig_instances"] = ",".join(gpu.mig_instances)
            metadata[f"{key}.mig_profiles"] = ",".join(gpu.mig_profiles)
    from gpuipc_bench.machine.mig import instances

    for found in instances(machine):  # the rows of MIG pairs name their instances by UUID
        metadata[f"mig.{found.uuid}"] = found.describe()


def collect_topology(machine: Machine, metadata: dict[str, str]) -> None:
    for i in range(machine.gpu_count):
        for j in range(i + 1, machine.gpu_count):
            if (i, j) in machine.links:
                metadata[f"link.{i}-{j}"] = machine.links[(i, j)]
            metadata[f"peer.{i}-{j}"] = _peer_text(machine.peer_access, i, j)


def _peer_text(peer_access: frozenset[tuple[int, int]], i: int, j: int) -> str:
    forward, backward = (i, j) in peer_access, (j, i) in peer_access
    if forward and backward:
        return "yes"
    if forward or backward:  # never seen in practice, but say so rather than round it
        return f"{i}->{j} only" if forward else f"{j}->{i} only"
    return "no"


# ---------------------------------------------------------------- probe


def probe(timeout: float = 60.0, meanwhile: Callable[[], object] | None = None,
          early: Callable[[dict], object] | None = None) -> Machine:
    """Learn what this machine is without initialising CUDA in this process.

    Nothing is cached: each call forks a fresh probe child (a fraction of a second). `meanwhile`:
    work of the caller's done in this process while the child initialises CUDA (no thread: a
    later fork finds no other thread running). `early`: called with NVML's facts as soon as
    they are read, before any thread of this process starts, so that it may fork (the run's
    first process set: harness.head_start).
    """
    import threading

    import_cupy()  # here, not in the child: ~0.5 s of every run's start, and the workers need it anyway
    ctx = multiprocessing.get_context("fork")  # explicit: Python 3.14 changed the default
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_probe_child, args=(sender,), name="gpuipc-bench-probe", daemon=True)
    child.start()
    sender.close()  # so that a child dying without a word reads as EOF here
    timeslices: dict[int, str] = {}
    slices = threading.Thread(target=lambda: timeslices.update(read_timeslices()), name="gpuipc-bench-timeslices",
                              daemon=True)
    try:
        nvml = nvml_facts()  # while the child starts CUDA
        if early is not None:
            early(nvml)  # (it may fork: no thread of ours runs yet)
        # `nvidia-smi compute-policy` (a few tenths of a second) beside the probe, not after it; the
        # thread starts after the forks and is joined before any other (no fork while it runs)
        slices.start()
        if meanwhile is not None:
            meanwhile()
        cuda = _receive(receiver, child, timeout)
    finally:
        receiver.close()
        if child.is_alive():
            child.kill()
        child.join()
        if slices.ident is not None:
            slices.join(15)
    return _assemble(nvml, cuda, timeslices if cuda.get("devices") else {})


def import_cupy() -> None:
    """CuPy imported once in this process, before anything is forked from it (the probe child, the
    workers), instead of in every forked process (0.5-1.2 s each on an H100 node). Importing CuPy
    starts no CUDA: the forks stay safe. No CuPy, or a broken one: the child or the workers say so."""
    with contextlib.suppress(Exception):
        import cupy  # noqa: F401


def _receive(receiver, child, timeout: float) -> dict:
    if not receiver.poll(timeout):
        return {"error": f"the CUDA probe timed out after {timeout:g} s (a CUDA call hung; is the driver healthy?)"}
    try:
        return receiver.recv()
    except EOFError:
        child.join(5)
        return {"error": f"the CUDA probe process died before reporting (exit code {child.exitcode})"}


def _probe_child(sender) -> None:
    """Runs in the forked child: report, then leave without running the parent's exit handlers."""
    code = 0
    try:
        try:
            facts = _cuda_facts()
        except Exception as exc:  # a bug here must still come back as a sentence
            facts = {"error": f"{type(exc).__name__}: {exc}"}
        sender.send(facts)
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _cuda_facts() -> dict:
    """Ask the CUDA runtime what it sees. Runs only in the probe child; returns plain data."""
    facts: dict[str, Any] = {"devices": [], "peer": []}
    try:
        import cupy
        from cupy.cuda import runtime
    except ImportError as exc:
        facts["error"] = CUPY_MISSING if exc.name == "cupy" else f"CuPy cannot be imported: {exc}"
        return facts
    facts["cupy_version"] = cupy.__version__

    # Each call on its own: the versions are worth having even when there is no device.
    try:
        facts["driver"] = runtime.driverGetVersion()
    except runtime.CUDARuntimeError:
        pass
    try:
        facts["runtime"] = runtime.runtimeGetVersion()
    except runtime.CUDARuntimeError:
        pass
    try:
        count = runtime.getDeviceCount()
        for i in range(count):
            facts["devices"].append(_device_properties(runtime.getDeviceProperties(i)))
        for i in range(count):
            for j in range(count):
                if i != j and runtime.deviceCanAccessPeer(i, j):
                    facts["peer"].append((i, j))
    except runtime.CUDARuntimeError as exc:
        facts["error"] = str(exc)  # CuPy writes 'cudaErrorName: description'
        facts["devices"], facts["peer"] = [], []
        return facts
    if count == 0:
        facts["error"] = NO_DEVICE
    return facts


def _device_properties(props: dict) -> dict:
    """The few cudaDeviceProp fields we use, as plain str/int."""
    uuid = props.get("uuid", b"")
    return {
        "name": decoded_text(props.get("name", "")),
        "uuid": _format_uuid(uuid) if isinstance(uuid, bytes) and len(uuid) == 16 else "",
        "memory": int(props.get("totalGlobalMem", 0)),
        "cc": f"{props.get('major', 0)}.{props.get('minor', 0)}",
        "l2_bytes": int(props.get("l2CacheSize", 0)),
        "bus_id": "{:04x}:{:02x}:{:02x}.0".format(
            props.get("pciDomainID", 0), props.get("pciBusID", 0), props.get("pciDeviceID", 0)
        ),
    }


def _format_uuid(raw: bytes) -> str:
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


# ---------------------------------------------------------------- assembly


def _assemble(nvml: dict, cuda: dict, timeslices: dict[int, str]) -> Machine:
    gpus = []
    bus_ids = []
    for index, dev in enumerate(cuda.get("devices", [])):
        extra = nvml["gpus"].get(dev["bus_id"], {})
        bus_ids.append(dev["bus_id"])
        gpus.append(
            GpuInfo(
                index=index,
                name=dev["name"],
                uuid=extra.get("uuid") or dev["uuid"],
                pci_bus_id=dev["bus_id"],
                memory_bytes=dev["memory"],
                compute_capability=dev["cc"],
                pcie_gen=extra.get("pcie_gen"),
                pcie_width=extra.get("pcie_width"),
                pcie_max_gen=extra.get("pcie_max_gen"),
                pcie_max_width=extra.get("pcie_max_width"),
                mig_mode=extra.get("mig_mode", "n/a"),
                mig_instances=extra.get("mig_instances", ()),
                mig_profiles=extra.get("mig_profiles", ()),
                cpus=extra.get("cpus", ()),
                l2_bytes=dev.get("l2_bytes", 0),
                clocks=extra.get("clocks", ""),
                persistence=extra.get("persistence", ""),
                timeslice=timeslices.get(index, "") if len(timeslices) == len(cuda.get("devices", [])) else "",
            )
        )
    links = {}
    for i, a in enumerate(bus_ids):
        for j, b in enumerate(bus_ids):
            if (a, b) in nvml["links"]:
                links[(i, j)] = nvml["links"][(a, b)]
    return Machine(
        hostname=socket.gethostname(),
        cpu_model=_cpu_model(),
        cpu_count=os.cpu_count() or 1,
        os=platform.platform(),
        python=f"{platform.python_implementation()} {platform.python_version()}",
        gpus=tuple(gpus),
        # no driver at all: said so (the runtime's words blame an 'insufficient' one)
        cuda_error=NO_DRIVER if nvml["driver"] is None and "InsufficientDriver" in cuda.get("error", "")
        else cuda.get("error"),
        driver_version=nvml["driver"],
        cuda_driver_version=_cuda_version(cuda.get("driver")),
        cuda_runtime_version=_cuda_version(cuda.get("runtime")),
        cupy_version=cuda.get("cupy_version"),
        peer_access=frozenset(tuple(p) for p in cuda.get("peer", [])),
        links=links,
        mps=_mps_state(),
    )


def no_driver(driver_version: str | None, cuda_error: str) -> bool:
    """Whether there is no NVIDIA driver at all: NVML could not be loaded and CUDA (or CuPy)
    said nothing more telling than 'insufficient driver', 'no device' or 'not installed'."""
    return driver_version is None and (not cuda_error or cuda_error == NO_DRIVER or cuda_error == CUPY_MISSING
                                       or "InsufficientDriver" in cuda_error or "NoDevice" in cuda_error)


def _cuda_version(value: int | None) -> str | None:
    """12040 -> '12.4'. 0 means no driver at all."""
    if not value:
        return None
    return f"{value // 1000}.{value % 1000 // 10}"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _mps_state() -> str:
    """'running' where CUDA initialised in this process would become an MPS client (one rule:
    modes.daemon.serves_this_process); 'running elsewhere' where an MPS daemon of another pipe
    directory runs; else 'not running'."""
    from gpuipc_bench.modes.daemon import proc_stat, serves_this_process

    if serves_this_process():
        return "running"
    for entry in Path("/proc").glob("[0-9]*"):
        try:  # a zombie (Z: exited, not yet reaped) runs nothing
            comm, fields = proc_stat(entry.name)
            if comm.startswith("nvidia-cuda-mps") and fields[0] != "Z":
                return "running elsewhere"
        except (OSError, IndexError):
            continue  # the process went away, or is not ours to read
    return "not running"


def _link_text(gen: int | None, width: int | None) -> str:
    if gen is None and width is None:
        return ""
    return f"Gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"
