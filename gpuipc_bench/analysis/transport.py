"""A library that fell back to a slow transport without saying so (kind `transport-fallback`).

NIXL's UCX and NCCL pick their transport themselves; a user's environment or a container
can take the direct one away (UCX_TLS without cuda_ipc, no ptrace for CMA, NCCL_P2P_DISABLE)
and the library then runs over tcp or staged copies at a small fraction of the link. A figure
of the library's own choice (not a forced variant: no ':' in its variant) at 1 MiB and up
is a fallback when it runs under FALLBACK_FRACTION of raw IPC on the same link (the best ipc
figure of the same measure and size; the figure's ceiling where the run has no ipc) AND the
transport the library reported is not the link's direct one. A slow figure on the direct
transport is not a fallback: it is the library's own cost, and the answer ranks it as such.
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from gpuipc_bench.analysis.conditions import records

FALLBACK_FRACTION = 0.10
FALLBACK_FROM = 1 << 20
LIBRARIES = ("nixl", "nccl")
# Transports that move the bytes directly (no tcp, no staging through a bounce buffer).
DIRECT = ("cuda_ipc", "cma", "sysv", "posix", "xpmem", "knem", "P2P")
# What a user should look at when UCX fell back (the summary's line and check's say it alike).
UCX_HINT = "check UCX_TLS and that the processes may reach each other's memory (ptrace for CMA, cuda_ipc)"
# UCX's own choice, with no UCX_ variable set, from host memory into another process's GPU: no
# transport of UCX reaches that pair (what two H200 runs showed: software emulation over tcp/lo)
UCX_NO_PATH = ("UCX chose it with no UCX_ variable set: between processes, cma reaches host memory only and "
               "cuda_ipc exported GPU memory only, so no direct transport moves host memory into another "
               "process's GPU")


# UCX's own choice for a READ between two processes' GPU memory on a node whose GPU has no active
# NVLink: its cuda_ipc transport turns get (READ) off there (uct_cuda_ipc_iface_get_max_get_zcopy,
# "cuda-ipc get zcopy disabled as no nvlinks detected" in UCX's debug log on one H100), so READ
# goes over tcp while WRITE takes cuda_ipc
UCX_NO_GET = ("UCX turns cuda_ipc's READ off where the GPU has no active NVLink "
              "(UCX_CUDA_IPC_ENABLE_GET_ZCOPY=y turns READ on)")


def has_nvlink(meta: dict) -> bool:
    """Whether the run's header names an NVLink between two of its GPUs (link.I-J: NVk)."""
    return any(str(key).startswith("link.") and str(value).startswith("NV") for key, value in meta.items())


def read_without_nvlink(path: str, variant: str, src: str, dst: str, settings: str, meta: dict) -> bool:
    """A NIXL READ from GPU to GPU that UCX's own rule sends over tcp (UCX_NO_GET)."""
    return (path == "nixl" and variant.split(":")[0] == "read" and "host" not in (str(src), str(dst))
            and "ENABLE_GET_ZCOPY" not in settings and not has_nvlink(meta))


@dataclasses.dataclass(frozen=True)
class Fallback:
    scenario: str
    path: str
    variant: str
    measure: str
    src: str
    dst: str
    sharing: str
    bytes: int
    gbps: float
    reference: str  # 'ipc/push' or the ceiling's name
    reference_gbps: float
    transport: str
    settings: str  # the environment the library ran under ('UCX_TLS=tcp', 'none')
    kind: str = "transport-fallback"
    no_get: bool = False  # a READ that UCX sends over tcp by its own rule on a GPU without NVLink

    @property
    def fraction(self) -> float:
        return self.gbps / self.reference_gbps


def direct(transport: str) -> bool:
    return any(name in transport for name in DIRECT)


def fallbacks(frame: pd.DataFrame, summary: pd.DataFrame, meta: dict) -> list[Fallback]:
    """Every figure of a library's own choice that fell back (see the module's docstring)."""
    if summary.empty or "transport" not in frame.columns:
        return []
    rows = summary[summary["path"].isin(LIBRARIES) & (summary["metric"] == "bandwidth")
                   & ~summary["variant"].str.contains(":", regex=False) & (summary["bytes"] >= FALLBACK_FROM)]
    ipc = summary[(summary["path"] == "ipc") & (summary["metric"] == "bandwidth")]
    keys = ["scenario", "path", "variant", "measure", "src", "dst", "bytes"]
    reported = frame[frame["path"].isin(LIBRARIES)].groupby(keys, dropna=False)["transport"].agg(
        lambda t: ", ".join(dict.fromkeys(str(x) for x in t if str(x) not in ("", "nan"))))
    out = []
    for r in records(rows):
        transport = reported.get((r.scenario, r.path, r.variant, r.measure, r.src, r.dst, r.bytes), "")
        if not transport or direct(transport):
            continue
        same = ipc[(ipc["src"] == r.src) & (ipc["dst"] == r.dst) & (ipc["sharing"] == r.sharing)
                   & (ipc["measure"] == r.measure) & (ipc["bytes"] == r.bytes)]
        if not same.empty:
            best = same.loc[same["median_gbps"].idxmax()]
            reference, reference_gbps = f"ipc/{best['variant']}", float(best["median_gbps"])
        else:
            reference, reference_gbps = str(r.ceiling), float(r.ceiling_gbps)
        if not reference_gbps > 0 or not r.median_gbps < FALLBACK_FRACTION * reference_gbps:
            continue
        settings = meta.get(f"note.{r.scenario}.ucx_settings", "") if r.path == "nixl" else \
            meta.get(f"note.{r.scenario}.nccl_settings", "")
        out.append(Fallback(r.scenario, r.path, r.variant, r.measure, str(r.src), str(r.dst), r.sharing, int(r.bytes),
                            float(r.median_gbps), reference, reference_gbps, transport, settings,
                            no_get=read_without_nvlink(r.path, r.variant, r.src, r.dst, settings, meta)))
    return out


def worst_per_scenario(found: list[Fallback]) -> list[tuple[Fallback, int]]:
    """One fallback per scenario: its lowest fraction, with how many figures of it fell back. A
    transfer in one piece is named before one split into many descriptors (NIXL's '-4096blocks'
    pays per descriptor whatever the transport: its figure would hide the transport's own)."""
    worst: dict[str, Fallback] = {}
    count: dict[str, int] = {}

    def rank(f: Fallback) -> tuple[bool, float]:
        return ("blocks" in f.variant, f.fraction)

    for f in found:
        count[f.scenario] = count.get(f.scenario, 0) + 1
        if f.scenario not in worst or rank(f) < rank(worst[f.scenario]):
            worst[f.scenario] = f
    return [(f, count[name]) for name, f in worst.items()]
