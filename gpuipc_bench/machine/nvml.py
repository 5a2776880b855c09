"""What NVML says about the GPUs, without a CUDA context: driver, PCI bus ids, PCIe links,
MIG mode, clocks, the CPUs near each GPU, NVLink and PCIe topology (gpuipc_bench.machine.probe
assembles them with the CUDA facts)."""

from __future__ import annotations

import os
import re
from typing import Any, Callable

_TOPOLOGY_WORDS = {0: "INT", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def decoded_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode(errors="replace").rstrip("\x00")
    return str(value)


def nvml_facts() -> dict:
    """Driver version and per-GPU facts keyed by normalised PCI bus id. Empty without NVML."""
    facts: dict[str, Any] = {"driver": None, "gpus": {}, "links": {}}
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no library, no driver loaded, no permission: no NVML facts
        return facts
    try:
        call = nvml_call(pynvml)
        facts["driver"] = decoded_text(call(pynvml.nvmlSystemGetDriverVersion)) or None
        handles = {}
        for k in range(call(pynvml.nvmlDeviceGetCount) or 0):
            handle = call(pynvml.nvmlDeviceGetHandleByIndex, k)
            pci = call(pynvml.nvmlDeviceGetPciInfo, handle) if handle is not None else None
            if pci is None:
                continue
            bus_id = normalise_bus_id(decoded_text(pci.busId))
            handles[bus_id] = handle
            facts["gpus"][bus_id] = _nvml_gpu(pynvml, call, handle)
        facts["links"] = nvml_links(pynvml, call, handles)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return facts


def nvml_call(pynvml) -> Callable[..., Any]:
    """call(fn, *args): fn's answer, or None when this GPU or driver does not support it."""

    def call(fn, *args):
        try:
            return fn(*args)
        except pynvml.NVMLError:
            return None

    return call


def _nvml_gpu(pynvml, call, handle) -> dict:
    mig_mode, mig_instances, mig_profiles = "n/a", [], []
    modes = call(pynvml.nvmlDeviceGetMigMode, handle)
    if modes is not None:
        mig_mode = "enabled" if modes[0] == pynvml.NVML_DEVICE_MIG_ENABLE else "disabled"
    if mig_mode == "enabled":
        for k in range(call(pynvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
            mig = call(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, k)
            uuid = decoded_text(call(pynvml.nvmlDeviceGetUUID, mig)) if mig is not None else ""
            if uuid:
                mig_instances.append(uuid)
                mig_profiles.append(mig_profile(decoded_text(call(pynvml.nvmlDeviceGetName, mig))))
    return {
        "cpus": _nvml_cpus(pynvml, call, handle),
        "clocks": _nvml_clocks(pynvml, call, handle),
        "persistence": {1: "on", 0: "off"}.get(call(pynvml.nvmlDeviceGetPersistenceMode, handle), ""),
        "uuid": decoded_text(call(pynvml.nvmlDeviceGetUUID, handle)),
        "pcie_gen": call(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        "pcie_width": call(pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
        "pcie_max_gen": call(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
        "pcie_max_width": call(pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
        "mig_mode": mig_mode,
        "mig_instances": tuple(mig_instances),
        "mig_profiles": tuple(mig_profiles),
    }


_PROFILE_RE = re.compile(r"\b(\d+g\.\d+gb(?:\+\w+)?)", re.IGNORECASE)


def mig_profile(name: str) -> str:
    """'NVIDIA H100 80GB HBM3 MIG 1g.10gb' (NVML's name of a MIG device) -> '1g.10gb'; the
    name as it is when it names no profile ('' when NVML gave none)."""
    found = _PROFILE_RE.search(name or "")
    return found.group(1).lower() if found else (name or "").strip()


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
    out: list[str] = []
    run: list[int] = []
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


def read_timeslices() -> dict[int, str]:
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


def nvml_links(pynvml, call, handles: dict) -> dict[tuple[str, str], str]:
    """Between every pair of GPUs (by bus id): 'NV<k>' when NVLink joins them, else the PCIe level."""
    direct: dict[tuple[str, str], int] = {}  # NVLink lanes straight to another GPU
    switched: dict[str, int] = {}  # NVLink lanes to an NVSwitch (the far end is not a GPU)
    for bus_id, handle in handles.items():
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            state = call(pynvml.nvmlDeviceGetNvLinkState, handle, link)
            if state != pynvml.NVML_FEATURE_ENABLED:
                continue  # inactive, absent, or no NVLink on this GPU
            remote = call(pynvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
            far = normalise_bus_id(decoded_text(remote.busId)) if remote is not None else ""
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


def handles_by_bus_id(pynvml) -> dict[str, Any]:
    """NVML's device handles, keyed by normalised PCI bus id (NVML initialised by the caller)."""
    handles = {}
    for k in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(k)
        handles[normalise_bus_id(decoded_text(pynvml.nvmlDeviceGetPciInfo(handle).busId))] = handle
    return handles
