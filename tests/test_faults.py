"""Faults injected into real runs: nothing hangs, nothing leaks, nothing lies.

Each fault (GPUIPC_BENCH_FAULT, see gpuipc_bench/faults.py) is injected into a
whole `gpuipc-bench run`, through click's CliRunner and as a real process, and
the outcome is checked from the outside: the exit code, one message naming the
worker and what it was doing, a CSV marked partial that holds exactly the
samples completed before the fault, no segment left in /dev/shm and no process
left. Signals go to a real process that a 'hang' fault holds mid-run; the test
waits for the fault to fire (GPUIPC_BENCH_FAULT_FIRED), never for a time.
The GPU-marked tests do the same on the GPU scenarios and also check, through
NVML (which makes no CUDA context), that the GPU memory comes back.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import our_segments
from gpuipc_bench.cli import cli
from gpuipc_bench.config import RunConfig
from gpuipc_bench.errors import WorkerFailed
from gpuipc_bench.launcher import run_scenario
from gpuipc_bench.results import read_results
from gpuipc_bench.scenarios import SCENARIOS

ROOT = Path(__file__).resolve().parent.parent
ITERATIONS, WARMUP = 3, 1
FAST = ["--sizes", "64,4K", "--iterations", str(ITERATIONS), "--warmup", str(WARMUP)]
TAG = "GPUIPC_BENCH_TEST_TAG"


# --------------------------------------------------------------------------- helpers


def host_rows(sizes_done: dict[int, int], latency_sizes: tuple[int, ...] = ()) -> set[tuple]:
    """The (path, metric, bytes, iteration) keys of a host run that completed
    `sizes_done[size]` samples at each size (all its ceiling rows, since the
    producer measures them before the first sample), with latency rows where named."""
    keys = set()
    for size, samples in sizes_done.items():
        keys |= {("ceiling", "bandwidth", size, i) for i in range(ITERATIONS)}
        keys |= {("host", "bandwidth", size, i) for i in range(samples)}
    for size in latency_sizes:
        keys |= {("host", "latency", size, i) for i in range(ITERATIONS)}
    return keys


COMPLETE = host_rows({64: ITERATIONS, 4096: ITERATIONS}, latency_sizes=(64, 4096))


def keys(frame) -> set[tuple]:
    out = {(r.path, r.metric, int(r.bytes), int(r.iteration)) for r in frame.itertuples()}
    assert len(out) == len(frame), "a sample appears twice in the CSV"
    return out


def check_prefixes(frame) -> None:
    """Whatever a failed run kept is whole: each series is samples 0..k-1, each sample verified,
    and a size has rows only once every series of the sizes before it is complete."""
    series: dict[tuple, list[int]] = {}
    for r in frame.itertuples():
        series.setdefault((r.path, r.metric, int(r.bytes)), []).append(int(r.iteration))
        if r.metric == "bandwidth":
            assert bool(r.verified), f"an unverified sample was kept as good: {r}"
    for key, iterations in series.items():
        assert sorted(iterations) == list(range(len(iterations))), f"gaps in {key}: {iterations}"
    if any(size == 4096 for _, _, size in series):
        assert host_rows({64: ITERATIONS}, latency_sizes=(64,)) <= keys(frame)


def tagged_processes(tag: str) -> list[int]:
    """Live processes whose environment carries TAG=tag: the run's parent and every
    worker it forked inherit it, so this finds any of them left behind."""
    needle = f"{TAG}={tag}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            continue
    return found


def children_of(pid: int) -> list[int]:
    """Processes whose parent is `pid`, from /proc (zombies included: an unreaped worker counts)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            out.append(int(name))
    return out


def wait_for_file(path: Path, proc: subprocess.Popen, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text().endswith("\n")):
        if proc.poll() is not None:
            pytest.fail(f"the run ended (code {proc.returncode}) before the fault fired:\n"
                        f"{proc.communicate()[1]}")
        if time.monotonic() > deadline:
            pytest.fail(f"the fault did not fire within {timeout:g} s")
        time.sleep(0.01)
    return path.read_text()


@pytest.fixture
def clean_slate():
    """Fails the test if /dev/shm gains anything of ours or this process gains a child."""
    before = our_segments()
    children = set(children_of(os.getpid()))
    yield
    assert set(children_of(os.getpid())) <= children, "a worker process was left behind"
    assert our_segments() == before, "something of ours was left in /dev/shm"


def cli_run(tmp_path, fault: str | None, *args: str, out_name: str = "r.csv"):
    """`gpuipc-bench run -s host ...` through CliRunner with a fault; (code, output, seconds, out)."""
    out = tmp_path / out_name
    env = {"GPUIPC_BENCH_FAULT": fault} if fault else {"GPUIPC_BENCH_FAULT": None}
    start = time.monotonic()
    result = CliRunner().invoke(cli, ["run", "-s", "host", "--out", str(out), *args],
                                env=env, catch_exceptions=False)
    return result.exit_code, result.output, time.monotonic() - start, out


def process_run(tmp_path, fault: str | None, *args: str, fired: Path | None = None) -> tuple[subprocess.Popen, str]:
    """Start `python -m gpuipc_bench.cli run ...` as a real process in a session of its own,
    its environment tagged so that every process of it can be found afterwards."""
    tag = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUIPC_BENCH_")}
    env.update({TAG: tag, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"})
    if fault:
        env["GPUIPC_BENCH_FAULT"] = fault
    if fired:
        env["GPUIPC_BENCH_FAULT_FIRED"] = str(fired)
    proc = subprocess.Popen([sys.executable, "-m", "gpuipc_bench.cli", "run", *args],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    return proc, tag


def finish(proc: subprocess.Popen, tag: str, timeout: float = 30.0) -> tuple[int, str, str]:
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"the run did not end within {timeout:g} s")
    # The parent has exited and its workers were reaped; nothing tagged may live on.
    assert_none_left(tag)
    return proc.returncode, stdout, stderr


def assert_none_left(tag: str) -> None:
    deadline = time.monotonic() + 5
    while tagged_processes(tag) and time.monotonic() < deadline:
        time.sleep(0.05)  # a process killed a moment ago may still be on its way out
    left = tagged_processes(tag)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes of the run outlived it: {left}"


def held_run(tmp_path) -> tuple[subprocess.Popen, str]:
    """A real host run whose consumer hangs in its third sample: parent and two workers alive."""
    fired = tmp_path / "fired"
    proc, tag = process_run(tmp_path, "hang:1:sample:3", "-s", "host", "--out", "r.csv", *FAST,
                            "--timeout", "60", fired=fired)
    assert wait_for_file(fired, proc) == "hang:1:sample\n"
    assert len(tagged_processes(tag)) == 3, "the parent and two workers are running"
    return proc, tag


# --------------------------------------------------------------------------- SIGKILL in each phase

# (fault, the words of the error, the rows the CSV must hold: a set, or None for check_prefixes)
KILLS = {
    "setup": ("kill:1:setup", "worker 1 (consumer, CPU) was killed by SIGKILL during setup", "setup"),
    "first-size": ("kill:1:sample:3", "worker 1 (consumer, CPU) was killed by SIGKILL during sample 3 at 64 B",
                   host_rows({64: 2})),
    "second-size": ("kill:1:sample:5",
                    "worker 1 (consumer, CPU) was killed by SIGKILL during sample 2 at 4 KiB",
                    host_rows({64: ITERATIONS, 4096: 1}, latency_sizes=(64,))),
    "latency": ("kill:0:latency:2", "worker 0 (producer, CPU) was killed by SIGKILL during latency 2 at 64 B",
                host_rows({64: ITERATIONS}) | {("host", "latency", 64, 0)}),  # index 0 is the warm-up
    "barrier": ("kill:1:barrier:4", "worker 1 (consumer, CPU) was killed by SIGKILL inside the barrier during ",
                None),
    "teardown": ("kill:1:teardown", "worker 1 (consumer, CPU) was killed by SIGKILL during teardown", COMPLETE),
    "producer-teardown": ("kill:0:teardown", "worker 0 (producer, CPU) was killed by SIGKILL during teardown",
                          COMPLETE),
}


def check_kept(frame, meta, expected) -> None:
    assert meta["partial"] == "true" and "failed: host" in meta["status"], meta
    if expected == "setup":  # the consumer never measured; the producer's ceiling rows may have come
        assert {k[0] for k in keys(frame)} <= {"ceiling"}
        check_prefixes(frame)
    elif expected is None:
        check_prefixes(frame)
    else:
        assert keys(frame) == expected
        assert frame[frame["metric"] == "bandwidth"]["verified"].all()


@pytest.mark.parametrize("case", list(KILLS))
def test_kill_through_the_cli(tmp_path, clean_slate, case):
    fault, words, expected = KILLS[case]
    code, output, seconds, out = cli_run(tmp_path, fault, *FAST, "--timeout", "30")
    assert code == 1, output
    assert words in output
    assert "Traceback" not in output
    assert seconds < 10, "a dead worker must end the run within seconds, not at the --timeout"
    check_kept(*read_results(out), expected)


@pytest.mark.parametrize("case", ["setup", "second-size", "barrier", "teardown"])
def test_kill_in_a_real_process(tmp_path, case):
    fault, words, expected = KILLS[case]
    before = our_segments()
    start = time.monotonic()
    proc, tag = process_run(tmp_path, fault, "-s", "host", "--out", "r.csv", "-q", *FAST, "--timeout", "30")
    code, stdout, stderr = finish(proc, tag)
    assert time.monotonic() - start < 15
    assert code == 1, stderr
    assert words in " ".join(stderr.split())  # rich may wrap the line
    assert "Traceback" not in stderr
    assert stdout.strip() == "r.csv"  # --quiet: the path, even on failure
    check_kept(*read_results(tmp_path / "r.csv"), expected)
    assert our_segments() == before


def test_raise_in_a_worker_names_it_and_shows_the_traceback_with_verbose(tmp_path, clean_slate):
    code, output, _, out = cli_run(tmp_path, "raise:1:sample:2", *FAST)
    assert code == 1
    assert ("worker 1 (consumer, CPU) failed during sample 2 at 64 B: "
            "RuntimeError: injected fault in phase sample") in output
    assert "Traceback" not in output
    check_kept(*read_results(out), host_rows({64: 1}))
    code, output, _, _ = cli_run(tmp_path, "raise:1:sample:2", *FAST, "--verbose", out_name="v.csv")
    assert code == 1 and "Traceback" in output and "injected fault" in output


def test_a_failed_scenario_does_not_stop_the_next(tmp_path, clean_slate):
    """host fails (its producer dies in the latency phase, which only host has); barrier
    then runs in full; the run exits 1 and the CSV says which failed and which completed."""
    code, output, _, out = cli_run(tmp_path, "kill:0:latency:2", *FAST, "-s", "barrier")
    assert code == 1
    assert "1 of 2 scenarios failed" in " ".join(output.split())
    frame, meta = read_results(out)
    assert meta["partial"] == "true"
    assert "completed: barrier" in meta["status"] and "failed: host" in meta["status"]
    assert keys(frame[frame["scenario"] == "host"]) == host_rows({64: ITERATIONS}) | {("host", "latency", 64, 0)}
    barrier = frame[frame["scenario"] == "barrier"]
    assert sorted(zip(barrier["variant"], barrier["iteration"])) == sorted(
        (v, i) for v in ("multiprocessing", "shm") for i in range(ITERATIONS))


# --------------------------------------------------------------------------- a hung worker


def test_hung_worker_is_named_through_the_cli(tmp_path, clean_slate):
    code, output, seconds, out = cli_run(tmp_path, "hang:1:sample:2", *FAST, "--timeout", "1.5")
    assert code == 1
    text = " ".join(output.split())
    assert "worker 1 did not arrive at the barrier within 1.5 s" in text
    assert "worker 1 was last seen during sample 2 at 64 B" in text
    assert seconds < 1.5 + 10
    check_kept(*read_results(out), host_rows({64: 1}))


def test_worker_hung_inside_the_barrier_is_named(tmp_path, clean_slate):
    """It arrived, so the others pass the barrier; then they wait for it elsewhere and name it."""
    code, output, seconds, out = cli_run(tmp_path, "hang:1:barrier:3", *FAST, "--timeout", "1.5")
    assert code == 1
    text = " ".join(output.split())
    assert re.search(r"worker 1 did not arrive at the \w[\w ]* within 1.5 s", text), text
    assert "worker 1 was last seen inside the barrier" in text
    assert seconds < 1.5 + 10
    check_kept(*read_results(out), None)


def test_hung_worker_alone_is_caught_by_the_parent(monkeypatch, clean_slate):
    """A worker that stops while nobody waits for it (the other has finished) is found by
    its silent heartbeat."""
    from gpuipc_bench.scenario import Scenario, WorkerSpec

    class Lonely(Scenario):
        name = "lonely"
        min_workers = max_workers = default_workers = 2

        def workers(self, config, machine):
            return [WorkerSpec(0, "producer", None), WorkerSpec(1, "consumer", None)]

        def run(self, ctx):
            ctx.phase("sample", 64, 0)
            return iter(())

    monkeypatch.setenv("GPUIPC_BENCH_FAULT", "hang:1:sample")
    config = RunConfig(scenarios=("lonely",), sizes=(64,), timeout=1.0)
    scenario = Lonely()
    start = time.monotonic()
    outcome = run_scenario(scenario, config, scenario.workers(config, None), on_row=lambda r: None)
    assert isinstance(outcome.error, WorkerFailed)
    assert str(outcome.error) == ("worker 1 (consumer, CPU) made no progress for 1 s during sample 0 at 64 B "
                                  "(hung; see --timeout)")
    assert time.monotonic() - start < 1 + 10


def test_of_two_silent_workers_the_first_to_stop_is_named(monkeypatch, clean_slate):
    """Worker 1 hangs; worker 0 then blocks waiting for it where no deadline reaches it (as in
    a CUDA call). Both are silent; the one that stopped first is the culprit, not rank 0."""
    from gpuipc_bench.scenario import Scenario, WorkerSpec

    class Blocked(Scenario):
        name = "blocked"

        def workers(self, config, machine):
            return [WorkerSpec(0, "producer", None), WorkerSpec(1, "consumer", None)]

        def run(self, ctx):
            ctx.phase("sample", 64, 0)  # worker 1 hangs here (the fault)
            deadline = time.monotonic() + 30
            while ctx.segment.heartbeat(1) == 0 and time.monotonic() < deadline:
                time.sleep(0.001)
            ctx.phase("sample", 64, 1)  # worker 0's last sign of life, after worker 1's
            time.sleep(3600)
            return iter(())

    monkeypatch.setenv("GPUIPC_BENCH_FAULT", "hang:1:sample")
    config = RunConfig(scenarios=("blocked",), sizes=(64,), timeout=1.0)
    scenario = Blocked()
    outcome = run_scenario(scenario, config, scenario.workers(config, None), on_row=lambda r: None)
    assert str(outcome.error).startswith("worker 1 (consumer, CPU) made no progress for 1 s"), outcome.error


# --------------------------------------------------------------------------- signals to the parent


@pytest.mark.parametrize("signum,code,group", [(signal.SIGINT, 130, True), (signal.SIGTERM, 143, False)],
                         ids=["SIGINT-to-the-group", "SIGTERM-to-the-parent"])
def test_signal_mid_run_stops_everything(tmp_path, signum, code, group):
    """A worker held mid-run by a 'hang' fault; the signal then ends the run at once with
    its exit code, every process gone, and the CSV saying interrupted with the samples taken."""
    before = our_segments()
    proc, tag = held_run(tmp_path)
    start = time.monotonic()
    (os.killpg if group else os.kill)(proc.pid, signum)
    returncode, stdout, stderr = finish(proc, tag, timeout=20)
    assert time.monotonic() - start < 10
    assert returncode == code, stderr
    assert ("interrupted" if signum == signal.SIGINT else "terminated") in stderr
    assert "Traceback" not in stderr
    frame, meta = read_results(tmp_path / "r.csv")
    assert meta["partial"] == "true" and meta["status"].startswith("interrupted"), meta
    assert keys(frame) == host_rows({64: 2}), "every sample taken before the signal is kept"
    assert our_segments() == before


def test_workers_die_with_a_killed_parent(tmp_path):
    """SIGKILL of the parent runs no cleanup of ours: the workers still go (PR_SET_PDEATHSIG),
    and the shared segment was never in /dev/shm to be left there."""
    before = our_segments()
    proc, tag = held_run(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=20)
    assert_none_left(tag)
    assert our_segments() == before


def test_interrupt_keeps_rows_still_in_the_pipes(monkeypatch, tmp_path, clean_slate):
    """Ctrl-C while rows are on their way: the launcher still reads what the workers sent."""
    fired = tmp_path / "fired"
    monkeypatch.setenv("GPUIPC_BENCH_FAULT", "hang:1:sample:3")
    monkeypatch.setenv("GPUIPC_BENCH_FAULT_FIRED", str(fired))
    config = RunConfig(scenarios=("host",), sizes=(64,), iterations=ITERATIONS, warmup=WARMUP, timeout=60)
    host = SCENARIOS["host"]
    rows: list[dict] = []

    def on_row(row):
        rows.append(row)
        if len(rows) == 1:  # the first row; wait until the consumer has sent its two, then "Ctrl-C"
            deadline = time.monotonic() + 60
            while not fired.exists():
                assert time.monotonic() < deadline, "the fault did not fire"
                time.sleep(0.01)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_scenario(host, config, host.workers(config, None), on_row=on_row)
    got = {(r["path"], r["metric"], r["bytes"], r["iteration"]) for r in rows}
    assert got == host_rows({64: 2})


# --------------------------------------------------------------------------- corruption


def test_corruption_fails_the_run_naming_path_size_and_offset(tmp_path, clean_slate):
    code, output, _, out = cli_run(tmp_path, "corrupt", "--sizes", "4K", "--iterations", "3", "--warmup", "0")
    assert code == 1
    text = " ".join(output.split())
    assert re.search(r"worker 1 \(consumer, CPU\) failed during sample 0 at 4 KiB: verification failed on "
                     r"path host/shared-buffer at size 4096 B: first bad byte at offset 2048 "
                     r"\(expected 0x[0-9a-f]{2}, got 0x[0-9a-f]{2}\)", text), text
    frame, meta = read_results(out)
    assert meta["partial"] == "true"
    measured = frame[frame["path"] == "host"]
    assert len(measured) == 0, "a sample whose bytes are wrong yields no figure; the ceiling rows before it are kept"
    assert len(frame[frame["path"] == "ceiling"]) == 3


# --------------------------------------------------------------------------- GPU

GPU_PAIRS = ["staging", "ipc", "mmap"]


def gpu_memory_used(machine, device: int = 0) -> int | None:
    """Bytes in use on CUDA device `device`, from NVML (which makes no CUDA context)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001
        return None
    try:
        bus_id = machine.gpus[device].pci_bus_id
        handle = (pynvml.nvmlDeviceGetHandleByPciBusId(bus_id) if bus_id
                  else pynvml.nvmlDeviceGetHandleByIndex(device))
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
    except Exception:  # noqa: BLE001
        return None
    finally:
        pynvml.nvmlShutdown()


def assert_gpu_memory_back(machine, before: int | None, device: int = 0) -> None:
    """Used memory back within 64 MiB of `before`: the driver frees a dead process's memory
    as the process is reaped, so allow it a moment, no more."""
    if before is None:
        pytest.skip("NVML gives no memory figure here")
    deadline = time.monotonic() + 10
    after = gpu_memory_used(machine, device)
    while after > before + (64 << 20) and time.monotonic() < deadline:
        time.sleep(0.2)
        after = gpu_memory_used(machine, device)
    assert after <= before + (64 << 20), f"GPU memory not given back: {(after - before) >> 20} MiB more in use"


def run_gpu(monkeypatch, name, fault, sizes=(4096, 4 << 20), timeout=30.0):
    monkeypatch.setenv("GPUIPC_BENCH_FAULT", fault)
    scenario = SCENARIOS[name]
    config = RunConfig(scenarios=(name,), sizes=sizes, iterations=2, warmup=1, timeout=timeout)
    rows: list[dict] = []
    start = time.monotonic()
    outcome = run_scenario(scenario, config, scenario.workers(config, None), on_row=rows.append)
    return outcome, rows, time.monotonic() - start


@pytest.mark.gpu
@pytest.mark.parametrize("phase", ["setup", "sample:2", "barrier:3", "teardown"])
@pytest.mark.parametrize("name", GPU_PAIRS)
def test_gpu_worker_killed(monkeypatch, clean_slate, no_leaks, machine, name, phase):
    before = gpu_memory_used(machine)
    outcome, rows, seconds = run_gpu(monkeypatch, name, f"kill:1:{phase}")
    message = str(outcome.error)
    assert "worker 1 (consumer, GPU 0) was killed by SIGKILL" in message
    expected = {"setup": "during setup", "sample:2": "during sample", "barrier:3": "inside the barrier",
                "teardown": "during teardown"}[phase]
    assert expected in message, message
    assert seconds < 30
    if phase == "teardown":  # every sample was taken before it died
        measured = {r["bytes"] for r in rows if r["path"] == name and r["metric"] == "bandwidth"}
        assert measured == {4096, 4 << 20}
    assert all(r["verified"] is not False for r in rows)
    assert_gpu_memory_back(machine, before)


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_PAIRS)
def test_gpu_worker_hung(monkeypatch, clean_slate, no_leaks, machine, name):
    before = gpu_memory_used(machine)
    outcome, rows, seconds = run_gpu(monkeypatch, name, "hang:1:sample:2", timeout=3.0)
    message = str(outcome.error)
    assert "worker 1" in message and ("did not arrive" in message or "no progress" in message), message
    assert seconds < 3 + 15
    assert_gpu_memory_back(machine, before)


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_PAIRS)
def test_gpu_corruption_through_the_cli(tmp_path, clean_slate, name):
    out = tmp_path / "r.csv"
    result = CliRunner().invoke(cli, ["run", "-s", name, "--sizes", "4K", "--iterations", "2", "--warmup", "0",
                                      "--out", str(out)], env={"GPUIPC_BENCH_FAULT": "corrupt"},
                                catch_exceptions=False)
    text = " ".join(result.output.split())
    assert result.exit_code == 1, text
    assert re.search(rf"verification failed on path {name}/[\w-]+ at size 4096 B: first bad byte at "
                     r"offset 2048 \(expected 0x[0-9a-f]{2}, got 0x[0-9a-f]{2}\)", text), text
    assert read_results(out)[1]["partial"] == "true"


@pytest.mark.gpu
def test_gpu_sigint_mid_run(tmp_path, machine):
    before_memory = gpu_memory_used(machine)
    before = our_segments()
    fired = tmp_path / "fired"
    proc, tag = process_run(tmp_path, "hang:1:sample:2", "-s", "ipc", "--sizes", "4K", "--iterations", "3",
                            "--warmup", "1", "--out", "r.csv", fired=fired)
    wait_for_file(fired, proc, timeout=120)
    os.killpg(proc.pid, signal.SIGINT)
    returncode, _, stderr = finish(proc, tag, timeout=30)
    assert returncode == 130, stderr
    frame, meta = read_results(tmp_path / "r.csv")
    assert meta["partial"] == "true" and meta["status"].startswith("interrupted")
    assert our_segments() == before
    assert_gpu_memory_back(machine, before_memory)
