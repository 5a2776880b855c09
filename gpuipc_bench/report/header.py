"""The words of a report's header: the machine a run was measured on, in one line or piece
by piece, the run itself, and what differs between the machines of several runs."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

DRIVER_KEYS = ("driver",)
CUDA_KEYS = ("cuda_runtime",)
CUDA_DRIVER_KEYS = ("cuda_driver",)


def gpu_names(meta: Mapping[str, str]) -> list[str]:
    """The 'gpu.N.name' values in device order."""
    found = []
    for key, value in meta.items():
        m = re.fullmatch(r"gpu\.(\d+)\.name", key)
        if m:
            found.append((int(m.group(1)), value.strip()))
    return [name for _, name in sorted(found)]


def gpus(meta: Mapping[str, str]) -> str:
    names = gpu_names(meta)
    if not names:
        return "no GPU"
    if len(set(names)) == 1:
        return f"{len(names)}× {names[0]}" if len(names) > 1 else names[0]
    return ", ".join(f"GPU {i}: {n}" for i, n in enumerate(names))


def gpu_links(meta: Mapping[str, str]) -> str:
    """'0-1 NV18' from the 'link.I-J' (and 'peer.I-J') metadata; 'all NV18' when every pair
    is the same; pairs without peer access say 'no P2P'. '' without links."""
    pairs = []
    for key, value in meta.items():
        m = re.fullmatch(r"link\.(\d+)-(\d+)", key)
        if m and value.strip():
            i, j = int(m.group(1)), int(m.group(2))
            text = value.strip()
            peer = meta.get(f"peer.{i}-{j}", "").strip()
            if peer and peer != "yes":
                text += " no P2P" if peer == "no" else f" P2P {peer}"
            pairs.append(((i, j), text))
    if not pairs:
        return ""
    pairs.sort()
    texts = {text for _, text in pairs}
    if len(pairs) > 1 and len(texts) == 1:
        return f"all {texts.pop()}"
    return ", ".join(f"{i}-{j} {text}" for (i, j), text in pairs)


def machine_parts(meta: Mapping[str, str]) -> dict[str, str]:
    """The machine, piece by piece, in the order shown (absent pieces left out): host, gpus,
    driver, cuda, cuda_driver (when it differs from the runtime), cupy, mps, links."""
    def first(keys: Sequence[str]) -> str:
        return next((meta.get(k, "").strip() for k in keys if meta.get(k, "").strip()), "")

    parts = {"host": meta.get("host", "").strip() or "unknown host", "gpus": gpus(meta)}
    driver, runtime, cuda_driver = first(DRIVER_KEYS), first(CUDA_KEYS), first(CUDA_DRIVER_KEYS)
    if driver:
        parts["driver"] = f"driver {driver}"
    if runtime or cuda_driver:
        parts["cuda"] = f"CUDA {runtime or cuda_driver}"
    if runtime and cuda_driver and runtime != cuda_driver:
        parts["cuda_driver"] = f"(driver supports {cuda_driver})"
    if meta.get("cupy", "").strip():
        parts["cupy"] = f"CuPy {meta['cupy'].strip()}"
    if meta.get("mps", "").strip() == "running":
        parts["mps"] = "MPS running"
    links = gpu_links(meta)
    if links:
        parts["links"] = f"links {links}"
    return parts


def machine_summary(meta: Mapping[str, str], leave_out: Sequence[str] = ()) -> list[str]:
    """Pieces of the machine line: 'n1', '2× H200', 'driver 580.65', 'CUDA 12.9 (driver
    supports 13.0)', 'CuPy 13.6.0', 'MPS running', 'links 0-1 NV18'."""
    parts = {k: v for k, v in machine_parts(meta).items() if k not in leave_out}
    if "cuda_driver" in parts:  # 'CUDA 12.9 (driver supports 13.0)', one piece
        driver = parts.pop("cuda_driver")
        parts = {k: f"{v} {driver}" if k == "cuda" else v for k, v in parts.items()}
    return list(parts.values())


# Pieces of the machine line given up first when it must fit one line.
MACHINE_EXTRAS = ("cupy", "cuda_driver", "mps", "links", "driver", "cuda")


def machine_line(meta: Mapping[str, str], width: int, prefix: str = "") -> str:
    """The machine in one line of at most `width` characters: the pieces of MACHINE_EXTRAS
    left out one by one until it fits (host and GPUs always stay)."""
    leave: list[str] = []
    line = prefix + " · ".join(machine_summary(meta))
    for key in MACHINE_EXTRAS:
        if len(line) <= width:
            break
        leave.append(key)
        line = prefix + " · ".join(machine_summary(meta, leave))
    return line


def run_summary(meta: Mapping[str, str]) -> list[str]:
    """Pieces of the second header line: tool version, schema, time."""
    parts = []
    if meta.get("tool_version", "").strip():
        parts.append(f"gpuipc-bench {meta['tool_version'].strip()}")
    if meta.get("schema_version"):
        parts.append(f"schema {meta['schema_version']}")
    if meta.get("created_utc", "").strip():
        parts.append(meta["created_utc"].strip())
    return parts


def partial_note(meta: Mapping[str, str]) -> str | None:
    if meta.get("partial", "").strip().lower() != "true":
        return None
    status = meta.get("status", "").strip() or "unknown"
    status = status.replace(",", ", ")  # a list of scenarios wraps between its names
    return f"partial run: it did not finish (status: {status}); the figures below are what was measured"


def machine_facts(meta: Mapping[str, str]) -> dict[str, str]:
    """The facts that decide whether two runs are comparable."""
    pcie = sorted({v.strip() for k, v in meta.items() if re.fullmatch(r"gpu\.\d+\.pcie", k) and v.strip()})
    parts = machine_parts(meta)
    names = gpu_names(meta)
    return {
        "GPUs": f"{len(names)}× {names[0]}" if names and len(set(names)) == 1 else gpus(meta),
        "driver": meta.get("driver", "").strip() or "unknown",
        "CUDA": meta.get("cuda_runtime", "").strip() or meta.get("cuda_driver", "").strip() or "unknown",
        "GPU links": parts.get("links", "").removeprefix("links ") or "none",
        "PCIe": ", ".join(pcie) or "unknown",
        "MPS": meta.get("mps", "").strip() or "unknown",
    }


def machine_differences(metas: Sequence[Mapping[str, str]]) -> list[str]:
    """'GPUs: 1× NVIDIA H100 80GB HBM3 (run 1) vs 2× NVIDIA H200 (run 2)' for each fact that
    differs between the runs."""
    facts = [machine_facts(m) for m in metas]
    out = []
    for key in facts[0]:
        values = [f[key] for f in facts]
        if len(set(values)) > 1:
            out.append(f"{key}: " + " vs ".join(f"{v} (run {i + 1})" for i, v in enumerate(values)))
    return out
