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
import multiprocessing
import os
import platform
import socket
import stat
from pathlib import Path
from typing import Any, Callable, Iterable

from gpuipc_bench.errors import UsageError

CUPY_MISSING = 'CuPy is not installed (pip install "gpuipc-bench[cuda12]", or [cuda13] for a CUDA 13 driver)'
NO_DEVICE = "cudaErrorNoDevice: no CUDA-capable device is detected"

# nvmlGpuTopologyLevel_t -> the words nvidia-smi topo -m uses.
_TOPOLOGY_WORDS = {0: "INT", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


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
        if error.startswith("CuPy"):
            return error
        if self.driver_version is None and ("InsufficientDriver" in error or "NoDevice" in error or not error):
            return "no NVIDIA driver on this machine (NVML could not be loaded)"
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


def probe(timeout: float = 60.0) -> Machine:
    """Learn what this machine is without initialising CUDA in this process.

    Nothing is cached: each call forks a fresh probe child (a fraction of a second).
    """
    ctx = multiprocessing.get_context("fork")  # explicit: Python 3.14 changed the default
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_probe_child, args=(sender,), name="gpuipc-bench-probe", daemon=True)
    child.start()
    sender.close()  # so that a child dying without a word reads as EOF here
    try:
        nvml = _nvml_facts()  # while the child imports CuPy
        cuda = _receive(receiver, child, timeout)
    finally:
        receiver.close()
        if child.is_alive():
            child.kill()
        child.join()
    return _assemble(nvml, cuda)


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
        "name": _text(props.get("name", "")),
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


# ---------------------------------------------------------------- NVML


def _nvml_facts() -> dict:
    """Driver version and per-GPU facts keyed by normalised PCI bus id. Empty without NVML."""
    facts: dict[str, Any] = {"driver": None, "gpus": {}, "links": {}}
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no library, no driver loaded, no permission: no NVML facts
        return facts
    try:
        call = _nvml_call(pynvml)
        facts["driver"] = _text(call(pynvml.nvmlSystemGetDriverVersion)) or None
        handles = {}
        for k in range(call(pynvml.nvmlDeviceGetCount) or 0):
            handle = call(pynvml.nvmlDeviceGetHandleByIndex, k)
            pci = call(pynvml.nvmlDeviceGetPciInfo, handle) if handle is not None else None
            if pci is None:
                continue
            bus_id = normalise_bus_id(_text(pci.busId))
            handles[bus_id] = handle
            facts["gpus"][bus_id] = _nvml_gpu(pynvml, call, handle)
        facts["links"] = _nvml_links(pynvml, call, handles)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return facts


def _nvml_call(pynvml) -> Callable[..., Any]:
    """call(fn, *args): fn's answer, or None when this GPU or driver does not support it."""

    def call(fn, *args):
        try:
            return fn(*args)
        except pynvml.NVMLError:
            return None

    return call


def _nvml_gpu(pynvml, call, handle) -> dict:
    mig_mode, mig_instances = "n/a", []
    modes = call(pynvml.nvmlDeviceGetMigMode, handle)
    if modes is not None:
        mig_mode = "enabled" if modes[0] == pynvml.NVML_DEVICE_MIG_ENABLE else "disabled"
    if mig_mode == "enabled":
        for k in range(call(pynvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
            mig = call(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, k)
            uuid = _text(call(pynvml.nvmlDeviceGetUUID, mig)) if mig is not None else ""
            if uuid:
                mig_instances.append(uuid)
    return {
        "cpus": _nvml_cpus(pynvml, call, handle),
        "clocks": _nvml_clocks(pynvml, call, handle),
        "persistence": {1: "on", 0: "off"}.get(call(pynvml.nvmlDeviceGetPersistenceMode, handle), ""),
        "uuid": _text(call(pynvml.nvmlDeviceGetUUID, handle)),
        "pcie_gen": call(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        "pcie_width": call(pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
        "pcie_max_gen": call(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
        "pcie_max_width": call(pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
        "mig_mode": mig_mode,
        "mig_instances": tuple(mig_instances),
    }


def _nvml_cpus(pynvml, call, handle) -> tuple[int, ...]:
    """The CPUs local to the GPU (nvmlDeviceGetCpuAffinity, 64-bit words, CPU 0 in bit 0)."""
    words = call(pynvml.nvmlDeviceGetCpuAffinity, handle, max(1, -(-(os.cpu_count() or 64) // 64)))
    cpus = [64 * w + b for w, word in enumerate(words or ()) for b in range(64) if int(word) >> b & 1]
    return tuple(cpus)


def _nvml_clocks(pynvml, call, handle) -> str:
    """Current, maximum and application clocks: the SM idles at a fraction of its maximum, and an
    application clock setting changes what every figure means."""
    def clock(fn, kind):
        value = call(fn, handle, kind)
        return "?" if value is None else str(value)

    sm, mem = pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM
    return (f"SM {clock(pynvml.nvmlDeviceGetClockInfo, sm)}/{clock(pynvml.nvmlDeviceGetMaxClockInfo, sm)} MHz, "
            f"memory {clock(pynvml.nvmlDeviceGetClockInfo, mem)}/{clock(pynvml.nvmlDeviceGetMaxClockInfo, mem)} MHz "
            f"(now/max), application {clock(pynvml.nvmlDeviceGetApplicationsClock, sm)}/"
            f"{clock(pynvml.nvmlDeviceGetApplicationsClock, mem)} MHz")


def cpu_list_text(cpus) -> str:
    """(0, 1, 2, 3, 8) -> '0-3,8'."""
    out, run = [], []
    for cpu in sorted(cpus):
        if run and cpu == run[-1] + 1:
            run.append(cpu)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [cpu]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def _timeslices() -> dict[int, str]:
    """GPU index (nvidia-smi's) -> its compute-policy time slice, read with
    `nvidia-smi compute-policy -l` (read only); {} when unavailable."""
    import shutil
    import subprocess

    binary = shutil.which("nvidia-smi")
    if not binary:
        return {}
    try:
        out = subprocess.run([binary, "compute-policy", "-l"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    found = {}
    for line in out.splitlines():
        parts = line.strip("| \t").split()
        if len(parts) >= 3 and parts[0].isdigit() and parts[1].lower() == "timeslice":
            found[int(parts[0])] = parts[2].lower()
    return found


def _nvml_links(pynvml, call, handles: dict) -> dict[tuple[str, str], str]:
    """Between every pair of GPUs (by bus id): 'NV<k>' when NVLink joins them, else the PCIe level."""
    direct: dict[tuple[str, str], int] = {}  # NVLink lanes straight to another GPU
    switched: dict[str, int] = {}  # NVLink lanes to an NVSwitch (the far end is not a GPU)
    for bus_id, handle in handles.items():
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            state = call(pynvml.nvmlDeviceGetNvLinkState, handle, link)
            if state != pynvml.NVML_FEATURE_ENABLED:
                continue  # inactive, absent, or no NVLink on this GPU
            remote = call(pynvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
            far = normalise_bus_id(_text(remote.busId)) if remote is not None else ""
            if far in handles:
                direct[(bus_id, far)] = direct.get((bus_id, far), 0) + 1
            else:
                switched[bus_id] = switched.get(bus_id, 0) + 1

    links = {}
    for a, ha in handles.items():
        for b, hb in handles.items():
            if a == b:
                continue
            # Through NVSwitch every pair talks over all its links, as nvidia-smi topo shows.
            nvlinks = direct.get((a, b), 0) + min(switched.get(a, 0), switched.get(b, 0))
            if nvlinks:
                links[(a, b)] = f"NV{nvlinks}"
                continue
            level = call(pynvml.nvmlDeviceGetTopologyCommonAncestor, ha, hb)
            if level is not None:
                links[(a, b)] = _TOPOLOGY_WORDS.get(level, str(level))
    return links


def normalise_bus_id(bus_id: str) -> str:
    """'00000000:17:00.0' (NVML) and '0000:17:00.0' (CUDA) -> '0000:17:00.0'."""
    bus_id = bus_id.strip().lower()
    parts = bus_id.split(":")
    if len(parts) != 3:
        return bus_id
    try:
        domain = int(parts[0], 16)
    except ValueError:
        return bus_id
    return f"{domain:04x}:{parts[1]}:{parts[2]}"


# ---------------------------------------------------------------- assembly


def _assemble(nvml: dict, cuda: dict) -> Machine:
    timeslices = _timeslices() if cuda.get("devices") else {}
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
        cuda_error=cuda.get("error"),
        driver_version=nvml["driver"],
        cuda_driver_version=_cuda_version(cuda.get("driver")),
        cuda_runtime_version=_cuda_version(cuda.get("runtime")),
        cupy_version=cuda.get("cupy_version"),
        peer_access=frozenset(tuple(p) for p in cuda.get("peer", [])),
        links=links,
        mps=_mps_state(),
    )


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
    """Best effort: an MPS control daemon we can see, or its control pipe."""
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip().startswith("nvidia-cuda-mps"):
                return "running"
        except OSError:
            continue  # the process went away, or is not ours to read
    pipe_dir = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    try:
        if stat.S_ISFIFO(os.stat(os.path.join(pipe_dir, "control")).st_mode):
            return "running"
    except OSError:
        pass
    return "not running"


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode(errors="replace").rstrip("\x00")
    return str(value)


def _link_text(gen: int | None, width: int | None) -> str:
    if gen is None and width is None:
        return ""
    return f"Gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"


# ---------------------------------------------------------------- `gpuipc-bench info`


def render_info(machine: Machine, console) -> None:
    """What `gpuipc-bench info` prints."""
    from rich.markup import escape
    from rich.table import Table

    # Every fact is escaped: what a machine or an error says is text, never rich markup
    # (CuPy's install advice names the extras "[cuda12]" and "[cuda13]").
    console.print(
        f"[bold]CPU[/] {escape(machine.cpu_model)} ({machine.cpu_count} logical cores) · "
        f"host {escape(machine.hostname)} · {escape(machine.os)} · {escape(machine.python)}",
        highlight=False,
    )

    if machine.gpu_count == 0:
        why = machine.no_gpu_reason
        console.print(f"[bold red]No usable CUDA GPU[/]: {escape(why)}", highlight=False)
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None:
            console.print(f"  (CUDA_VISIBLE_DEVICES={escape(repr(visible))} limits what CUDA sees)", highlight=False)
    else:
        table = Table(title="GPUs", title_justify="left")
        for column in ("#", "name", "memory", "CC", "PCIe current (max)", "MIG", "PCI bus id"):
            table.add_column(column, justify="right" if column in ("#", "memory") else "left")
        for gpu in machine.gpus:
            mig = gpu.mig_mode
            if gpu.mig_instances:
                mig += f" ({len(gpu.mig_instances)} instances)"
            table.add_row(*(escape(cell) for cell in (
                str(gpu.index),
                gpu.name,
                f"{gpu.memory_bytes / 2**30:.1f} GiB",
                gpu.compute_capability,
                gpu.pcie_text() or "n/a",
                mig,
                gpu.pci_bus_id or "n/a",
            )))
        console.print(table)
        _render_mig(machine, console)
        if any(g.pcie_gen and g.pcie_max_gen and g.pcie_gen < g.pcie_max_gen for g in machine.gpus):
            console.print("  [dim]An idle GPU lowers its PCIe link speed; it returns to max under load.[/]")

    if machine.gpu_count > 1:
        _render_topology(machine, console)

    console.print(
        f"[bold]Driver[/] {escape(machine.driver_version or 'n/a')} · "
        f"[bold]CUDA driver[/] {escape(machine.cuda_driver_version or 'n/a')} · "
        f"[bold]CUDA runtime[/] {escape(machine.cuda_runtime_version or 'n/a')} · "
        f"[bold]CuPy[/] {escape(machine.cupy_version or 'not installed')}",
        highlight=False,
    )
    console.print(f"[bold]MPS[/] {escape(machine.mps)}", highlight=False)


def _render_mig(machine: Machine, console) -> None:
    """The MIG instances of each GPU that has them, one UUID a line."""
    from rich.markup import escape

    listed = False
    for gpu in machine.gpus:
        if not gpu.mig_instances:
            continue
        listed = True
        console.print(f"[bold]MIG instances of GPU {gpu.index}[/] ({len(gpu.mig_instances)})", highlight=False)
        for uuid in gpu.mig_instances:
            console.print(f"  {escape(uuid)}", highlight=False)
    if listed:
        console.print("  [dim]run on one MIG instance with --devices MIG-<uuid> (CUDA enumerates one "
                      "instance per process; IPC between instances is not supported).[/]", highlight=False)
    elif any(g.mig_mode == "enabled" for g in machine.gpus):
        console.print("  [dim]MIG is enabled, but NVML listed no instance (none created, or not visible).[/]",
                      highlight=False)


def _render_topology(machine: Machine, console) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="Topology (link, peer access)", title_justify="left")
    table.add_column("")
    for j in range(machine.gpu_count):
        table.add_column(f"GPU{j}", justify="center")
    for i in range(machine.gpu_count):
        cells = []
        for j in range(machine.gpu_count):
            if i == j:
                cells.append("X")
                continue
            peer = "✓" if (i, j) in machine.peer_access else "✗"
            cells.append(escape(f"{machine.links.get((i, j), '?')} {peer}"))
        table.add_row(f"GPU{i}", *cells)
    console.print(table)
    console.print(
        "  [dim]NV<k>: k NVLinks · PIX/PXB: PCIe switches · PHB: host bridge · "
        "NODE: one NUMA node · SYS: across sockets · ✓: peer access row->column[/]"
    )
