"""MIG: pairs of workers on the instances of a GPU in MIG mode. Built and tested on fakes only:
no MIG machine was at hand, and this has not run on MIG hardware.

A GPU with MIG on is cut into instances, each a CUDA device that a process sees alone. A worker
of a MIG pair is started with CUDA_VISIBLE_DEVICES set to its instance's UUID (WorkerSpec.mig,
set by the launcher before anything initialises CUDA), and its CUDA index inside is 0. For each
GPU with MIG on, every one-GPU pair path of the run (staging, ipc, vmm, mempool, hostpool, mmap,
torch, nvshmem, latency, ...) runs on its instances as well:

  within one instance   both workers on instance A: a same-GPU pair inside the instance, the
                        two processes taking turns (time-sliced; the MPS mode is not applied
                        to MIG pairs)
  across instances      the producer on A, the consumer on B (needs two instances: a GPU with
                        one plans none, and the run says why)

Rows of both say sharing 'mig' and name the instances by UUID in src and dst (ceilings: the
instance of the worker that measured them); the CSV header maps each UUID to its GPU, profile
and letter (`# mig.<UUID>: GPU 0 · 1g.10gb · A`, and gpu.N.mig_instances / mig_profiles).

Across instances every path is tried as it is, never refused in advance. Where the driver
refuses the crossing (CUDA IPC of memory or events between GPU instances, which NVIDIA's MIG
guide lists as unsupported), the pair ends on that CUDA error; the run records it as a note in
the driver's own words (`# note.<scenario>.across_mig.<UUID A>: ...`), not as a failure.
Host memory crosses: staging's host-ordered variants; its GPU-ordered ones and mmap's hand off
through CUDA IPC events, and say so in a note where the driver refuses those (scenarios/staging.py).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Iterable, Mapping

from gpuipc_bench.errors import WorkerFailed

PREFIX = "MIG-"
# A worker's error that is the CUDA driver speaking (a refused call), by its exception type or words.
_CUDA_CAUSES = ("CudaError", "CUDARuntimeError", "CUDADriverError")
_CUDA_WORDS = ("cudaError", "CUDA_ERROR", "CUDA error")
_NOT_A_REFUSAL = ("out of memory", "cannot allocate")


@dataclasses.dataclass(frozen=True)
class Instance:
    """One MIG instance: its GPU (CUDA index of the parent GPU), UUID, profile and letter (A, B, ...
    in NVML's order)."""

    gpu: int
    uuid: str
    profile: str
    letter: str

    @property
    def name(self) -> str:
        """'MIG 1g.10gb A'."""
        return " ".join(p for p in ("MIG", self.profile, self.letter) if p)

    def describe(self) -> str:
        """The header's value for it: 'GPU 0 · 1g.10gb · A'."""
        return " · ".join(p for p in (f"GPU {self.gpu}", self.profile or "?", self.letter))


def is_mig(device: Any) -> bool:
    """Whether a row's src or dst names a MIG instance (by UUID)."""
    return str(device).startswith(PREFIX)


def letter(k: int) -> str:
    return chr(ord("A") + k) if k < 26 else str(k)


def instances(machine) -> list[Instance]:
    """The MIG instances of every GPU with MIG on, in GPU then NVML order."""
    out = []
    for gpu in machine.gpus:
        if gpu.mig_mode != "enabled":
            continue
        for k, uuid in enumerate(gpu.mig_instances):
            profile = gpu.mig_profiles[k] if k < len(gpu.mig_profiles) else ""
            out.append(Instance(gpu.index, uuid, profile, letter(k)))
    return out


# --------------------------------------------------------------------------- planning


def plan_mig(plan: Iterable[tuple], config, machine) -> tuple[list[tuple], dict[str, str]]:
    """(scenario, specs) for each one-GPU pair scenario of the plan on each GPU with MIG on: a
    pair within its first instance, and one from its first instance to its second; and the
    notes (header key -> text) of GPUs with MIG on where no pair across instances can be planned."""
    scenarios = list(dict.fromkeys(s for s, _ in plan if s.pairable and s.gpus_needed < 2))
    found = instances(machine)
    out: list[tuple] = []
    notes: dict[str, str] = {}
    for gpu in machine.gpus:
        if gpu.mig_mode != "enabled":
            continue
        mine = [i for i in found if i.gpu == gpu.index]
        if len(mine) < 2:
            have = f"one instance ({mine[0].uuid})" if mine else "no instance NVML could name"
            notes[f"mig.gpu{gpu.index}"] = (f"GPU {gpu.index} has MIG on with {have}: no pair across MIG "
                                            "instances, which takes two (this tool never changes the GPU's MIG setup)")
        pairs = [(mine[0], mine[0])] if mine else []  # within the first instance
        if len(mine) > 1:
            pairs.append((mine[0], mine[1]))  # across: the first to the second
        for scenario in scenarios:
            for a, b in pairs:
                specs = scenario.workers(dataclasses.replace(config, devices=(0, 0)), None)
                out.append((scenario, [dataclasses.replace(s, device=0, mig=(a if s.rank == 0 else b).uuid,
                                                           cpus=tuple(gpu.cpus)) for s in specs]))
    return out, notes


def is_mig_pair(specs) -> bool:
    return any(getattr(s, "mig", "") for s in specs)


def across(specs) -> bool:
    """Whether the workers are on different MIG instances."""
    return is_mig_pair(specs) and len({s.mig for s in specs}) > 1


def pair_label(specs, machine) -> str:
    """'MIG A>B' (A>A within one instance) for the progress line; '' for a pair of whole GPUs."""
    if not is_mig_pair(specs):
        return ""
    letters = {i.uuid: i.letter for i in instances(machine)}
    return f"MIG {letters.get(specs[0].mig, '?')}>{letters.get(specs[-1].mig, '?')}"


# --------------------------------------------------------------------------- in the worker


class InstanceDevice(int):
    """The CUDA index of a worker's MIG instance (0: the one device it sees), which rows name by
    the instance's UUID (`label`). Everything CUDA gets from it is the plain index."""

    label: str

    def __new__(cls, index: int, label: str) -> "InstanceDevice":
        device = super().__new__(cls, index)
        device.label = label
        return device

    def __reduce__(self):
        return (InstanceDevice, (int(self), self.label))


def device_of(spec) -> Any:
    """A worker's device as rows name it: its MIG instance (InstanceDevice), else the index."""
    return InstanceDevice(spec.device, spec.mig) if getattr(spec, "mig", "") else spec.device


def label_ends(fields: dict, spec) -> dict:
    """A row's src and dst as the CSV names them: a MIG instance by its UUID. A device index
    that is not labelled (a ceiling's, parsed from its key) is the measuring worker's own."""
    for key in ("src", "dst"):
        value = fields.get(key)
        label = getattr(value, "label", "")
        if label:
            fields[key] = label
        elif getattr(spec, "mig", "") and isinstance(value, int) and value == spec.device:
            fields[key] = spec.mig
    return fields


# --------------------------------------------------------------------------- the driver's refusal


def refusal(scenario: str, specs, error: BaseException | None) -> tuple[str, str] | None:
    """(note key, text) when a pair across MIG instances ended on the driver's refusal (a CUDA
    error: the call and the driver's own words); None for anything else: not such a pair, or a
    failure of another kind (a death, a hang, a wrong byte, memory), which stays a failure."""
    if error is None or not across(specs) or not isinstance(error, WorkerFailed):
        return None
    text = str(error)
    if error.cause_name not in _CUDA_CAUSES and not any(w in text for w in _CUDA_WORDS):
        return None
    if any(w in text for w in _NOT_A_REFUSAL):
        return None
    a, b = specs[0].mig, specs[-1].mig
    return (f"{scenario}.across_mig.{a}",
            f"{scenario} across MIG instances {a} -> {b}: not measured, the driver refused: {text}")


# --------------------------------------------------------------------------- reading


_CALL_RE = re.compile(r"\b((?:cudaError|CUDA_ERROR_)\w* in \w+)")


def refused_line(meta: Mapping[str, str]) -> str | None:
    """The summary's line of what the driver refused across MIG instances, from the header's
    notes: 'across MIG instances the driver refused: ipc (cudaErrorX in cudaIpcOpenMemHandle),
    staging/pinned, pipelined (...)'; None where nothing was refused."""
    parts = []
    for key, text in meta.items():
        scenario, _, rest = str(key).removeprefix("note.").partition(".across_mig.")
        if not str(key).startswith("note.") or not rest:
            continue
        what = text.partition(": ")[2].partition(" not measured")[0] if "(they hand off" in text else ""
        call = _CALL_RE.search(str(text))
        parts.append(f"{scenario}{'/' + what if what else ''} ({call.group(1) if call else 'see its note'})")
    return f"across MIG instances the driver refused: {'; '.join(parts)}" if parts else None


def names(meta: Mapping[str, str]) -> dict[str, Instance]:
    """UUID -> Instance, from a results header (gpu.N.mig_instances and gpu.N.mig_profiles)."""
    out = {}
    for key, value in meta.items():
        head, _, tail = str(key).rpartition(".")
        if tail != "mig_instances" or not head.startswith("gpu.") or not head[4:].isdigit():
            continue
        profiles = str(meta.get(f"{head}.mig_profiles", "")).split(",")
        for k, uuid in enumerate(u.strip() for u in str(value).split(",")):
            if uuid:
                out[uuid] = Instance(int(head[4:]), uuid, profiles[k].strip() if k < len(profiles) else "", letter(k))
    return out


def short(uuid: str) -> str:
    """'MIG-4f8e2c1a-...' -> 'MIG-4f8e2c1a' (a name that fits a table cell)."""
    return str(uuid)[: len(PREFIX) + 8]


def heading(src: str, dst: str, meta: Mapping[str, str]) -> str | None:
    """The summary's heading of a MIG pair: 'MIG 1g.10gb A → MIG 1g.10gb B · across instances of
    GPU 0', '... A → ... A · within one instance'; None for any other link."""
    if not (is_mig(src) and is_mig(dst)):
        return None
    known = names(meta)
    a, b = known.get(src), known.get(dst)
    left, right = (a.name if a else short(src)), (b.name if b else short(dst))
    if src == dst:
        return f"{left} → {right} · within one instance"
    gpu = f" of GPU {a.gpu}" if a and b and a.gpu == b.gpu else ""
    return f"{left} → {right} · across instances{gpu}"
