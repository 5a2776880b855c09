"""The nixl path: UCX's protocol report parsed from real UCX 1.23 output (captured from nixl-cu12
1.5.1 on a CPU machine), the skip line where NIXL is missing, the transport-fallback line on a
crafted CSV, and, where a NIXL wheel is installed, the host-to-host scenario end to end on CPUs:
rows, transports, set-up rows, verification, a dead worker, a forced failure said in one line."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuipc_bench.scenarios import ucx_report
from gpuipc_bench.analysis.model import analyse
from gpuipc_bench.analysis.transport import fallbacks
from gpuipc_bench.report.wording import fallback_text
from gpuipc_bench.results import read_results, write_results
from gpuipc_bench.scenarios import SCENARIOS, nixl

DATA = Path(__file__).parent / "data"
HAVE_NIXL = nixl.missing() is None
needs_nixl = pytest.mark.skipif(not HAVE_NIXL, reason=f"{nixl.missing()}")
BENCH = [sys.executable, "-m", "gpuipc_bench.cli"]
# Real lines of UCX 1.23 (UCX_TLS=sm: NIXL's UCX backend needs a transport with peer failure handling)
SM_ERROR = ("[1795649255.040641] [vm:26412:0]          select.c:722  UCX  ERROR   no active messages transport to "
            "<no debug data>: sysv/memory - no peer failure handler, posix/memory - no peer failure handler, "
            "cma/memory - no am bcopy")


def test_ucx_protocol_tables_from_a_real_log():
    log = (DATA / "ucx-1.23-proto-info-host-read.log").read_text()
    tables = ucx_report.tables(log)
    assert len(tables) == 17
    first = tables[0]
    assert first.scope == "initiator self cfg#0"
    assert first.title == "remote memory write by ucp_put* from host memory to host"
    assert first.ranges == ((0, float("inf"), "zero-copy", "cma/memory"),)
    am = tables[1]
    assert am.title == "active message by ucp_am_send* from host memory"
    assert am.config_for(0) == "short tcp/lo" and am.config_for(16515) == "zero-copy tcp/lo"
    assert am.config_for(16516) == "multi-frag copy-in tcp/lo"
    # towards the peer (not the agent's loopback 'self' endpoint), for each operation
    assert ucx_report.chosen(log, "read", 4096, "host") == "zero-copy cma/memory"
    assert ucx_report.chosen(log, "write", 1 << 30) == "zero-copy cma/memory"
    assert ucx_report.chosen(log, "read", 4096, "cuda") == "not reported"
    assert ucx_report.transport_of("zero-copy cma/memory") == "cma"
    assert ucx_report.transport_of("zero-copy 52% on tcp/lo and 48% on tcp/eth0") == "tcp"


def test_gpu_memory_is_named_with_its_device():
    """UCX names memory of a known device '<type>/<device>', without the word 'memory'
    (ucp_proto_select_param_str): the tables of GPU rings must still be found (the first GPU
    run read 'not reported' for every GPU variant)."""
    def table(title, config):
        return "\n".join(f"[1.0] [h:1:0]   {line}" for line in (
            "+--------+-------------+------------+", "| initiator intra-node cfg#2 |", f"| {title} |",
            "+--------+-------------+------------+", "| Range | Description | Config |",
            "+--------+-------------+------------+", f"| 0..inf | zero-copy | {config} |",
            "+--------+-------------+------------+"))
    log = "\n".join((table("remote memory write by ucp_put* from cuda/GPU0 to cuda", "cuda_ipc/cuda"),
                     table("remote memory read by ucp_get* into host memory from cuda/GPU0", "cuda_copy/cuda"),
                     table("remote memory read by ucp_get* into cuda/GPU1 from cuda", "cuda_ipc/cuda")))
    assert ucx_report.chosen(log, "write", 1 << 20, "cuda") == "zero-copy cuda_ipc/cuda"
    assert ucx_report.chosen(log, "write", 1 << 20, "host") == "not reported"
    assert ucx_report.chosen(log, "read", 4096, "cuda") == "zero-copy cuda_ipc/cuda"
    assert ucx_report.chosen(log, "read", 4096, "host") == "zero-copy cuda_copy/cuda"
    assert ucx_report.local_memory("remote memory write by ucp_put* from iov[4] host memory to host") == "host"


def test_gpu_tables_from_a_real_h200_run():
    """UCX's report from NIXL 1.5.1 between two processes of one H200: GPU to GPU over cuda_ipc, host
    memory into the other process's GPU by software emulation over tcp (0.6-0.9 GB/s measured), host to
    host over cma. Each variant must read its own table, by both ends' memory."""
    write = (DATA / "ucx-nixl-1.5.1-h200-gpu-write.log").read_text()
    read = (DATA / "ucx-nixl-1.5.1-h200-gpu-read.log").read_text()
    assert ucx_report.chosen(write, "write", 1 << 20, "cuda", "cuda") == "zero-copy cuda_ipc/cuda"
    assert ucx_report.chosen(write, "write", 1 << 28, "host", "cuda") == "software emulation tcp/lo"
    assert ucx_report.chosen(write, "write", 4096, "host", "host") == "zero-copy cma/memory"
    assert ucx_report.chosen(read, "read", 1 << 20, "cuda", "cuda") == "zero-copy cuda_ipc/cuda"
    assert ucx_report.chosen(read, "read", 1 << 20, "cuda", "host") == "software emulation tcp/lo"
    assert ucx_report.chosen(read, "read", 1 << 20, "host", "cuda") == "not reported"


def test_the_self_endpoint_is_not_the_peer():
    log = (DATA / "ucx-1.23-proto-info-host-read.log").read_text()
    only_self = "\n".join(log.splitlines()[:8])  # the first table: 'initiator self cfg#0'
    assert ucx_report.tables(only_self)[0].scope == "initiator self cfg#0"
    assert ucx_report.chosen(only_self, "write", 4096) == "not reported"


def test_nixl_own_reason_when_its_backend_refuses_to_start():
    """NIXL's own words (glog, on stderr) when UCX_TLS leaves GPU memory out: the real lines of an H200
    node, where `check` with UCX_TLS=tcp said only 'nixlBackendError: NIXL_ERR_BACKEND'."""
    from gpuipc_bench.scenarios.nixl_support import nixl_error, stderr_kept

    said = ("E1126 02:09:38.166571    1470 config.cpp:84] Invalid UCX_TLS=tcp for NIXL UCX backend: NVIDIA GPU(s) "
            "are present, but this setting does not enable CUDA memory support. Add cuda_copy for basic GPU support, "
            "or cuda to also include NVLink support.\n"
            "E1126 02:09:38.166579    1470 nixl_agent.cpp:342] createBackend: backend creation failed for 'UCX'\n")
    assert nixl_error(said).startswith("Invalid UCX_TLS=tcp for NIXL UCX backend: NVIDIA GPU(s) are present")
    assert nixl_error(said.splitlines()[1]) == "createBackend: backend creation failed for 'UCX'"
    assert nixl_error("a line of something else") == ""
    kept: list[str] = []
    with stderr_kept(kept):
        os.write(2, b"E1126 02:09:38.1 7 x.cpp:1] from C++ on fd 2\n")
    assert nixl_error(kept[0]) == "from C++ on fd 2"


def test_ucx_error_line_in_one_line():
    assert ucx_report.first_error("a line\n" + SM_ERROR + "\n") == (
        "no active messages transport to <no debug data>: sysv/memory - no peer failure handler, posix/memory - "
        "no peer failure handler, cma/memory - no am bcopy")
    assert ucx_report.first_error("nothing wrong") == ""


def test_the_skip_line_names_the_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in nixl.MODULES else real(name, *a))
    reason = nixl.missing()
    assert reason is not None and 'pip install --no-deps "nixl-cu12==1.5.1"' in reason
    from fakes import h100_node

    assert SCENARIOS["nixl-host"].waive_reason(h100_node(0)) == reason
    assert SCENARIOS["nixl"].waive_reason(h100_node(1)) == reason
    assert SCENARIOS["nixl"].waive_reason(h100_node(0)).startswith("needs a CUDA GPU")
    with pytest.raises(Exception, match="needs NIXL"):
        nixl.api()


def test_nixl_is_named_not_run_by_default():
    for name in ("nixl", "nixl-host", "nixl-host-tcp", "nixl-cuda-copy", "nixl-tcp"):
        assert SCENARIOS[name].in_default_run is False
    assert SCENARIOS["nixl-host"].gpus_needed == 0 and SCENARIOS["nixl"].gpus_needed == 1
    assert nixl.FORCED["nixl-host-tcp"] == ({"UCX_TLS": "tcp"}, ":tcp")


def test_user_ucx_settings_are_named():
    assert nixl.user_ucx_settings({"UCX_TLS": "tcp", "PATH": "/bin"}) == "UCX_TLS=tcp"
    assert nixl.user_ucx_settings({}) == "none"


def _with_library_rows(tmp_path, transport: str, variant: str = "ce", factor: float = 100.0) -> Path:
    """small_run.csv (one H100) with its ipc rows copied as nixl rows `factor` times slower."""
    df, meta = read_results(DATA / "small_run.csv")
    ipc = df[(df["path"] == "ipc") & (df["variant"] == "ce")].copy()
    ipc["scenario"], ipc["path"], ipc["variant"], ipc["transport"] = "nixl", "nixl", variant, transport
    ipc["seconds"] = ipc["seconds"] * factor
    ipc["bandwidth_gbps"] = ipc["bandwidth_gbps"] / factor
    meta = dict(meta) | {"note.nixl.ucx_settings": "UCX_TLS=cuda_copy,tcp", "schema_version": "3"}
    out = tmp_path / f"crafted-{abs(hash((transport, variant, factor)))}.csv"
    import pandas as pd

    write_results(out, pd.concat([df, ipc], ignore_index=True), meta)
    return out


def test_a_fallback_is_named_with_its_transport_and_setting(tmp_path):
    df, meta = read_results(_with_library_rows(tmp_path, "zero-copy cuda_copy/cuda, tcp/lo"))
    found = fallbacks(df, analyse(df, meta).summary, meta)
    assert [(f.path, f.variant, f.bytes) for f in found] == [("nixl", "ce", 64 << 20)]  # not 4 KiB: call-bound
    f = found[0]
    assert f.kind == "transport-fallback" and f.fraction < 0.02
    text = fallback_text(f)
    assert "NIXL used zero-copy cuda_copy/cuda, tcp/lo (UCX settings: UCX_TLS=cuda_copy,tcp)" in text
    assert f"= {f.fraction * 100:.2g}% of ipc/" in text and "check UCX_TLS" in text
    done = subprocess.run(BENCH + ["report", str(tmp_path / next(p.name for p in tmp_path.iterdir())), "--summary"],
                          capture_output=True, text=True, env=os.environ | {"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    assert "! transport fallback" in done.stdout


@pytest.mark.parametrize("transport, variant, factor", [
    ("zero-copy cuda_ipc/cuda", "ce", 100.0),  # slow on the direct transport: the library's own cost
    ("zero-copy tcp/lo", "ce:tcp", 100.0),  # a forced variant: its cost is the point
    ("zero-copy tcp/lo", "ce", 2.0),  # half of ipc: not a fallback
])
def test_no_fallback_where_there_is_none(tmp_path, transport, variant, factor):
    df, meta = read_results(_with_library_rows(tmp_path, transport, variant, factor))
    assert fallbacks(df, analyse(df, meta).summary, meta) == []


# ----------------------------------------------------------------------------- on CPUs, with NIXL


def _run(tmp_path, *args, env=None, name="nixl.csv", scenario="nixl-host", sizes="4K,1M"):
    out, private = tmp_path / name, tmp_path / "tmp"  # a TMPDIR of its own: other runs' folders are not ours
    private.mkdir(exist_ok=True)
    done = subprocess.run(BENCH + ["run", "-s", scenario, "--sizes", sizes, "--timeout", "30", "-o", str(out),
                                   *args], capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if not k.startswith("UCX_")} | (env or {})
                          | {"TMPDIR": str(private)})
    left = glob.glob(os.path.join(private, "gpuipc-bench-ucx-*"))
    assert not left, f"UCX log folders left behind: {left}"
    assert subprocess.run(["pgrep", "-f", f"gpuipc_bench.cli run -s {scenario}.*{out}"],
                          capture_output=True).stdout == b""
    return done, out


@needs_nixl
def test_host_to_host_end_to_end(tmp_path):
    # -n 3: what is checked is in every row (the adaptive count, the harness's own, is tested on the host
    # path); the default 6-9 samples per group took 37 s of CI
    done, out = _run(tmp_path, "-n", "3")
    assert done.returncode == 0, done.stderr
    df, meta = read_results(out)
    nixl_rows = df[df["path"] == "nixl"]
    setup = set(nixl_rows.loc[nixl_rows["metric"] == "setup", "variant"])
    assert setup == {"nixl_agent", "nixl_register", "nixl_load", "nixl_first"}
    moved = nixl_rows[nixl_rows["metric"] == "bandwidth"]
    assert set(moved["variant"]) == {"read", "write", "write-16blocks", "write-256blocks", "write-4096blocks"}
    assert set(moved["measure"]) == {"stream", "handoff"}
    assert set(moved["src"]) == {"host"} and set(moved["ceiling"]) == {"memcpy@host"}
    assert moved["verified"].all()
    # what UCX reported, on every row: CMA or shared memory on one host here, never guessed
    assert not moved["transport"].isin(["", "not reported"]).any(), set(moved["transport"])
    assert set(df.loc[df["path"] == "ceiling", "variant"]) == {"memcpy@host"}
    assert meta["note.nixl-host.ucx_settings"] == "none"


@needs_nixl
def test_a_user_setting_that_takes_the_direct_transport_away_is_named(tmp_path):
    # 1 MiB alone (a fallback is judged above the call-bound sizes): 4 KiB's hand-offs over tcp take
    # most of a run's time on two loaded cores, and the end-to-end test above runs that size
    done, out = _run(tmp_path, "-n", "3", env={"UCX_TLS": "tcp"}, sizes="1M")
    assert done.returncode == 0, done.stderr
    df, meta = read_results(out)
    assert set(df.loc[(df["path"] == "nixl") & (df["metric"] == "bandwidth"), "transport"].map(
        ucx_report.transport_of)) == {"tcp"}
    assert meta["note.nixl-host.ucx_settings"] == "UCX_TLS=tcp"
    summary = subprocess.run(BENCH + ["report", str(out), "--summary"], capture_output=True, text=True,
                             env=os.environ | {"COLUMNS": "80"}).stdout
    summary = " ".join(summary.split())  # lines wrap at 80 columns
    if any(f.fraction < 0.1 for f in analyse(df, meta).fallbacks):  # tcp/lo is far below memcpy on most hosts
        assert "! transport fallback" in summary and "UCX settings: UCX_TLS=tcp" in summary


@needs_nixl
def test_corrupted_bytes_fail_the_path(tmp_path):
    done, out = _run(tmp_path, env={"GPUIPC_BENCH_FAULT": "corrupt"})
    assert done.returncode == 1
    assert "nixl" in done.stderr and ("bytes wrong" in done.stderr or "expected" in done.stderr), done.stderr


@needs_nixl
def test_a_dead_worker_is_named_and_rows_kept(tmp_path):
    done, out = _run(tmp_path, env={"GPUIPC_BENCH_FAULT": "kill:1:sample:3"})
    assert done.returncode == 1
    assert "worker 1" in done.stderr and "nixl-host" in done.stderr, done.stderr
    df, meta = read_results(out)
    assert meta["partial"] == "true" and (df["path"] == "nixl").any()


@needs_nixl
def test_a_transport_that_cannot_connect_fails_in_one_line(tmp_path):
    done, out = _run(tmp_path, env={"UCX_TLS": "sm"})
    assert done.returncode == 1
    wrapped = done.stderr.replace("\n  ", " ")  # the line wraps at the terminal's width, its continuation indented
    line = next(x for x in wrapped.splitlines() if x.startswith("error in scenario nixl-host"))
    assert "could not start its UCX backend: no active messages transport" in line, done.stderr
    assert "Traceback" not in done.stderr


# ----------------------------------------------------------------------------- on a GPU (skipped here)


def _gpu_rows(monkeypatch, name, devices):
    from fakes import run_scenario_rows

    outcome, rows = run_scenario_rows(monkeypatch, name, sizes=(4096, 1 << 20), devices=devices)
    assert outcome.ok, outcome.error
    return [r for r in rows if r["path"] == "nixl"]


@pytest.mark.gpu
@needs_nixl
def test_gpu_to_gpu_and_host_to_gpu_on_one_gpu(monkeypatch, no_leaks):
    rows = _gpu_rows(monkeypatch, "nixl", (0,))
    moved = [r for r in rows if r["metric"] == "bandwidth"]
    assert {r["variant"] for r in moved} >= {"write", "read", "write-from-dram", "read-from-dram"}
    assert all(r["verified"] is True for r in moved)
    assert {r["ceiling"] for r in moved if "dram" not in r["variant"]} == {"d2d@0"}
    assert {r["ceiling"] for r in moved if "dram" in r["variant"]} == {"h2d@0"}
    # UCX's own report: on one GPU, cuda_ipc between the two processes (never guessed, never empty); from
    # host memory into the other process's GPU, software emulation (what UCX 1.5.1's NIXL did on an H200)
    assert all(r["transport"] not in ("", "not reported") for r in moved), {r["transport"] for r in moved}
    said = {r["variant"]: ucx_report.transport_of(r["transport"]) for r in moved if "dram" not in r["variant"]}
    assert said["write"] == "cuda_ipc"
    # READ: cuda_ipc where the GPU has an active NVLink (an H200 of an NV18 pair); on a GPU without one UCX
    # turns cuda_ipc's get off and reads over tcp (one H100, with UCX's debug line saying why)
    from gpuipc_bench.machine.probe import probe

    nvlink = any(str(link).startswith("NV") for link in probe().links.values())
    assert said["read"] == ("cuda_ipc" if nvlink else "tcp"), said


@pytest.mark.gpu2
@needs_nixl
@pytest.mark.parametrize("name", ["nixl", "nixl-cuda-copy"])
def test_gpu_to_gpu_across_two(monkeypatch, no_leaks, name):
    rows = _gpu_rows(monkeypatch, name, (0, 1))
    moved = [r for r in rows if r["metric"] == "bandwidth" and "dram" not in r["variant"]]
    assert {r["ceiling"] for r in moved} == {"peer@0>1"} and all(r["verified"] is True for r in moved)
    said = {ucx_report.transport_of(r["transport"]) for r in moved}
    # UCX's own choice maps the peer's memory (cuda_ipc); without cuda_ipc, cuda_copy reaches only this
    # process's GPU, so UCX moves GPU memory between processes by software emulation over tcp (the
    # first H200 pair run: 0.5 GB/s against 1,650 GB/s)
    assert said == ({"tcp"} if name == "nixl-cuda-copy" else {"cuda_ipc"}), said


@needs_nixl
def test_under_mpirun_the_ranks_are_the_agents_and_exit_cleanly(tmp_path):
    from fakes import HAVE_MPI, mpirun, ours_in_shm

    if not HAVE_MPI:
        pytest.skip("needs Open MPI's mpirun and mpi4py")
    out = tmp_path / "mpi.csv"
    done = mpirun(2, "-s", "nixl-host", "--sizes", "4K", "--timeout", "30", "-o", str(out))
    # NIXL's bundled libnl and the system's (Open MPI's verbs) crashed the ranks at exit before
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Segmentation fault" not in done.stdout + done.stderr
    df, meta = read_results(out)
    assert meta["launcher"] == "mpi" and meta["partial"] == "false"
    assert {"read", "write"} <= set(df.loc[(df["path"] == "nixl") & (df["metric"] == "bandwidth"), "variant"])
    assert ours_in_shm() == []


# ----------------------------------------------------------------------------- in `check`


def test_check_fails_a_library_figure_that_fell_back():
    from gpuipc_bench.check import expect, judge
    from gpuipc_bench.check.figures import Figure

    refs, facts = expect.load(), {"host": "n1"}

    def figure(transport, value):
        return Figure("nixl-host-read", "host", value, "GB/s", ceiling=20.0, samples=5, transport=transport)

    tcp = judge.judge_figure(figure("software emulation tcp/lo", 0.6), "n1", facts, refs)
    assert tcp.status == "fail" and tcp.reason.startswith("transport fallback: 0.6 GB/s = 3.0% of its ceiling")
    assert "UCX used software emulation tcp/lo; check UCX_TLS" in tcp.reason
    unknown = judge.judge_figure(figure("not reported", 0.6), "n1", facts, refs)
    assert unknown.status == "fail" and "UCX reported no protocol for it" in unknown.reason
    slow_but_direct = judge.judge_figure(figure("zero-copy cma/memory", 0.6), "n1", facts, refs)
    # no expectation for this node's model: measured, not judged, and not failed
    assert slow_but_direct.status == judge.MEASURED and slow_but_direct.reason.endswith("UCX used zero-copy cma/memory")
    assert judge.judge_figure(figure("zero-copy tcp/lo", 5.0), "n1", facts, refs).status == judge.MEASURED  # 25%


def test_a_read_that_ucx_sends_over_tcp_without_nvlink_is_said_so_and_skipped_by_check():
    """UCX turns cuda_ipc's READ off on a GPU without an active NVLink (one H100: READ over tcp, WRITE
    over cuda_ipc): the run's line says so instead of 'check UCX_TLS', and check skips the figure
    there; with an NVLink in the node's facts it is a fallback, and check fails it."""
    from gpuipc_bench.analysis.transport import Fallback, read_without_nvlink
    from gpuipc_bench.check import expect, judge
    from gpuipc_bench.check.figures import Figure
    from gpuipc_bench.report.wording import fallback_text

    assert read_without_nvlink("nixl", "read", "0", "0", "none", {"gpu.0.name": "H100"})
    assert not read_without_nvlink("nixl", "read", "0", "1", "none", {"link.0-1": "NV18"})
    assert not read_without_nvlink("nixl", "write", "0", "0", "none", {})
    assert not read_without_nvlink("nixl", "read-from-dram", "host", "0", "none", {})
    assert not read_without_nvlink("nixl", "read", "0", "0", "UCX_CUDA_IPC_ENABLE_GET_ZCOPY=y", {})
    line = fallback_text(Fallback("nixl", "nixl", "read", "stream", "0", "0", "time-sliced", 1 << 20, 0.5,
                                  "ipc/ce", 900.0, "software emulation tcp/lo", "none", no_get=True))
    assert "UCX turns cuda_ipc's READ off where the GPU has no active NVLink" in line and "UCX_TLS" not in line
    refs = expect.load()
    read = Figure("nixl-read", "0", 0.5, "GB/s", ceiling=1487.0, samples=5, transport="software emulation tcp/lo")
    skipped = judge.judge_figure(read, "n1", {"host": "n1"}, refs)
    assert skipped.status == "skip" and "UCX_CUDA_IPC_ENABLE_GET_ZCOPY=y turns READ on" in skipped.reason
    assert judge.judge_figure(read, "n1", {"host": "n1", "link.0-1": "NV18"}, refs).status == "fail"


def _check(tmp_path, env):
    """`check` of this node with NIXL's figure alone (the host path and the barrier left out: the
    one-node check's own tests measure them; NIXL's figure is judged against its scenario's own
    memcpy ceiling)."""
    from gpuipc_bench.hooks import plant

    out = tmp_path / "check.csv"
    done = subprocess.run(BENCH + ["check", "-o", str(out), "--format", "json"], capture_output=True, text=True,
                          timeout=300, env={k: v for k, v in os.environ.items() if not k.startswith("UCX_")} | env
                          | {plant.PLANT_ENV: "without:host;without:barrier"})
    events = [__import__("json").loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    return done, events


@needs_nixl
def test_check_names_a_nixl_that_cannot_connect(tmp_path):
    done, events = _check(tmp_path, {"UCX_TLS": "sm"})
    assert done.returncode == 1
    failed = [e for e in events if e["figure"] == "nixl-host-read" and e["status"] == "fail"]
    assert failed and "could not start its UCX backend" in failed[0]["reason"], done.stderr[-2000:]
    assert "FAIL node" in done.stderr and "Traceback" not in done.stderr


@needs_nixl
def test_check_with_nixl_forced_onto_tcp(tmp_path):
    done, events = _check(tmp_path, {"UCX_TLS": "tcp"})
    figure = next(e for e in events if e["figure"] == "nixl-host-read")
    if figure["status"] == "fail":  # tcp/lo under a tenth of memcpy: the usual case
        assert done.returncode == 1 and "transport fallback" in figure["reason"] and "tcp" in figure["reason"]
        assert "FAIL node" in done.stderr and "nixl-host-read" in done.stderr
    else:
        assert "UCX used" in figure["reason"] and "tcp" in figure["reason"]


@needs_nixl
def test_a_forced_transport_is_a_variant_and_not_the_users_setting(tmp_path):
    # 1 MiB (4 KiB's hand-offs over tcp took 40 s of a loaded two-core machine): every variant of it forced
    done, out = _run(tmp_path, "-n", "3", scenario="nixl-host-tcp", sizes="1M")
    assert done.returncode == 0, done.stderr
    df, meta = read_results(out)
    moved = df[(df["path"] == "nixl") & (df["metric"] == "bandwidth")]
    assert set(moved["variant"]) == {"read:tcp", "write:tcp", "write-16blocks:tcp", "write-256blocks:tcp",
                                     "write-4096blocks:tcp"}
    assert set(moved["transport"].map(ucx_report.transport_of)) == {"tcp"}
    assert meta["note.nixl-host-tcp.ucx_settings"] == "none"  # what the user set: nothing; the variant says tcp
    assert analyse(df, meta).fallbacks == []  # forced: its cost is the point, never a fallback
