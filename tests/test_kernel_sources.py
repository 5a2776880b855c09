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


def test_each_ping_pong_kernel_writes_the_sm_it_ran_on_and_the_result_reads_it(monkeypatch):
    """Word 6 of a ping-pong's result block is the SM its block ran on (%smid), in all three of the
    kernel's exits (the flags alone, the payload, LL); PingPongResult.sm reads it for the trace."""
    from gpuipc_bench.gpu import kernels, memory

    text = file_source("pingpong.cu")
    assert text.count("res[6] = sm_id();") == 3 and "%%smid" in file_source("common.cuh")
    assert kernels.PINGPONG_RESULT_BYTES >= 7 * 8
    monkeypatch.setattr(memory, "read_words", lambda ptr, n, stream, device: list(range(10, 10 + n)))
    table = object.__new__(kernels.PingPongKernels)
    table.device = 0
    found = table.result(0, None)
    assert (found.status, found.rounds, found.sm) == (10, 15, 16)
