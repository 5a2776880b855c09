"""`report --plot` draws the committed runs of each shape without an error: a host-only NIXL run
(no GPU row, no latency row), a barrier-only run, a GPU pair's NCCL run and a `check` run. (All
of results/ takes minutes: these are one of each kind.)"""

from __future__ import annotations

import pytest

from conftest import ROOT, invoke

SHAPES = ["cpu-nixl-host-ucx-tls-tcp.csv", "h100-barrier-2-workers.csv", "h200x2-nccl-two-way.csv",
          "h100-check.csv"]


@pytest.mark.parametrize("name", SHAPES)
def test_report_plot_draws_a_committed_run(name, tmp_path):
    code, out = invoke("report", str(ROOT / "results" / name), "--plot", f"{tmp_path}/", "--summary")
    assert code == 0, out
    assert "Traceback" not in out
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written and all(p.endswith(".png") for p in written), written
    assert all((tmp_path / p).stat().st_size > 0 for p in written)
