"""Every line the tool prints fits 80 columns at COLUMNS=80: report, list, info and every
--help; and none prints a traceback. (A plain run on this machine, with the line naming what
it skips and why where there is no GPU, and `run --quick` and `check`: test_trial.py.)"""

from __future__ import annotations

import pytest

from click.testing import CliRunner

from conftest import ROOT, invoke
from fakes import bench_process
from gpuipc_bench.cli import cli

COMMANDS = [(), ("run",), ("report",), ("list",), ("info",), ("check",)]


def assert_fits(output: str, width: int = 80) -> None:
    assert "Traceback" not in output
    wide = [line for line in output.splitlines() if len(line) > width]
    assert not wide, f"{len(wide)} line(s) over {width} columns, the first {len(wide[0])}: {wide[0]!r}"


@pytest.fixture(autouse=True)
def eighty(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "gpuipc-bench")
def test_help_fits(command):
    code, out = invoke(*command, "--help")
    assert code == 0, out
    assert_fits(out)


@pytest.mark.parametrize("args", [("list",), ("info",),
                                  ("report", str(ROOT / "results" / "cpu-nixl-host-ucx-tls-tcp.csv")),
                                  ("report", str(ROOT / "results" / "h200x2-nccl-two-way.csv"), "--summary")])
def test_list_info_and_report_fit(args):
    code, out = invoke(*args)
    assert code == 0, out
    assert_fits(out)


# --------------------------------------------------------------------------- COLUMNS that names no width

FAST = ["--sizes", "64", "--iterations", "2", "--warmup", "0"]


@pytest.mark.parametrize("columns", ["0", "-1", "abc", "5"])
def test_every_command_prints_whatever_columns_says(tmp_path, columns):
    env = {"COLUMNS": columns}
    out = tmp_path / "r.csv"
    runner = CliRunner()
    result = runner.invoke(cli, ["run", "-s", "host", "--out", str(out), *FAST], env=env)
    assert result.exit_code == 0 and "wrote" in result.output and "r.csv" in result.output, result.output
    result = runner.invoke(cli, ["report", str(out)], env=env)
    assert result.exit_code == 0 and "host" in result.output, result.output
    result = runner.invoke(cli, ["list"], env=env)
    assert result.exit_code == 0 and "GPUs" in result.output, result.output  # narrow: names are cut
    result = runner.invoke(cli, ["info"], env=env)
    assert result.exit_code == 0 and "CPU" in result.output, result.output


def test_columns_zero_in_a_real_process():
    proc = bench_process("list", env={"COLUMNS": "0"})
    assert proc.returncode == 0 and "barrier" in proc.stdout
