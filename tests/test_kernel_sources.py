"""Every CUDA kernel lives in a .cu file of gpuipc_bench/gpu (package data), none in a Python
string: the busy neighbour's kernel is found where it is loaded from."""

from __future__ import annotations

import re
from pathlib import Path

import gpuipc_bench
from gpuipc_bench.gpu.kernels import file_source

PACKAGE = Path(gpuipc_bench.__file__).parent


def test_the_busy_neighbours_kernel_is_package_data():
    text = file_source("busy.cu")
    assert re.search(r'extern "C" __global__ void busy\(float\* sink, long long rounds\)', text)


def test_no_python_module_carries_a_kernel():
    carriers = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if "__global__" in p.read_text()]
    assert carriers == []
