"""scripts/lane_check.py on the committed pair run with lanes (two H200s over NV18)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT

PAIR = ROOT / "results" / "h200x2-lanes-pair.csv"


@pytest.mark.skipif(not PAIR.exists(), reason="reference runs not in this checkout")
def test_the_pair_run_shows_nvlink_bytes_to_the_byte_and_names_what_misses():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "lane_check.py"), str(PAIR)],
                          capture_output=True, text=True, cwd=ROOT)
    lines = done.stdout.splitlines()
    assert lines[-1] == "54 figures read, 18 outside the bar" and done.returncode == 1
    # every copy-engine IPC stream figure passes: NVLink bytes within 2% + 1 MiB of its batch
    ce = [line.split() for line in lines if line.split()[:4] == ["ipc", "ipc", "ce", "stream"]]
    assert ce and all(row[-1] == "2/2" and row[8] == "nvlink" for row in ce)
    # the PCIe of a file written before the read requests were taken out (1.09-1.17x) misses
    d2h = [line.split() for line in lines if "d2h@0" in line]
    assert d2h and all(row[-1] == "0/2" for row in d2h)


def test_a_file_without_lanes_is_refused_in_one_line():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "lane_check.py"),
                           str(ROOT / "results" / "h100-both-modes-default.csv")], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "no lane readings" in done.stderr
