"""`--help` texts built from the code: the scenario registry, the presets, the default sizes and
the sampling rule, and no time that no run backs."""

from __future__ import annotations

import re

from click.testing import CliRunner

from gpuipc_bench import defaults, robust
from gpuipc_bench.cli import cli
from gpuipc_bench.gpu.timing import HOST_WARM_BYTES, LARGE_TRANSFER_BYTES, WARMUP_OPS
from gpuipc_bench.scenarios import SCENARIOS
from gpuipc_bench.sizes import format_size


def help_text(*args: str) -> str:
    """`gpuipc-bench ARGS --help` on one line, words separated by single spaces."""
    result = CliRunner().invoke(cli, [*args, "--help"], env={"COLUMNS": "2000"})
    assert result.exit_code == 0
    return " ".join(result.output.split())


def test_top_level_help_names_every_registered_scenario():
    text = help_text()
    assert all(name in text for name in SCENARIOS), text
    default = [name for name, s in SCENARIOS.items() if s.in_default_run]
    assert f"Scenarios ({len(default)} in the default run): {', '.join(default)}." in text


def test_run_help_states_what_the_code_does_and_no_time():
    text = help_text("run")
    assert not re.search(r"\babout \d+ ?s\b", text, re.I), "a time in --help that no run backs"
    quick = defaults.PRESETS["quick"]
    assert f"--quick A first look: {len(defaults.QUICK_GPU_SIZES)} sizes" in text
    assert all(format_size(n) in text for n in defaults.QUICK_GPU_SIZES + defaults.QUICK_HOST_SIZES)
    assert f"{quick[0]} samples per group after {quick[2]} warm-up sample" in text
    thorough = defaults.PRESETS["thorough"]
    assert f"{format_size(max(defaults.THOROUGH_GPU_SIZES))} in steps" in text
    assert f"{thorough[0]} samples per group after {thorough[2]} warm-up samples" in text
    assert "Default: 4 B, 4 KiB, 64 KiB, 1 MiB..256 MiB in steps of x4" in text
    assert defaults.DEFAULT_GPU_SIZES == (4, 4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20)
    assert (f"within +-{robust.PRECISION:.0%} ({robust.WIDE_MIN_SAMPLES}, or --max-samples if fewer, when the "
            "spread is wide)") in text
    assert f"[default: {defaults.MIN_SAMPLES}]" in text and f"at most. [default: {defaults.DEFAULT_SAMPLES[1]}]" in text
    assert (f"each batch also queues {WARMUP_OPS} untimed operations before its start event, 1 for transfers of "
            f"{format_size(LARGE_TRANSFER_BYTES)} or more, which moves {format_size(HOST_WARM_BYTES)} where the "
            "transfer crosses PCIe)") in text
