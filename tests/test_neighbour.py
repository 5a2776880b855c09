"""The busy neighbour: a sharing mode with a third process keeping the pair's GPU busy.
On CPUs: the option's grammar, the modes it makes, the neighbour's life (started, said ready,
ended when the run leaves the mode, ended with a killed parent), and its start failing in one line
where there is no GPU (the real neighbour, up to its first CUDA call)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import gpu_count
from gpuipc_bench import modes
from gpuipc_bench.errors import BenchError, UsageError
from gpuipc_bench.modes import neighbour
from gpuipc_bench.modes.neighbour import Neighbour, end_neighbour, start_neighbour


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def spinning(kind, device, env, conn):  # a neighbour without a GPU: ready at once, then busy on the CPU
    conn.send(("ready", f"{kind} on {device}, {env.get('X', '')}"))
    conn.close()
    while True:
        time.sleep(0.01)


def refusing(kind, device, env, conn):
    conn.send(("error", "cudaErrorNoDevice: no CUDA-capable device is detected"))
    conn.close()
    os._exit(1)


def test_the_option_names_a_neighbour_after_a_mode():
    assert modes.parse("mps+copy,time-sliced+compute,mps,time-sliced") == (
        "time-sliced", "time-sliced+compute", "mps", "mps+copy")
    with pytest.raises(UsageError, match=r"--sharing mps\+heat: mps\+heat: a busy neighbour is \+compute or \+copy"):
        modes.parse("mps+heat")
    with pytest.raises(UsageError, match="unknown sharing mode"):
        modes.parse("exclusive+copy")


def test_the_modes_it_makes_share_one_mps_daemon():
    made = modes.make(modes.parse("time-sliced,time-sliced+compute,mps,mps+copy,mps:25+compute"))
    assert [m.name for m in made] == ["time-sliced", "time-sliced+compute", "mps", "mps+copy", "mps:25+compute"]
    assert isinstance(made[3], Neighbour) and made[3].base.owner is made[2] and made[4].base.owner is made[2]
    assert made[4].scenarios == made[4].base.scenarios  # the thread percentage's scenarios


def test_a_neighbour_starts_says_ready_and_ends():
    process, said = start_neighbour("copy", 3, {"X": "env"}, target=spinning)
    try:
        assert process.is_alive() and said == "copy on 3, env"
    finally:
        assert end_neighbour(process, "time-sliced+copy") == []
    assert not process.is_alive()


def test_a_neighbour_that_cannot_start_fails_in_one_line():
    with pytest.raises(BenchError, match="the busy neighbour \\(compute\\) could not start: cudaErrorNoDevice"):
        start_neighbour("compute", 0, {}, target=refusing)


def test_the_real_neighbour_without_a_gpu_fails_in_one_line():
    if gpu_count() > 0:
        pytest.skip("a GPU is here: the neighbour starts (tested by the GPU test below)")
    with pytest.raises(BenchError) as caught:
        start_neighbour("compute", 0, {})
    assert "could not start" in str(caught.value) and "\n" not in str(caught.value)


def test_the_mode_starts_its_neighbour_once_and_ends_it_when_the_run_leaves(monkeypatch):
    monkeypatch.setattr(neighbour, "_busy", spinning)
    mode = modes.make(("time-sliced+compute",))[0]
    mode.device = 1
    mode.start()
    first = mode.process.pid
    mode.start()  # each scenario of the mode asks: one neighbour
    assert mode.process.pid == first
    assert "a third process (pid" in mode.facts()["sharing.time-sliced+compute"]
    # the base mode's (a private MPS pipe folder); the name the rows carry is handed to the workers
    assert mode.env() == mode.base.env() and mode.base.env()
    assert mode.leave() == [] and _gone(first)
    mode.start()  # back in the mode: a new neighbour
    second = mode.process.pid
    assert second != first
    mode.stop()
    assert _gone(second) and not mode.base.pipe_dir


def test_a_neighbour_that_died_on_its_own_is_said(monkeypatch):
    monkeypatch.setattr(neighbour, "_busy", spinning)
    mode = modes.make(("time-sliced+copy",))[0]
    mode.start()
    os.kill(mode.process.pid, signal.SIGKILL)
    mode.process.join()
    assert mode.leave() == ["the busy neighbour of time-sliced+copy had ended on its own (exit code -9)"]
    mode.stop()


def test_the_neighbour_dies_with_a_killed_parent(tmp_path):
    script = textwrap.dedent("""
        import sys, time
        from gpuipc_bench.ipc.process import die_with_parent
        from gpuipc_bench.modes.neighbour import start_neighbour

        def spin(kind, device, env, conn):
            die_with_parent()
            conn.send(("ready", "")); conn.close()
            while True:
                time.sleep(0.01)

        process, _ = start_neighbour("compute", 0, {}, target=spin)
        print(process.pid, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pid = int(parent.stdout.readline())
    assert _alive(pid)
    parent.kill()
    parent.wait()
    assert _gone(pid)


@pytest.mark.gpu
def test_the_real_neighbours_run_on_a_gpu():
    if gpu_count() < 1:
        pytest.skip("needs 1 GPU")
    for kind in ("compute", "copy"):
        process, said = start_neighbour(kind, 0, {})
        try:
            assert process.is_alive() and "first round took" in said
        finally:
            end_neighbour(process, kind)
        assert not process.is_alive()


def _with_neighbour(slower: float):
    """The committed H100 run, with a 'time-sliced+compute' copy of three paths' time-sliced rows
    made `slower` (a crafted neighbour, for the summary)."""
    from pathlib import Path

    import pandas as pd

    from gpuipc_bench.results import read_results

    frame, meta = read_results(Path(__file__).resolve().parents[1] / "results" / "h100-default-modes.csv")
    extra = frame[(frame["sharing"] == "time-sliced") & frame["scenario"].isin(["ipc", "staging", "mmap"])].copy()
    extra["sharing"] = "time-sliced+compute"
    extra["seconds"] *= slower
    extra["bandwidth_gbps"] /= slower
    return pd.concat([frame, extra], ignore_index=True), meta


def test_the_summary_says_what_the_neighbour_costs():
    from gpuipc_bench.analysis.handover import neighbour_costs
    from gpuipc_bench.analysis.model import analyse
    from gpuipc_bench.report.answer import summary_lines

    frame, meta = _with_neighbour(1.5)
    costs = neighbour_costs(analyse(frame, meta).summary)
    assert [(c.mode, c.base, c.measure, c.nbytes) for c in costs] == [
        ("time-sliced+compute", "time-sliced", "handoff", 4096), ("time-sliced+compute", "time-sliced", "stream",
                                                                  256 << 20)]
    assert all(abs(c.ratio - 1.5) < 0.01 for c in costs)
    text = " ".join(" ".join(t for t, _ in summary_lines(analyse(frame, meta), "run.csv", 80)).split())
    # the base mode is the mode's own prefix, the path named once: both figures are of ipc/push
    assert "BUSY NEIGHBOUR time-sliced+compute, ipc/push: hand-off 4 KiB 273 µs ±0.1% → 409 µs [409–410]" in text
    assert "(1.50×)" in text and "(0.67×)" in text


def test_without_a_neighbour_no_such_line():
    from pathlib import Path

    from gpuipc_bench.analysis.handover import neighbour_costs
    from gpuipc_bench.analysis.model import analyse
    from gpuipc_bench.results import read_results

    frame, meta = read_results(Path(__file__).resolve().parents[1] / "results" / "h100-default-modes.csv")
    assert neighbour_costs(analyse(frame, meta).summary) == []


def test_at_the_run_s_end_every_neighbour_ends_before_the_mps_daemon(monkeypatch):
    made = modes.make(modes.parse("time-sliced,mps,mps+copy"))
    owner, busy = made[1], made[2]
    order: list[str] = []

    class Process:  # a neighbour still running at the end
        pid, exitcode = 4242, None

        def is_alive(self):
            return "neighbour ended" not in order

        def terminate(self):
            order.append("neighbour ended")

        kill = terminate

        def join(self, timeout=None):
            pass

    class Daemon:
        def stop(self):
            order.append("daemon stopped")
            return []

    busy.process, owner.daemon = Process(), Daemon()
    modes.end_all(made)
    assert order == ["neighbour ended", "daemon stopped"]


@pytest.mark.parametrize("name, label", [
    ("time-sliced+compute", "time-sliced+compute"), ("mps+copy", "mps+copy"),
    ("mps:25+copy", "mps+copy"),  # beside a share of the SMs: the share in mps_thread_pct
])
def test_a_neighbour_mode_s_rows_carry_its_name(monkeypatch, name, label):
    """The harness hands the workers the mode's name; the environment is not asked (here it would
    say the other base)."""
    import gpuipc_bench.modes.daemon
    from gpuipc_bench.config import RunConfig
    from gpuipc_bench.engine.scenario import WorkerContext, WorkerSpec

    mode = modes.make(modes.parse(name))[-1]
    assert mode.name == name and mode.env() == mode.base.env()
    mps = name.startswith("mps")
    monkeypatch.setattr(gpuipc_bench.modes.daemon, "serves_this_process", lambda: not mps)
    specs = [WorkerSpec(0, "producer", 0), WorkerSpec(1, "consumer", 0)]
    ctx = WorkerContext(specs[0], specs, RunConfig(scenarios=("ipc",)), None, None, None, lambda m: None,
                        mode=mode.name)
    ctx.begin("ipc")
    assert ctx.row_fields["sharing"] == label
    assert ("mps_thread_pct" in ctx.row_fields) == mps
    from gpuipc_bench.results import new_row

    row = new_row(**ctx.row_fields, path="ipc", variant="ce", measure="handoff", metric="bandwidth", src=0, dst=0,
                  bytes=4096, iteration=0, batch=1, seconds=1e-5, verified=True)  # a valid row of schema 3
    assert row["sharing"] == label


def test_beside_a_neighbour_a_figure_is_judged_against_the_ceiling_measured_without_it():
    """On an H100 the ceiling measured beside a compute neighbour under MPS was lower than the
    link's, so the pair's 64 MiB stream read 110% of it: the bound is the base mode's ceiling."""
    from pathlib import Path

    from gpuipc_bench.analysis import analyse
    from gpuipc_bench.results import read_results

    path = Path(__file__).resolve().parent.parent / "results" / "h100-busy-neighbour.csv"
    if not path.exists():
        pytest.skip("reference runs not in this checkout")
    summary = analyse(*read_results(path)).summary
    busy = summary[summary["sharing"].str.contains("+", regex=False) & summary["fraction_of_ceiling"].notna()]
    base = summary[summary["sharing"] == "mps"]
    row = busy[(busy["sharing"] == "mps+compute") & (busy["variant"] == "push") & (busy["measure"] == "stream")
               & (busy["bytes"] == 64 << 20)].iloc[0]
    ceiling = base[(base["variant"] == "push") & (base["measure"] == "stream") & (base["bytes"] == 64 << 20)].iloc[0]
    assert row["ceiling_gbps"] == ceiling["ceiling_gbps"] and row["fraction_of_ceiling"] < 1.0
