"""Which paths can work on this node, and why not: facts first (gather), then a verdict per path
from the facts alone (decide), so that a test can give any facts it likes.

No CUDA in this process: the GPU facts come from machine.probe() (a forked probe child) and
NVML; the other facts from /proc, statvfs, the PATH and the environment. A path's verdict is
`ok` True (nothing stands in its way; the tiny real run or the measurement then decides),
False with the one-line reason it cannot work, or None (not applicable: no GPU).
"""

from __future__ import annotations

import array
import ctypes
import dataclasses
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
from typing import Any

from gpuipc_bench.sizes import format_size

IMEX_DIR = "/dev/nvidia-caps-imex-channels"
PTRACE_SCOPE = "/proc/sys/kernel/yama/ptrace_scope"
SYS_PIDFD_GETFD = 438  # x86-64 and arm64 alike
LARGEST = 256 << 20  # the default run's largest transfer


@dataclasses.dataclass
class Facts:
    gpu_count: int = 0
    no_gpu_reason: str = ""
    nvml_gpu_count: int | None = None
    visible: str | None = None  # CUDA_VISIBLE_DEVICES
    mig: bool = False
    peer_access: frozenset = frozenset()
    links: dict = dataclasses.field(default_factory=dict)
    nvml_p2p: dict = dataclasses.field(default_factory=dict)  # (i, j) CUDA indices -> NVML's P2P read status
    pid_ns: str = ""
    net_ns: str = ""
    peer_pid_ns: str = ""  # of the process this one pairs with (an MPI rank, else a forked child)
    peer_net_ns: str = ""
    peer_where: str = "a forked child"
    ptrace_scope: int | None = None
    pidfd: str | None = None  # None: pidfd_getfd works on a child; else why not
    scm_rights: str | None = None  # None: SCM_RIGHTS over an abstract Unix socket works
    shm_free: int | None = None
    largest: int = LARGEST
    cuda_bindings: str | None = None  # None: importable; else the reason
    mps_binary: str | None = None
    mps_serving: bool = False
    imex_channels: tuple[str, ...] | None = None  # None: no IMEX channel folder
    nccl: str | None = None  # None: CuPy's NCCL bindings import
    env: dict = dataclasses.field(default_factory=dict)
    ucx_info: str | None = None  # `ucx_info -d` output, None without ucx_info


@dataclasses.dataclass
class PathVerdict:
    name: str
    ok: bool | None
    reason: str = ""


# ---------------------------------------------------------------- gathering


def namespaces() -> tuple[str, str]:
    def ns(kind: str) -> str:
        try:
            return os.readlink(f"/proc/self/ns/{kind}")
        except OSError:
            return ""

    return ns("pid"), ns("net")


def command_namespaces(prefix: list[str]) -> tuple[str, str]:
    """The PID and network namespaces of a process started as `prefix python` (e.g. `unshare
    --pid --fork`): how a peer in another container would see them."""
    code = "import os; print(os.readlink('/proc/self/ns/pid')); print(os.readlink('/proc/self/ns/net'))"
    done = subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise OSError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
    pid, net = done.stdout.split()
    return pid, net


def child_namespaces() -> tuple[str, str]:
    """A forked child's namespaces (the peer of a one-node check: its workers are forked)."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(writer, "\n".join(namespaces()).encode())
        finally:
            os._exit(0)
    os.close(writer)
    try:
        text = os.read(reader, 4096).decode()
    finally:
        os.close(reader)
        os.waitpid(pid, 0)
    parts = text.split("\n")
    return (parts[0], parts[1]) if len(parts) == 2 else ("", "")


def ptrace_scope() -> int | None:
    try:
        with open(PTRACE_SCOPE) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def pidfd_getfd_works() -> str | None:
    """Take a descriptor of a child with pidfd_getfd(2): None when it works, else why not."""
    if not hasattr(os, "pidfd_open"):
        return "os.pidfd_open is missing (Python 3.9+ on Linux 5.3+)"
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(writer)
        os.read(reader, 1)  # hold the descriptors until the parent is done
        os._exit(0)
    try:
        pidfd = os.pidfd_open(pid)
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.syscall(SYS_PIDFD_GETFD, pidfd, reader, 0)
            if fd < 0:
                errno = ctypes.get_errno()
                return f"pidfd_getfd: {os.strerror(errno)} (errno {errno})"
            os.close(fd)
            return None
        finally:
            os.close(pidfd)
    except OSError as exc:
        return f"pidfd_open: {exc.strerror or exc}"
    finally:
        os.close(writer)
        os.close(reader)
        os.waitpid(pid, 0)


def scm_rights_works() -> str | None:
    """Send a descriptor over an abstract Unix socket (what the VMM and pool paths do)."""
    name = f"\0gpuipc-bench-check-{os.getpid()}"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server, \
                socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as client:
            server.bind(name)
            reader, writer = os.pipe()
            try:
                rights = array.array("i", [reader]).tobytes()
                client.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)], 0, name)
                _, fds, _, _ = socket.recv_fds(server, 16, 1)
                for fd in fds:
                    os.close(fd)
                return None if fds else "no descriptor arrived"
            finally:
                os.close(reader)
                os.close(writer)
    except OSError as exc:
        return f"SCM_RIGHTS over an abstract Unix socket: {exc.strerror or exc}"


def shm_free(folder: str = "/dev/shm", statvfs=os.statvfs) -> int | None:
    try:
        st = statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def nvml_gpu_count() -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


P2P_STATUS = {0: "OK", 1: "chipset not supported", 2: "GPU not supported", 3: "IOH topology not supported",
              4: "disabled by the regkey", 5: "not supported", 6: "unknown"}


def nvml_p2p(bus_ids: dict[int, str]) -> dict[tuple[int, int], str]:
    """NVML's peer-to-peer read status between every two GPUs (CUDA indices -> PCI bus ids)."""
    from gpuipc_bench.machine.nvml import handles_by_bus_id, normalise_bus_id

    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return {}
    found = {}
    try:
        handles = handles_by_bus_id(pynvml)
        for i, a in bus_ids.items():
            for j, b in bus_ids.items():
                ha, hb = handles.get(normalise_bus_id(a)), handles.get(normalise_bus_id(b))
                if i != j and ha is not None and hb is not None:
                    try:
                        code = pynvml.nvmlDeviceGetP2PStatus(ha, hb, pynvml.NVML_P2P_CAPS_INDEX_READ)
                    except Exception:
                        continue
                    found[(i, j)] = P2P_STATUS.get(int(code), str(code))
    except Exception:
        pass
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return found


def _ucx_info() -> str | None:
    binary = shutil.which("ucx_info")
    if not binary:
        return None
    try:
        return subprocess.run([binary, "-d"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def gather(machine, peer: tuple[str, str] | None = None, peer_where: str = "a forked child",
           largest: int = LARGEST) -> Facts:
    """This node's facts. `peer`: the PID and network namespaces of the process this one pairs
    with (an MPI rank of the node); None: a forked child's."""
    from gpuipc_bench.modes import daemon as mps
    from gpuipc_bench.gpu.fdmemory import missing_reason

    pid_ns, net_ns = namespaces()
    peer_pid, peer_net = peer if peer is not None else child_namespaces()
    try:
        imex = tuple(sorted(os.listdir(IMEX_DIR))) if os.path.isdir(IMEX_DIR) else None
    except OSError:
        imex = ()
    nccl = None if importlib.util.find_spec("cupy_backends") and \
        importlib.util.find_spec("cupy_backends.cuda.libs.nccl") else "CuPy's NCCL bindings are not installed"
    return Facts(
        gpu_count=machine.gpu_count, no_gpu_reason=machine.no_gpu_reason if not machine.gpu_count else "",
        nvml_gpu_count=nvml_gpu_count(), visible=os.environ.get("CUDA_VISIBLE_DEVICES"),
        mig=any(g.mig_mode == "enabled" for g in machine.gpus), peer_access=machine.peer_access,
        links=dict(machine.links), nvml_p2p=nvml_p2p({g.index: g.pci_bus_id for g in machine.gpus})
        if machine.gpu_count > 1 else {}, pid_ns=pid_ns, net_ns=net_ns, peer_pid_ns=peer_pid, peer_net_ns=peer_net,
        peer_where=peer_where, ptrace_scope=ptrace_scope(), pidfd=pidfd_getfd_works(),
        scm_rights=scm_rights_works(), shm_free=shm_free(), largest=largest, cuda_bindings=missing_reason(),
        mps_binary=mps.find_binary(), mps_serving=mps.serves_this_process(), imex_channels=imex, nccl=nccl,
        env={k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "UCX_"))}, ucx_info=_ucx_info(),
    )


# ---------------------------------------------------------------- deciding


def decide(f: Facts) -> list[PathVerdict]:
    """Every path's verdict from the facts."""
    return [PathVerdict("host", True, "CPU processes through shared memory"), _ipc(f), _fd_path(f, "vmm"),
            _fd_path(f, "mempool"), _peer(f), _mmap(f), _mps(f), _imex(f), _nccl(f), _ucx(f)]


def _no_gpu(f: Facts, name: str) -> PathVerdict | None:
    if f.gpu_count:
        return None
    hidden = f" (CUDA_VISIBLE_DEVICES={f.visible!r} hides {'them' if f.nvml_gpu_count else 'any'})" \
        if f.visible is not None and f.visible.strip() in ("", "-1", "none", "NoDevFiles") else ""
    return PathVerdict(name, None, f"no GPU: {f.no_gpu_reason or 'none found'}{hidden}")


def _ipc(f: Facts) -> PathVerdict:
    apart = f.pid_ns and f.peer_pid_ns and f.pid_ns != f.peer_pid_ns
    why = (f"its peer ({f.peer_where}) runs in another PID namespace ({f.peer_pid_ns}, this one {f.pid_ns}): "
           "cudaIpcOpenMemHandle fails across PID namespaces (invalid device context); share one (hostPID, "
           "--pid=host)")
    if (v := _no_gpu(f, "ipc")) is not None:
        v.reason += f"; and {why}" if apart else ""  # what would fail here once there is a GPU
        return v
    if apart:
        return PathVerdict("ipc", False, why)
    if f.mig:
        return PathVerdict("ipc", True, "MIG is on: CUDA IPC works inside one MIG instance, not across instances")
    return PathVerdict("ipc", True, f"same PID namespace as its peer ({f.pid_ns})")


def _fd_path(f: Facts, name: str) -> PathVerdict:
    if (v := _no_gpu(f, name)) is not None:
        return v
    if f.cuda_bindings:
        return PathVerdict(name, False, f.cuda_bindings)
    policy = _ptrace_text(f)
    if f.net_ns and f.peer_net_ns and f.net_ns != f.peer_net_ns:
        return PathVerdict(name, False, f"its peer ({f.peer_where}) is in another network namespace, which an abstract "
                                        f"Unix socket does not reach (SCM_RIGHTS); pidfd_getfd instead: {policy}")
    if f.scm_rights:
        return PathVerdict(name, False, f"{f.scm_rights}; pidfd_getfd instead: {policy}")
    return PathVerdict(name, True, f"POSIX descriptors pass over SCM_RIGHTS; pidfd_getfd: {policy}")


def _ptrace_text(f: Facts) -> str:
    if f.pidfd:
        return f"unavailable ({f.pidfd})"
    meaning = {None: "no Yama policy", 0: "Yama ptrace_scope 0: any process of the same user",
               1: "Yama ptrace_scope 1: descendants only, so not a sibling rank",
               2: "Yama ptrace_scope 2: CAP_SYS_PTRACE only", 3: "Yama ptrace_scope 3: never"}
    return f"works on a child ({meaning.get(f.ptrace_scope, f'ptrace_scope {f.ptrace_scope}')})"


def _peer(f: Facts) -> PathVerdict:
    if (v := _no_gpu(f, "peer")) is not None:
        return v
    if f.gpu_count < 2:
        if f.nvml_gpu_count and f.nvml_gpu_count > f.gpu_count:
            return PathVerdict("peer", False, f"CUDA sees {f.gpu_count} of the {f.nvml_gpu_count} GPUs NVML lists "
                                              f"(CUDA_VISIBLE_DEVICES={f.visible!r}): both GPUs must be visible")
        return PathVerdict("peer", False, f"needs 2 GPUs, this node has {f.gpu_count}")
    missing = [f"{a}-{b} ({f.links.get((a, b), '?')}" + (f"; NVML P2P read: {f.nvml_p2p[(a, b)]}" if (a, b) in
                                                          f.nvml_p2p else "") + ")"
               for a in range(f.gpu_count) for b in range(f.gpu_count)
               if a < b and ((a, b) not in f.peer_access or (b, a) not in f.peer_access)]
    if missing:
        return PathVerdict("peer", False, f"no peer access between GPUs {', '.join(missing)} (cudaDeviceCanAccessPeer)")
    return PathVerdict("peer", True, f"peer access between every pair of the {f.gpu_count} GPUs")


def _mmap(f: Facts) -> PathVerdict:
    if f.shm_free is None:
        return PathVerdict("mmap", False, "/dev/shm cannot be examined (statvfs failed)")
    if f.shm_free < f.largest:
        return PathVerdict("mmap", False, f"/dev/shm has {format_size(f.shm_free)} free, the largest transfer needs "
                                          f"{format_size(f.largest)} (docker --shm-size, a memory-backed emptyDir)")
    if (v := _no_gpu(f, "mmap")) is not None:
        return v
    return PathVerdict("mmap", True, f"/dev/shm has {format_size(f.shm_free)} free")


def _mps(f: Facts) -> PathVerdict:
    if (v := _no_gpu(f, "mps")) is not None:
        return v
    if f.mps_serving:
        return PathVerdict("mps", True, "an MPS daemon serves this process")
    if not f.mps_binary:
        return PathVerdict("mps", False, "nvidia-cuda-mps-control is not on PATH, and no daemon serves this process")
    return PathVerdict("mps", True, f"{f.mps_binary} is there (no daemon serves now; a run starts its own)")


def _imex(f: Facts) -> PathVerdict:
    if f.imex_channels is None:
        return PathVerdict("imex", False, f"no IMEX channels ({IMEX_DIR} is absent): no fabric handles "
                                          "(multi-node NVLink memory export)")
    if not f.imex_channels:
        return PathVerdict("imex", False, f"{IMEX_DIR} holds no channel (none created, or not mounted in)")
    return PathVerdict("imex", True, f"IMEX channels: {', '.join(f.imex_channels[:4])}")


def _nccl(f: Facts) -> PathVerdict:
    if (v := _no_gpu(f, "nccl")) is not None:
        return v
    if f.nccl:
        return PathVerdict("nccl", False, f.nccl)
    forced = [f"{k}={f.env[k]}" for k in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE") if f.env.get(k) == "1"]
    if forced:
        return PathVerdict("nccl", False, f"{' and '.join(forced)} takes NCCL off its GPU transport "
                                          f"({'SHM' if 'NCCL_SHM_DISABLE=1' not in forced else 'the network'} instead)")
    return PathVerdict("nccl", True, "CuPy's NCCL bindings import")


def _ucx(f: Facts) -> PathVerdict:
    tls = f.env.get("UCX_TLS")
    if tls and not any(t.strip().lstrip("^") in ("all", "cuda_ipc", "cuda") for t in tls.split(",")) \
            or (tls and tls.startswith("^") and "cuda_ipc" in tls):
        return PathVerdict("ucx", False, f"UCX_TLS={tls} leaves out cuda_ipc: GPU data goes through host copies or "
                                         "TCP while transfers still succeed")
    if f.ucx_info is None:
        return PathVerdict("ucx", None, "UCX is not installed (no ucx_info)")
    if "cuda_ipc" not in f.ucx_info:
        return PathVerdict("ucx", False, "UCX lists no cuda_ipc transport here (ucx_info -d): it would fall back")
    return PathVerdict("ucx", True, "UCX lists the cuda_ipc transport")


def facts_dict(f: Facts) -> dict[str, Any]:
    out = dataclasses.asdict(f)
    out["peer_access"] = sorted(list(p) for p in f.peer_access)
    out["links"] = {f"{a}-{b}": v for (a, b), v in f.links.items()}
    out["nvml_p2p"] = {f"{a}-{b}": v for (a, b), v in f.nvml_p2p.items()}
    return out
