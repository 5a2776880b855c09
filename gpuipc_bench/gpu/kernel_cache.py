"""nvcc-built kernels kept on disk between runs, keyed by what decides the binary.

NVSHMEM's device-initiated kernel must be built by nvcc (-rdc, device-linked with
libnvshmem_device): 10-15 s a run without a cache. A build is stored as
<cache>/<key>.cubin, the key a hash of the kernel's source, the compiler (`nvcc --version`),
the device library it links (its size and modification time) and the GPUs' architectures
(NVML's compute capabilities: nvcc's -arch=native builds for them), so that any change of
these builds anew. Writes are atomic (built in a private folder, then renamed), so two runs
at once never see half a file. The cache folder: $GPUIPC_BENCH_CACHE, else
$XDG_CACHE_HOME/gpuipc-bench, else ~/.cache/gpuipc-bench; where it cannot be written the
kernel is built into a temporary folder for this run only.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

CACHE_ENV = "GPUIPC_BENCH_CACHE"


def cache_dir(environ=os.environ) -> Path:
    if environ.get(CACHE_ENV):
        return Path(environ[CACHE_ENV])
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpuipc-bench"


def gpu_architectures() -> str:
    """'sm_90,sm_90' from NVML (no CUDA context), or 'unknown'."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            found = []
            for i in range(pynvml.nvmlDeviceGetCount()):
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(pynvml.nvmlDeviceGetHandleByIndex(i))
                found.append(f"sm_{major}{minor}")
            return ",".join(found) or "unknown"
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML, no driver: the key says so
        return "unknown"


def compiler_version(nvcc: str) -> str:
    done = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    return done.stdout.strip() or done.stderr.strip()


def file_identity(path: str) -> str:
    try:
        stat = os.stat(path)
    except OSError:
        return f"{path}: missing"
    return f"{path}: {stat.st_size} bytes, mtime {stat.st_mtime_ns}"


def key_for(source: str, nvcc: str, libraries: list[str], architectures: str) -> str:
    digest = hashlib.sha256()
    digest.update(Path(source).read_bytes())
    for part in (compiler_version(nvcc), *(file_identity(p) for p in libraries), architectures):
        digest.update(b"\0" + part.encode())
    return digest.hexdigest()[:32]


def cached_build(name: str, key: str, build: Callable[[str], str], environ=os.environ) -> tuple[str, bool]:
    """The path of kernel `name` for `key`, and whether it came from the cache. `build(folder)`
    builds it into `folder` and returns its path; called only where the cache has no entry."""
    folder = cache_dir(environ)
    target = folder / f"{name}-{key}.cubin"
    if target.is_file() and target.stat().st_size > 0:
        return str(target), True
    try:
        folder.mkdir(parents=True, exist_ok=True)
        work = tempfile.mkdtemp(prefix=f".{name}-", dir=folder)
    except OSError:  # a read-only home: build for this run only
        return _build_for_this_run(name, build), False
    try:
        built = build(work)
        os.replace(built, target)  # atomic: a concurrent run sees the whole file or none
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return str(target), False


def _build_for_this_run(name: str, build: Callable[[str], str]) -> str:
    import atexit

    folder = tempfile.mkdtemp(prefix=f"gpuipc-bench-{name}-")
    atexit.register(shutil.rmtree, folder, True)
    return build(folder)
