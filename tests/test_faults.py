"""The fault suite: faults, signals and hostile input in every phase; nothing lost, nothing broken.

Faults are injected into real runs (GPUIPC_BENCH_FAULT, see gpuipc_bench/hooks/faults.py):
through the real launcher with forked workers (the `run_scenario` fixture), through
click's CliRunner, and into `python -m gpuipc_bench.cli` as a real process (conftest's
Run) that a 'hang' fault holds in the phase under test while a signal arrives; the test
waits for the fault to fire (GPUIPC_BENCH_FAULT_FIRED), never for a time. Each outcome
is checked from the outside: the time to exit, the exit code, the message, the rows the
CSV kept, and nothing left in /dev/shm or the process table.

The GPU tests at the end (marked `gpu`) do the same on the GPU scenarios and skip where there
is no GPU.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import FAULT_ENV, ROOT, Run, our_segments
from fakes import assert_gpu_memory_back, gpu_memory_used
from gpuipc_bench.cli import cli
from gpuipc_bench.errors import Interrupted, ResultsFormatError, WorkerFailed
from gpuipc_bench.results import read_results
from gpuipc_bench.engine.scenario import Scenario, WorkerSpec
from gpuipc_bench.scenarios import SCENARIOS

ITERATIONS, WARMUP = 3, 1
FAST = ["--sizes", "64,4K", "--iterations", str(ITERATIONS), "--warmup", str(WARMUP)]
SIGNAL_EXIT_S = 2.0  # a signal ends the run within this, whatever the workers are doing


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
    """(path, metric, bytes, iteration) of every row; no sample of one condition appears twice."""
    full = {(r.path, r.variant, r.measure, r.metric, int(r.bytes), int(r.iteration)) for r in frame.itertuples()}
    assert len(full) == len(frame), "a sample appears twice in the CSV"
    return {(path, metric, nbytes, i) for path, _, _, metric, nbytes, i in full}


def check_prefixes(frame) -> None:
    """Whatever a failed run kept is whole: each series is samples 0..k-1, each sample verified,
    and a size has rows only once every series of the sizes before it is complete."""
    series: dict[tuple, list[int]] = {}
    for r in frame.itertuples():
        series.setdefault((r.path, r.variant, r.measure, r.metric, int(r.bytes)), []).append(int(r.iteration))
        if r.metric == "bandwidth":
            assert bool(r.verified), f"an unverified sample was kept as good: {r}"
    for key, iterations in series.items():
        assert sorted(iterations) == list(range(len(iterations))), f"gaps in {key}: {iterations}"
    if set(frame["scenario"]) == {"host"} and any(key[-1] == 4096 for key in series):
        assert host_rows({64: ITERATIONS}, latency_sizes=(64,)) <= keys(frame)


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
    start = time.monotonic()
    result = CliRunner().invoke(cli, ["run", "-s", "host", "--out", str(out), *args],
                                env={FAULT_ENV: fault}, catch_exceptions=False)
    return result.exit_code, result.output, time.monotonic() - start, out


def one_line(text: str) -> str:
    return " ".join(text.split())  # rich may wrap a long line


def held_run(tmp_path, fault: str = "hang:1:sample:3", unfired: str | None = None) -> Run:
    """A real host run held by a 'hang' fault in the phase under test: the parent and two workers alive."""
    run = Run(tmp_path, "run", "-s", "host", "--out", "r.csv", *FAST, "--timeout", "60", fault=fault)
    action, rank, phase = fault.split(":")[:3]
    assert run.wait_for_fault(unfired=unfired) == f"{action}:{rank}:{phase}\n"
    return run


def wait_for_rows(path: Path, expected: set[tuple], timeout: float = 10.0):
    """The rows the workers sent before the fault reach the file as they arrive."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(ResultsFormatError):  # not written yet
            frame, meta = read_results(path)
            if keys(frame) >= expected:
                return frame, meta
        assert time.monotonic() < deadline, f"the rows did not reach {path}"
        time.sleep(0.02)


def signal_and_time(run: Run, signum: int, group: bool = False) -> float:
    """Send the signal; seconds until the run's parent has exited."""
    start = time.monotonic()
    (os.killpg if group else os.kill)(run.proc.pid, signum)
    try:
        run.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("the run did not end within 30 s of the signal")
    return time.monotonic() - start


# --------------------------------------------------------------------------- a worker killed in each phase

# (fault, the words of the error, the rows the CSV must hold: a set, or None for check_prefixes)
KILLS = {
    "setup": ("kill:1:setup", "worker 1 (consumer, CPU) was killed by SIGKILL during setup", "setup"),
    "first-size": ("kill:1:sample:3", "worker 1 (consumer, CPU) was killed by SIGKILL during sample 3 at 64 B",
                   host_rows({64: 2})),
    "second-size": ("kill:1:sample:5",
                    "worker 1 (consumer, CPU) was killed by SIGKILL during sample 2 at 4 KiB",
                    host_rows({64: ITERATIONS, 4096: 1}, latency_sizes=(64,))),
    "latency": ("kill:0:latency:2",
                "worker 0 (producer, CPU) was killed by SIGKILL during latency sample 2 at 64 B",
                host_rows({64: ITERATIONS}) | {("host", "latency", 64, 0)}),  # sample 0 is the warm-up
    "barrier": ("kill:1:barrier:4", "worker 1 (consumer, CPU) was killed by SIGKILL inside the barrier during ",
                None),
    "teardown": ("kill:1:teardown", "worker 1 (consumer, CPU) was killed by SIGKILL during teardown", COMPLETE),
    "producer-teardown": ("kill:0:teardown", "worker 0 (producer, CPU) was killed by SIGKILL during teardown",
                          COMPLETE),
}


@pytest.mark.parametrize("case", list(KILLS))
def test_kill_through_the_cli(tmp_path, clean_slate, case):
    fault, words, expected = KILLS[case]
    code, output, seconds, out = cli_run(tmp_path, fault, *FAST, "--timeout", "30")
    assert code == 1, output
    assert words in one_line(output)
    assert "Traceback" not in output
    assert seconds < 5, "a dead worker must end the run within seconds, not at the --timeout"
    check_kept(*read_results(out), expected)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["setup", "second-size", "barrier", "teardown"])
def test_kill_in_a_real_process(tmp_path, case):
    fault, words, expected = KILLS[case]
    before = our_segments()
    start = time.monotonic()
    run = Run(tmp_path, "run", "-s", "host", "--out", "r.csv", "-q", *FAST, "--timeout", "30", fault=fault)
    code, stdout, stderr = run.finish()
    assert time.monotonic() - start < 15
    assert code == 1, stderr
    assert words in one_line(stderr)
    assert "Traceback" not in stderr
    assert stdout.strip() == "r.csv"  # --quiet: the path, even on failure
    check_kept(*read_results(tmp_path / "r.csv"), expected)
    assert our_segments() == before


def test_raise_in_a_worker_names_it_and_shows_the_traceback_with_verbose(tmp_path, clean_slate):
    code, output, _, out = cli_run(tmp_path, "raise:1:sample:2", *FAST)
    assert code == 1
    assert ("worker 1 (consumer, CPU) failed during sample 2 at 64 B: "
            "RuntimeError: injected fault in phase sample") in one_line(output)
    assert "Traceback" not in output
    check_kept(*read_results(out), host_rows({64: 1}))
    code, output, _, _ = cli_run(tmp_path, "raise:1:sample:2", *FAST, "--verbose", out_name="v.csv")
    assert code == 1 and "Traceback" in output and "injected fault" in output


def test_a_killed_worker_ends_the_run(tmp_path, clean_slate):
    """host's producer dies in the latency phase: the run ends there, its rows kept, barrier
    never started (a process of the run died: the rest is not trusted to it)."""
    code, output, seconds, out = cli_run(tmp_path, "kill:0:latency:2", *FAST, "-s", "barrier", "--timeout", "30")
    assert code == 1 and seconds < 30
    assert "1 of 2 scenarios failed" in one_line(output)
    assert "error in scenario host (7 samples kept): worker 0 (producer, CPU) was killed" in one_line(output)
    frame, meta = read_results(out)
    assert meta["partial"] == "true" and "barrier" not in meta["status"] and "failed: host" in meta["status"]
    assert set(frame["scenario"]) == {"host"}
    assert keys(frame) == host_rows({64: ITERATIONS}) | {("host", "latency", 64, 0)}


def test_a_failed_scenario_does_not_stop_the_next(tmp_path, clean_slate):
    """host fails (its producer raises in the latency phase, which only host has); barrier
    then runs in full; the run exits 1 and the CSV says which failed and which completed."""
    code, output, _, out = cli_run(tmp_path, "raise:0:latency:2", *FAST, "-s", "barrier")
    assert code == 1
    assert "1 of 2 scenarios failed" in one_line(output)
    assert "error in scenario host (7 samples kept): worker 0 (producer, CPU) failed" in one_line(output)
    frame, meta = read_results(out)
    assert meta["partial"] == "true"
    assert "completed: barrier" in meta["status"] and "failed: host" in meta["status"]
    assert keys(frame[frame["scenario"] == "host"]) == host_rows({64: ITERATIONS}) | {("host", "latency", 64, 0)}
    barrier = frame[frame["scenario"] == "barrier"]
    assert sorted(zip(barrier["variant"], barrier["iteration"])) == sorted(
        (v, i) for v in ("multiprocessing", "shm") for i in range(ITERATIONS))


# --------------------------------------------------------------------------- a hung worker is named first


def test_hung_worker_is_named_first_through_the_cli(tmp_path, clean_slate):
    code, output, seconds, out = cli_run(tmp_path, "hang:1:sample:2", *FAST, "--timeout", "1")
    assert code == 1
    text = one_line(output)
    assert re.search(r"error in scenario host \(\d+ samples kept\): worker 1 \(consumer, CPU\) made no progress "
                     r"for 1 s during sample 2 at 64 B \(hung\? see --timeout\); worker 0 \(producer, CPU\) "
                     r"waited for it at ", text), text
    assert "mailbox" not in text and "slot" not in text, "no internal words"
    assert seconds < 1 + 5
    check_kept(*read_results(out), host_rows({64: 1}))


def test_worker_hung_inside_the_barrier_is_named(tmp_path, clean_slate):
    """It arrived, so the others pass the barrier; then they wait for it elsewhere and name it."""
    code, output, seconds, out = cli_run(tmp_path, "hang:1:barrier:3", *FAST, "--timeout", "1")
    assert code == 1
    text = one_line(output)
    assert "worker 1 (consumer, CPU) made no progress for 1 s inside the barrier" in text, text
    assert "worker 0 (producer, CPU) waited for it at" in text
    assert seconds < 1 + 5
    check_kept(*read_results(out), None)


class Lonely(Scenario):
    name = "lonely"

    def workers(self, config, machine):
        return [WorkerSpec(0, "producer", None), WorkerSpec(1, "consumer", None)]

    def run(self, ctx):
        ctx.phase("sample", 64, 0)
        return iter(())


def test_hung_worker_alone_is_caught_by_the_parent(run_scenario, clean_slate):
    """A worker that stops while nobody waits for it (the other has finished) is found by
    its silent heartbeat."""
    outcome, _, seconds = run_scenario(Lonely(), "hang:1:sample", sizes=(64,), timeout=1.0)
    assert isinstance(outcome.error, WorkerFailed)
    assert str(outcome.error) == ("worker 1 (consumer, CPU) made no progress for 1 s during sample 0 at 64 B "
                                  "(hung? see --timeout)")
    assert seconds < 1 + 5


class Blocked(Scenario):
    name = "blocked"

    def workers(self, config, machine):
        return [WorkerSpec(0, "producer", None), WorkerSpec(1, "consumer", None)]

    def run(self, ctx):
        ctx.phase("sample", 64, 0)  # worker 1 hangs here (the fault)
        deadline = time.monotonic() + 30
        # until worker 1 has reached the phase it hangs in (its heartbeat alone may be its start's:
        # under load worker 0 then went on first, and its sign of life came before worker 1's)
        while ctx.segment.phase(1)[0] != "sample" and time.monotonic() < deadline:
            time.sleep(0.001)
        ctx.phase("sample", 64, 1)  # worker 0's last sign of life, after worker 1's
        time.sleep(3600)
        return iter(())


def test_of_two_silent_workers_the_first_to_stop_is_named(run_scenario, clean_slate):
    """Worker 1 hangs; worker 0 then blocks waiting for it where no deadline reaches it (as in
    a CUDA call). Both are silent; the one that stopped first is the culprit, not rank 0."""
    outcome, _, _ = run_scenario(Blocked(), "hang:1:sample", sizes=(64,), timeout=1.0)
    assert str(outcome.error).startswith("worker 1 (consumer, CPU) made no progress for 1 s"), outcome.error


def test_workers_have_distinct_process_titles(tmp_path):
    run = held_run(tmp_path)
    try:
        workers = sorted(children_of(run.proc.pid))
        names = sorted(Path(f"/proc/{pid}/comm").read_text().strip() for pid in workers)
        assert names == ["host cons1", "host prod0"], names
    finally:
        os.kill(run.proc.pid, signal.SIGTERM)
        run.finish()


# --------------------------------------------------------------------------- a long phase is not a hang

PROGRESS_S = 1.5  # worker 0 is busy this long; the timeout is far shorter


class LongCeiling(Scenario):
    """Worker 0 measures a long ceiling, showing progress every 50 ms (a phase, or a row);
    worker 1 waits for it at the barrier meanwhile. A 'hang:0:ceiling:N' fault stops it."""

    name = "long-ceiling"

    def __init__(self, progress: str):
        self.progress = progress

    def workers(self, config, machine):
        return [WorkerSpec(0, "producer", None), WorkerSpec(1, "consumer", None)]

    def run(self, ctx):
        if ctx.rank == 0:
            end, i = time.monotonic() + PROGRESS_S, 0
            while time.monotonic() < end:
                if self.progress == "phases":  # what the harness does: one phase call per sample
                    ctx.segment.set_phase(0, "ceiling", 64 << 20, i, label="memcpy@host")
                    ctx.faults.hit("ceiling")
                else:  # a scenario that only sends rows
                    yield {"scenario": "host", "path": "ceiling", "variant": "memcpy@host", "metric": "bandwidth",
                           "bytes": 64 << 20, "iteration": i, "seconds": 0.01}
                time.sleep(0.05)
                i += 1
        ctx.sync()


@pytest.mark.parametrize("progress", ["phases", "rows"])
def test_a_long_phase_making_progress_is_not_a_hang(run_scenario, clean_slate, progress):
    outcome, _, seconds = run_scenario(LongCeiling(progress), sizes=(64,), timeout=0.3)
    assert outcome.ok, outcome.error
    assert seconds >= PROGRESS_S


def test_a_long_phase_that_stops_is_named_in_user_words(run_scenario, clean_slate):
    outcome, _, seconds = run_scenario(LongCeiling("phases"), "hang:0:ceiling:5", sizes=(64,), timeout=0.5)
    assert str(outcome.error) == (
        "worker 0 (producer, CPU) made no progress for 0.5 s while measuring the memcpy@host ceiling at 64 MiB "
        "(hung? see --timeout); worker 1 (consumer, CPU) waited for it at the barrier")
    assert seconds < 5


@pytest.mark.slow
def test_a_long_host_ceiling_with_a_short_timeout_completes(tmp_path):
    """`run -s host --sizes 64MiB` with many samples completes: the timeout does not end it
    while worker 0 measures the memcpy ceiling."""
    run = Run(tmp_path, "run", "-s", "host", "--sizes", "64MiB", "-n", "60", "--warmup", "0",
              "--timeout", "0.5", "--out", "r.csv", "-q")  # the ceiling alone takes about 1 s here
    code, _, stderr = run.finish(timeout=120)
    assert code == 0, stderr
    frame, meta = read_results(tmp_path / "r.csv")
    assert meta["partial"] == "false" and len(frame[frame["path"] == "host"]) == 60


# --------------------------------------------------------------------------- signals in every phase

# The phase under test, the fault that holds the run there, and the rows already taken.
HOLDS = {
    "setup": ("hang:1:setup", None),
    "warmup": ("hang:1:warmup:2", host_rows({64: ITERATIONS})),  # the ping-pong's warm-up at 64 B
    "sample": ("hang:1:sample:3", host_rows({64: 2})),
    "latency": ("hang:0:latency:2", host_rows({64: ITERATIONS}) | {("host", "latency", 64, 0)}),
    "barrier": ("hang:1:barrier:4", None),
    "teardown": ("hang:1:teardown", COMPLETE),
    "ceiling": ("hang:0:ceiling", None),
}
EXITS = {signal.SIGINT: (130, "interrupted"), signal.SIGTERM: (143, "terminated"), signal.SIGHUP: (129, "hung up")}


def check_signalled(run: Run, tmp_path, signum, seconds, expected_rows, phase) -> None:
    code, _, stderr = run.finish()
    word = EXITS[signum][1]
    assert code == EXITS[signum][0], stderr
    assert seconds < SIGNAL_EXIT_S, f"{seconds:.2f} s from {signal.Signals(signum).name} to exit during {phase}"
    assert "Traceback" not in stderr
    frame, meta = read_results(tmp_path / "r.csv")
    message = re.search(rf"{word} during \w+( at [\d.]+ [KMG]?i?B)?; (\d+) samples kept in r\.csv", one_line(stderr))
    assert message, stderr
    assert int(message.group(2)) == len(frame), "the message counts the samples the CSV kept"
    assert meta["partial"] == "true" and re.match(rf"{word} during \w+", meta["status"]), meta
    assert signal.Signals(signum).name in meta["status"]
    if expected_rows is not None:
        assert keys(frame) == expected_rows, "every sample taken before the signal is kept"
    check_prefixes(frame)


@pytest.mark.slow
@pytest.mark.parametrize("phase", list(HOLDS))
def test_sigterm_in_each_phase_ends_the_run_at_once(tmp_path, phase):
    before = our_segments()
    fault, expected = HOLDS[phase]
    run = held_run(tmp_path, fault)
    seconds = signal_and_time(run, signal.SIGTERM)
    check_signalled(run, tmp_path, signal.SIGTERM, seconds, expected, phase)
    assert our_segments() == before


@pytest.mark.parametrize("signum,group", [(signal.SIGINT, True), (signal.SIGHUP, False), (signal.SIGTERM, False)],
                         ids=["SIGINT-to-the-group", "SIGHUP-to-the-parent", "SIGTERM-to-the-parent"])
def test_signal_mid_sample(tmp_path, signum, group):
    """SIGINT as Ctrl-C sends it (to the whole group), SIGHUP as a closed terminal, SIGTERM as kill."""
    before = our_segments()
    run = held_run(tmp_path)
    seconds = signal_and_time(run, signum, group)
    check_signalled(run, tmp_path, signum, seconds, host_rows({64: 2}), "sample")
    assert our_segments() == before


IGNORE_SIGINT_THEN_EXEC = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                           "os.execvp(sys.argv[1], sys.argv[1:])")


def test_sigint_ignored_by_the_shell_still_ends_the_run(tmp_path):
    """A background job of a non-interactive shell starts with SIGINT ignored; the run still
    ends on it promptly."""
    run = Run(tmp_path, "run", "-s", "host", "--out", "r.csv", *FAST, "--timeout", "60",
              fault="hang:1:sample:3", prefix=("python3", "-c", IGNORE_SIGINT_THEN_EXEC))
    run.wait_for_fault()
    seconds = signal_and_time(run, signal.SIGINT)
    check_signalled(run, tmp_path, signal.SIGINT, seconds, host_rows({64: 2}), "sample")


def test_sighup_under_nohup_is_left_to_nohup(tmp_path):
    run = Run(tmp_path, "run", "-s", "host", "--out", "r.csv", *FAST, "--timeout", "60",
              fault="hang:1:sample:3", prefix=("nohup",))
    run.wait_for_fault()
    os.kill(run.proc.pid, signal.SIGHUP)
    time.sleep(0.3)
    assert run.proc.poll() is None, "nohup asked for SIGHUP to be ignored"
    seconds = signal_and_time(run, signal.SIGTERM)
    check_signalled(run, tmp_path, signal.SIGTERM, seconds, host_rows({64: 2}), "sample")


def test_parent_killed_keeps_the_rows_it_had(tmp_path):
    """SIGKILL of the parent runs no cleanup of ours, yet the rows it had received are
    in the file (appended as they came), the file says the run is partial, the workers go
    with the parent (PR_SET_PDEATHSIG) and the segment was never in /dev/shm to be left."""
    before = our_segments()
    run = held_run(tmp_path)
    wait_for_rows(tmp_path / "r.csv", host_rows({64: 2}))
    os.kill(run.proc.pid, signal.SIGKILL)
    code, _, _ = run.finish()
    assert code == -signal.SIGKILL
    frame, meta = read_results(tmp_path / "r.csv")
    assert keys(frame) == host_rows({64: 2})
    assert meta["partial"] == "true" and meta["status"] == "running"
    assert our_segments() == before


def test_interrupt_keeps_rows_still_in_the_pipes(tmp_path, monkeypatch, clean_slate):
    """Ctrl-C while rows are on their way: the launcher still reads what the workers sent,
    and says where it was interrupted."""
    fired = tmp_path / "fired"
    monkeypatch.setenv("GPUIPC_BENCH_FAULT_FIRED", str(fired))
    rows: list[dict] = []
    host = SCENARIOS["host"]

    def on_row(row):
        rows.append(row)
        if len(rows) == 1:  # the first row; wait until the consumer has sent its two, then "Ctrl-C"
            deadline = time.monotonic() + 60
            while not fired.exists():
                assert time.monotonic() < deadline, "the fault did not fire"
                time.sleep(0.01)
            raise KeyboardInterrupt

    from gpuipc_bench.harness import launcher
    from gpuipc_bench.config import RunConfig

    monkeypatch.setenv(FAULT_ENV, "hang:1:sample:3")
    config = RunConfig(scenarios=("host",), sizes=(64,), iterations=ITERATIONS, warmup=WARMUP, timeout=60)
    with pytest.raises(Interrupted) as info:
        launcher.run_scenario(host, config, host.workers(config, None), on_row=on_row)
    assert (info.value.signum, info.value.scenario, info.value.at) == (signal.SIGINT, "host", "at 64 B")
    got = {(r["path"], r["metric"], r["bytes"], r["iteration"]) for r in rows}
    assert got == host_rows({64: 2})


# --------------------------------------------------------------------------- a full /dev/shm


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


def test_full_dev_shm_is_one_line_not_a_sigbus(tmp_path):
    """In a mount namespace of its own, /dev/shm is a 4 KiB tmpfs, already full."""
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a mount namespace here: {probe.stderr.decode().strip()}")
    script = ("mount -t tmpfs -o size=4k tmpfs /dev/shm && head -c 4096 /dev/zero > /dev/shm/fill && "
              'exec "$@"')
    run = Run(tmp_path, "run", "-s", "host", *FAST, "--out", "r.csv",
              prefix=("unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"))
    code, _, stderr = run.finish()
    assert code == 1, stderr  # not -SIGBUS
    errors = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and re.fullmatch(r"Error: /dev/shm is full: the shared-memory segment needs \d+ bytes "
                                             r"\(0 bytes free\); free some space in /dev/shm", errors[0]), stderr
    assert read_results(tmp_path / "r.csv")[1]["partial"] == "true"


# --------------------------------------------------------------------------- --out on special files


def test_out_on_a_device_node_is_refused_and_left_alone(tmp_path):
    node = tmp_path / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod needs root")
    for force in ([], ["--force"]):
        code, output, _, _ = cli_run(tmp_path, None, "-n", "1", "--sizes", "64", *force, out_name="null")
        assert code == 2, output
        assert f"Error: --out {node}: is a character device, not a regular file" in one_line(output)
        assert stat.S_ISCHR(os.lstat(node).st_mode), "the device node must never be replaced"


def test_out_on_a_fifo_is_refused_and_left_alone(tmp_path):
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    code, output, _, _ = cli_run(tmp_path, None, "-n", "1", "--sizes", "64", "--force", out_name="pipe.csv")
    assert code == 2 and "is a FIFO (named pipe), not a regular file" in one_line(output)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_out_through_a_symlink_writes_the_target(tmp_path, clean_slate):
    target = tmp_path / "real.csv"
    target.write_text("old")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    code, output, _, _ = cli_run(tmp_path, None, "-n", "1", "--sizes", "64", "--force", out_name="link.csv")
    assert code == 0, output
    assert link.is_symlink() and os.readlink(link) == str(target), "the link is followed, never replaced"
    assert read_results(target)[1]["partial"] == "false"
    dangling = tmp_path / "dangling.csv"
    dangling.symlink_to(tmp_path / "new.csv")
    code, output, _, _ = cli_run(tmp_path, None, "-n", "1", "--sizes", "64", out_name="dangling.csv")
    assert code == 0, output
    assert dangling.is_symlink() and read_results(tmp_path / "new.csv")[1]["partial"] == "false"


def test_out_that_becomes_a_device_mid_run_is_left_alone(tmp_path, monkeypatch):
    """The check before the run passed; something puts a FIFO there meanwhile: the final
    write refuses to replace it (exit 1, one line) instead of deleting it."""
    from gpuipc_bench.results import writing as results  # where ResultsFile finds write_results

    out = tmp_path / "r.csv"
    real_write = results.write_results
    calls = []

    def swap_then_write(path, df, metadata):
        calls.append(path)
        if len(calls) == 2:  # after the first write: the run is under way
            os.unlink(out)
            os.mkfifo(out)
        return real_write(path, df, metadata)

    monkeypatch.setattr(results, "write_results", swap_then_write)
    code, output, _, _ = cli_run(tmp_path, None, "-n", "1", "--sizes", "64")
    assert code == 1 and "r.csv is not a regular file; not replacing it with the results" in one_line(output)
    assert stat.S_ISFIFO(os.lstat(out).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["r.csv"], "no temp file left"


# --------------------------------------------------------------------------- hostile files to report


def report(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["report", *args], catch_exceptions=False)
    return result.exit_code, result.output


def assert_one_error(code: int, output: str, *words: str) -> None:
    assert code == 2, output
    assert output.startswith("Error: ") and output.count("\n") == 1, output
    for word in words:
        assert word in output, output


def test_report_refuses_a_device_before_reading_it(tmp_path):
    zero = tmp_path / "zero"
    try:
        os.mknod(zero, stat.S_IFCHR | 0o666, os.makedev(1, 5))  # /dev/zero
    except PermissionError:
        pytest.skip("mknod needs root")
    start = time.monotonic()
    assert_one_error(*report(str(zero)), str(zero), "not a regular file")
    assert time.monotonic() - start < 5


def test_report_refuses_a_fifo_without_blocking(tmp_path):
    fifo = tmp_path / "results.csv"
    os.mkfifo(fifo)
    assert_one_error(*report(str(fifo)), "not a regular file")


def test_report_refuses_a_huge_file_without_reading_it(tmp_path):
    huge = tmp_path / "huge.csv"
    with open(huge, "wb") as fh:
        fh.truncate(3 << 30)  # sparse: nothing to read, but 3 GiB long
    start = time.monotonic()
    assert_one_error(*report(str(huge)), "larger than any results file")
    assert time.monotonic() - start < 5


def test_report_refuses_a_foreign_file_by_its_first_line(tmp_path):
    foreign = tmp_path / "big.csv"
    foreign.write_text("time,value\n" + "1,2\n" * 1000)
    assert_one_error(*report(str(foreign)), "not a gpuipc-bench results file", "'time,value'")


def small_run_text() -> str:
    return (Path(__file__).parent / "data" / "small_run.csv").read_text(encoding="utf-8")


def with_cell(column: str, value: str, row: int = 0) -> tuple[str, int]:
    """small_run.csv with one cell replaced: (text, the file's line number of that row)."""
    lines = small_run_text().split("\n")
    header_at = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    columns = lines[header_at].split(",")
    at = header_at + 1 + row
    cells = lines[at].split(",")
    cells[columns.index(column)] = value
    lines[at] = ",".join(cells)
    return "\n".join(lines), at + 1


@pytest.mark.parametrize("column,value,words", [
    ("seconds", "-1e-06", "is not a time"),
    ("seconds", "nan", "is not a time"),
    ("seconds", "inf", "is not a time"),
    ("seconds", "0", "is not a time"),
    ("bandwidth_gbps", "nan", "is not a bandwidth"),
    ("bandwidth_gbps", "-3", "is not a bandwidth"),
    ("bytes", "-64", "is less than 0"),
    ("batch", "0", "is less than 1"),
    ("metric", "speed", "is not one of"),
])
def test_report_names_the_file_line_and_column_of_a_bad_value(tmp_path, column, value, words):
    text, line = with_cell(column, value)
    path = tmp_path / "bad.csv"
    path.write_text(text, encoding="utf-8")
    assert_one_error(*report(str(path)), f"{path}: line {line}, column {column}: ", words)


def test_report_refuses_an_all_nan_file(tmp_path):
    lines = small_run_text().split("\n")
    header_at = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    at = lines[header_at].split(",").index("seconds")
    body = [",".join(c if j != at else "nan" for j, c in enumerate(line.split(","))) if line else line
            for line in lines[header_at + 1:]]
    path = tmp_path / "nan.csv"
    path.write_text("\n".join(lines[:header_at + 1] + body), encoding="utf-8")
    assert_one_error(*report(str(path)), f"line {header_at + 2}, column seconds")


# --------------------------------------------------------------------------- output that cannot be written


def test_ascii_terminal_degrades_instead_of_failing(tmp_path):
    run = Run(tmp_path, "run", "-s", "host", *FAST, "--out", "r.csv", env={"PYTHONIOENCODING": "ascii"})
    code, stdout, stderr = run.finish()
    assert code == 0, stderr
    assert "Traceback" not in stderr and "UnicodeEncodeError" not in stderr
    assert stdout.isascii() and stderr.isascii()
    assert "hand-off through shared memory" in stdout and "wrote r.csv" in stderr


def test_a_closed_stdout_does_not_fail_the_run(tmp_path):
    """`gpuipc-bench run ... | head -1`: the reader goes away; the run still ends well and says where its CSV is."""
    run = Run(tmp_path, "run", "-s", "host", *FAST, "--out", "r.csv")
    run.proc.stdout.close()  # the reader is gone before the summary is written
    code, _, stderr = run.finish()
    assert code == 0, stderr
    assert "wrote r.csv" in stderr and "Traceback" not in stderr
    assert read_results(tmp_path / "r.csv")[1]["partial"] == "false"


FEW = ["--sizes", "64", "--iterations", "2", "--warmup", "0"]


@pytest.mark.parametrize("closed", ["stderr", "stdout", "both"])
def test_a_closed_stdout_or_stderr_fails_nothing(tmp_path, closed):
    """`gpuipc-bench run 2>&1 | head -3`: the reader has gone before the run writes a word
    (a real process running two scenarios, its streams closed as it starts)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUIPC_BENCH_")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "gpuipc_bench.cli", "run", "-s", "host", "-s", "barrier",
                             "--out", "r.csv", *FEW], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for name in ("stdout", "stderr") if closed == "both" else (closed,):
        getattr(proc, name).close()
    for stream in (proc.stdout, proc.stderr):
        if not stream.closed:
            stream.read()
    assert proc.wait(timeout=120) == 0
    _, meta = read_results(tmp_path / "r.csv")
    assert meta["partial"] == "false" and meta["status"] == "completed: host,barrier", meta


# --------------------------------------------------------------------------- the header on disk


def headers_while_running(out, monkeypatch) -> list[dict]:
    """A launcher that runs nothing and reads the CSV's header each time a scenario starts."""
    import gpuipc_bench.harness.launcher
    from gpuipc_bench.harness.launcher import Outcome

    seen: list[dict] = []

    def fake_run_scenario(scenario, config, specs, on_row, **kwargs):
        seen.append(read_results(out)[1])
        return Outcome(scenario.name)

    monkeypatch.setattr(gpuipc_bench.harness.launcher, "run_scenario", fake_run_scenario)
    return seen


def test_the_header_says_partial_until_the_clean_end(tmp_path, monkeypatch):
    """What a SIGKILL at any moment between two scenarios leaves is what is on disk then: the
    header read while the second scenario runs must say partial."""
    out = tmp_path / "r.csv"
    seen = headers_while_running(out, monkeypatch)
    result = CliRunner().invoke(cli, ["run", "-s", "host", "-s", "barrier", "--out", str(out), "-q",
                                      "--launcher", "fork-fresh"])  # the stub stands in for fork-fresh's launcher
    assert result.exit_code == 0, result.output
    assert [meta["partial"] for meta in seen] == ["true", "true"]
    assert "running" in seen[1]["status"]
    assert read_results(out)[1]["partial"] == "false"


def test_the_run_writes_its_total_time_at_the_clean_end_only(tmp_path, monkeypatch):
    """`seconds.total` (schema 3) is the run's wall time, in the header only once the run ended."""
    out = tmp_path / "r.csv"
    seen = headers_while_running(out, monkeypatch)
    # fork-fresh: the stub stands in for its launcher (under the default process pool it stood in for barrier
    # alone, and host's default sweep ran for real)
    assert CliRunner().invoke(cli, ["run", "-s", "host", "-s", "barrier", "--out", str(out), "-q",
                                    "--launcher", "fork-fresh"]).exit_code == 0
    assert len(seen) == 2 and not any("seconds.total" in meta for meta in seen)
    assert float(read_results(out)[1]["seconds.total"]) >= 0


def test_sigkill_during_the_second_scenario_leaves_a_partial_file(tmp_path):
    """The real thing: the parent killed while the second scenario (host) sets up."""
    before = our_segments()
    # setup:2: the launcher's setup phase, then host's own (barrier has only the first)
    run = Run(tmp_path, "run", "-s", "barrier", "-s", "host", "--out", "r.csv", *FEW, fault="hang:1:setup:2")
    assert run.wait_for_fault() == "hang:1:setup\n"
    os.kill(run.proc.pid, signal.SIGKILL)
    code, _, _ = run.finish()
    assert code == -signal.SIGKILL
    frame, meta = read_results(tmp_path / "r.csv")
    assert meta["partial"] == "true", meta
    assert set(frame["scenario"]) == {"barrier"}
    assert our_segments() == before


# --------------------------------------------------------------------------- GPU

GPU_PAIRS = ["staging", "ipc", "mmap"]


GPU_SIZES = (4096, 4 << 20)


@pytest.mark.gpu
@pytest.mark.parametrize("phase", ["setup", "sample:2", "barrier:3", "teardown"])
@pytest.mark.parametrize("name", GPU_PAIRS)
def test_gpu_worker_killed(run_scenario, clean_slate, no_leaks, machine, name, phase):
    before = gpu_memory_used(machine)
    outcome, rows, seconds = run_scenario(name, f"kill:1:{phase}", sizes=GPU_SIZES, iterations=2, warmup=1,
                                          timeout=30.0)
    message = str(outcome.error)
    assert "worker 1 (consumer, GPU 0) was killed by SIGKILL" in message
    expected = {"setup": "during setup", "sample:2": "during sample", "barrier:3": "inside the barrier",
                "teardown": "during teardown"}[phase]
    assert expected in message, message
    assert seconds < 30
    if phase == "teardown":  # every sample was taken before it died
        measured = {r["bytes"] for r in rows if r["path"] == name and r["metric"] == "bandwidth"}
        assert measured == set(GPU_SIZES)
    assert all(r["verified"] is not False for r in rows)
    assert_gpu_memory_back(machine, before)


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_PAIRS)
def test_gpu_worker_hung(run_scenario, clean_slate, no_leaks, machine, name):
    before = gpu_memory_used(machine)
    outcome, _, seconds = run_scenario(name, "hang:1:sample:2", sizes=GPU_SIZES, iterations=2, warmup=1,
                                          timeout=3.0)
    message = str(outcome.error)
    assert message.startswith("worker 1 (consumer, GPU 0) made no progress for 3 s"), message
    assert seconds < 3 + 15
    assert_gpu_memory_back(machine, before)


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_PAIRS)
def test_gpu_corruption_through_the_cli(tmp_path, clean_slate, name):
    out = tmp_path / "r.csv"
    result = CliRunner().invoke(cli, ["run", "-s", name, "--sizes", "4K", "--iterations", "2", "--warmup", "0",
                                      "--out", str(out)], env={FAULT_ENV: "corrupt"}, catch_exceptions=False)
    text = one_line(result.output)
    assert result.exit_code == 1, text
    assert re.search(rf"verification failed on path {name}/[\w-]+ at size 4096 B: first bad byte "
                     r"(in ring slot \d+, )?at offset 2048 \(expected 0x[0-9a-f]{2}, got 0x[0-9a-f]{2}\)", text), text
    assert read_results(out)[1]["partial"] == "true"


@pytest.mark.gpu
def test_gpu_sigint_mid_sample(tmp_path, machine):
    before_memory = gpu_memory_used(machine)
    before = our_segments()
    run = Run(tmp_path, "run", "-s", "ipc", "--sizes", "4K", "--iterations", "3", "--warmup", "1",
              "--out", "r.csv", fault="hang:1:sample:2")
    run.wait_for_fault(timeout=120)
    seconds = signal_and_time(run, signal.SIGINT, group=True)
    check_signalled(run, tmp_path, signal.SIGINT, seconds, None, "sample")
    assert our_segments() == before
    assert_gpu_memory_back(machine, before_memory)


@pytest.mark.gpu
def test_gpu_sigint_while_measuring_the_ceiling(tmp_path, machine):
    """The ceiling on a GPU is one long phase; Ctrl-C in it ends the run within 2 s."""
    before = our_segments()
    # The consumer (worker 1) measures the ipc ceilings.
    run = Run(tmp_path, "run", "-s", "ipc", "--sizes", "256MiB", "--out", "r.csv", fault="hang:1:ceiling")
    run.wait_for_fault(timeout=120)
    seconds = signal_and_time(run, signal.SIGINT, group=True)
    check_signalled(run, tmp_path, signal.SIGINT, seconds, None, "ceiling")
    assert our_segments() == before


def mps_daemons() -> list[int]:
    """Live processes of private MPS daemons of this tool (their environment names one of our pipe dirs)."""
    from gpuipc_bench.modes import daemon as mps

    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                environ = Path(f"/proc/{name}/environ").read_bytes()
            except OSError:
                continue
            if f"{mps.PIPE_ENV}=".encode() + Path(mps.tempfile.gettempdir(), mps.PREFIX).as_posix().encode() \
                    in environ and mps.alive(int(name)):
                found.append(int(name))
    return found


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["ipc", "sharing"])
def test_gpu_parent_killed(tmp_path, machine, name):
    """SIGKILL of the parent mid-sample: the rows it had are in the file, every process of the
    run is gone, the GPU memory comes back, and (sharing) the private MPS daemon is gone within 5 s."""
    before_memory = gpu_memory_used(machine)
    before = our_segments()
    run = Run(tmp_path, "run", "-s", name, "--sizes", "4K,1M", "--iterations", "3", "--warmup", "1",
              "--out", "r.csv", fault="hang:1:sample:3")
    run.wait_for_fault(timeout=120)
    os.kill(run.proc.pid, signal.SIGKILL)
    killed = time.monotonic()
    run.finish()
    while mps_daemons() and time.monotonic() < killed + 5:
        time.sleep(0.1)
    assert not mps_daemons(), "the private MPS daemon outlived the run"
    frame, meta = read_results(tmp_path / "r.csv")
    assert meta["partial"] == "true" and len(frame) > 0, "the rows received before the kill are kept"
    assert our_segments() == before
    assert_gpu_memory_back(machine, before_memory)
