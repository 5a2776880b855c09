"""Hostile input, every option of every command: one `Error:` line naming what to change,
exit 2, no traceback, no work started (the launcher is a tripwire), nothing left in /dev/shm
and no child process. test_every_option_is_in_the_table fails when an option is added
without a case here. A few cases run again as real processes (the entry point, not CliRunner).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, assert_refused, invoke, our_segments

SMALL = str(Path(__file__).parent / "data" / "small_run.csv")
RUN = ["run", "-s", "host", "--out", "r.csv"]

# (arguments, words the one Error: line must hold)
CASES: list[tuple[list[str], list[str]]] = [
    # ---- the group
    (["--no-such-flag"], ["No such option '--no-such-flag'"]),
    (["--version=2"], ["--version", "does not take a value"]),
    (["bench"], ["No such command 'bench'"]),
    # ---- list, info
    (["list", "extra"], ["unexpected extra argument"]),
    (["list", "--all"], ["No such option '--all'"]),
    (["info", "extra"], ["unexpected extra argument"]),
    (["info", "--gpu", "0"], ["No such option '--gpu'"]),
    # ---- run
    (["run", "-s", "nosuch"], ["--scenario nosuch", "no such scenario"]),
    (["run", "-s", "hots"], ["--scenario hots", "did you mean host"]),
    (["run", "-s"], ["-s", "requires an argument"]),
    ([*RUN, "--sizes", "4K.."], ["--sizes", "not a byte size"]),
    ([*RUN, "--sizes", "-4"], ["--sizes"]),
    ([*RUN, "--sizes", "2048T"], ["--sizes", "larger than any buffer"]),
    ([*RUN, "--quick", "--thorough"], ["--quick", "--thorough"]),
    ([*RUN, "--quick=yes"], ["--quick", "does not take a value"]),
    ([*RUN, "--thorough=1"], ["--thorough", "does not take a value"]),
    ([*RUN, "--iterations", "0"], ["--iterations", "must be 1 to"]),
    ([*RUN, "-n", "1e99"], ["--iterations", "whole number"]),
    ([*RUN, "--min-samples", "nan"], ["--min-samples"]),
    ([*RUN, "--max-samples", "-3"], ["--max-samples", "must be 1 to"]),
    ([*RUN, "--min-samples", "9", "--max-samples", "3"], ["--max-samples 3", "--min-samples 9"]),
    ([*RUN, "--warmup", "x"], ["--warmup", "not a whole number"]),
    ([*RUN, "--devices", "a,b"], ["--devices", "comma-separated"]),
    ([*RUN, "--devices", "0,0"], ["--devices", "twice"]),
    ([*RUN, "--devices", "-1"], ["--devices", "start at 0"]),
    ([*RUN, "--workers", "65"], ["--workers", "must be 1 to 64"]),
    ([*RUN, "--workers", "64"], ["--workers 64", "scenario host takes"]),
    (["run", "-s", "host", "--out", "/proc/x.csv"], ["--out", "/proc"]),
    (["run", "-s", "host", "--out", "-"], ["--out -"]),
    (["run", "-s", "host", "-o", "."], ["--out", "is a directory"]),
    (["run", "-s", "host", "--out", "/dev/null"], ["--out", "not a regular file"]),
    ([*RUN, "--force=no"], ["--force", "does not take a value"]),
    ([*RUN, "--chunk", "4K,8K"], ["--chunk", "one size"]),
    ([*RUN, "--chunk", "0"], ["--chunk"]),
    ([*RUN, "--timeout", "inf"], ["--timeout"]),
    ([*RUN, "--timeout", "0"], ["--timeout", "must be 0.1 to"]),
    ([*RUN, "--quiet=1"], ["--quiet", "does not take a value"]),
    ([*RUN, "-v=1"], ["No such option"]),
    ([*RUN, "--verbose=1"], ["--verbose", "does not take a value"]),
    ([*RUN, "--plot", "x.txt"], ["--plot x.txt", ".png or .svg"]),
    ([*RUN, "--plot", "/dev/null/x.png"], ["--plot", "is a file, not a folder"]),
    ([*RUN, "--pairs", "0-0"], ["--pairs", "names one GPU twice"]),
    ([*RUN, "--pairs", "0_1"], ["--pairs", "not a pair of GPU indices"]),
    ([*RUN, "--pairs", "0-1", "--devices", "0"], ["--pairs", "--devices"]),
    ([*RUN, "--pairs", "all"], ["--pairs all", "no pair of two"]),
    ([*RUN, "--full"], ["--full", "give --pairs all too"]),
    ([*RUN, "--full", "--pairs", "0-1"], ["--full", "give --pairs all too"]),
    ([*RUN, "--budget", "-3"], ["--budget", "must be 1 to 86400 seconds"]),
    ([*RUN, "--budget", "soon"], ["--budget", "is not a number"]),
    ([*RUN, "--replicas", "0"], ["--replicas", "must be 1 to 8 process sets per run"]),
    ([*RUN, "--replicas", "two"], ["--replicas", "is not a whole number"]),
    ([*RUN, "--sharing", "shared"], ["--sharing shared", "unknown sharing mode 'shared'"]),
    ([*RUN, "--sharing", "mps,mps"], ["--sharing mps,mps", "names a mode twice"]),
    ([*RUN, "--sharing", ","], ["--sharing", "give one or more of"]),
    ([*RUN, "--launcher", "ssh"], ["--launcher", "'ssh' is not one of"]),
    ([*RUN, "--sample-order", "random"], ["--sample-order", "'random' is not one of"]),
    ([*RUN, "--order-seed", "-1"], ["--order-seed", "-1"]),
    ([*RUN, "--order-seed", "x"], ["--order-seed", "'x' is not a valid integer"]),
    # ---- report
    (["report"], ["Missing argument 'FILES...'"]),
    (["report", "missing.csv"], ["missing.csv", "no such file"]),
    (["report", "/dev/null"], ["/dev/null", "not a regular file"]),
    (["report", SMALL, "--format", "html"], ["--format", "'html' is not one of"]),
    (["report", SMALL, "--plot", "x.txt"], ["--plot x.txt", ".png or .svg"]),
    (["report", SMALL, "--plot-format", "svg"], ["--plot-format", "--plot"]),
    (["report", SMALL, "--plot", "f.png", "--plot-format", "svg"], ["--plot f.png", "--plot-format svg"]),
    (["report", SMALL, "--plot-format", "jpg", "--plot", "d"], ["--plot-format", "'jpg' is not one of"]),
    (["report", SMALL, "--amortise-over", "0"], ["--amortise-over"]),
    (["report", SMALL, "--amortise-over", "x"], ["--amortise-over", "not a valid integer"]),
    (["report", SMALL, "--min-effect", "nan"], ["--min-effect", "must be 0 to 100"]),
    (["report", SMALL, "--min-effect", "-1"], ["--min-effect", "must be 0 to 100"]),
    (["report", SMALL, "--force=1"], ["--force", "does not take a value"]),
    (["report", SMALL, "--detailed=1"], ["--detailed", "does not take a value"]),
    (["report", SMALL, "--summary=1"], ["--summary", "does not take a value"]),
    # ---- check
    (["check", "--expect", "missing.json"], ["--expect missing.json", "no such file"]),
    (["check", "--learn", "e.json"], ["--learn FILE", "CSV files"]),
    (["check", "x.csv"], ["x.csv", "--learn only"]),
    (["check", "--tolerance", "1.5"], ["--tolerance 1.5", "fraction from 0 to 1"]),
    (["check", "--tolerance", "x"], ["--tolerance", "not a valid float"]),
    (["check", "--format", "xml"], ["--format", "'xml' is not one of"]),
    (["check", "--out", "-"], ["--out -"]),
    (["check", "--output", "."], ["--output .", "is a directory"]),
    (["check", "--table", "/dev/null"], ["--table /dev/null", "not a regular file"]),
    (["check", "--deadline", "nan"], ["--deadline", "must be from 5 to"]),
    (["check", "--timeout", "-1"], ["--timeout", "must be from 1 to"]),
    (["check", "--preset", "nope"], ["--preset", "'nope' is not one of"]),
    (["check", "--learn-partial", "--tolerance", "-1"], ["--tolerance -1", "fraction from 0 to 1"]),
    (["check", "--drain", "--tolerance", "-1"], ["--tolerance -1", "fraction from 0 to 1"]),
    (["check", "--force=1"], ["--force", "does not take a value"]),
    (["check", "--launcher", "ssh"], ["--launcher", "'ssh' is not one of"]),
]


def _children() -> set[int]:
    me, found = os.getpid(), set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    if int(fh.read().rsplit(b")", 1)[1].split()[1]) == me:
                        found.add(int(name))
            except (OSError, IndexError, ValueError):
                continue
    return found


@pytest.fixture
def hostile(no_work):
    children = _children()
    yield no_work
    assert _children() <= children, "a child process was left behind"


@pytest.mark.parametrize("args,words", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_hostile_input(hostile, args, words):
    assert_refused(*invoke(*args), *words)


def test_report_refuses_to_overwrite_a_figure(hostile):
    (hostile / "f.png").write_bytes(b"keep")
    assert_refused(*invoke("report", SMALL, "--plot", "f.png"), "--plot f.png", "exists", "--force")
    assert (hostile / "f.png").read_bytes() == b"keep"


def test_run_refuses_to_overwrite_a_figure(hostile):
    (hostile / "f.png").write_bytes(b"keep")
    assert_refused(*invoke(*RUN, "--plot", "f.png"), "--plot f.png", "exists", "--force")


def test_every_option_is_in_the_table():
    """Each option of each command appears in some case (add one with the option)."""
    from gpuipc_bench.cli import cli

    used = {word.split("=")[0] for args, _ in CASES for word in args}
    missing = [f"{cli.name if command is cli else command.name} {param.opts[0]}"
               for command in (cli, *cli.commands.values()) for param in command.params
               if param.param_type_name == "option" and not set(param.opts) & used]
    assert not missing, f"options without a hostile case: {missing}"
    assert set(cli.commands) <= used


REAL = [
    (["run", "-s", "host", "--out", "/proc/x.csv"], ["--out"]),
    (["run", "--quick", "--thorough"], ["--quick", "--thorough"]),
    (["report", SMALL, "--min-effect", "nan"], ["--min-effect"]),
    (["list", "extra"], ["unexpected extra argument"]),
]


@pytest.mark.parametrize("args,words", REAL, ids=[" ".join(a[:3]) for a, _ in REAL])
def test_hostile_input_in_a_real_process(tmp_path, args, words):
    before = our_segments()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUIPC_BENCH_")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-m", "gpuipc_bench.cli", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:"), proc.stderr
    assert all(word in lines[0] for word in words), lines[0]
    assert our_segments() == before and not list(tmp_path.iterdir())
