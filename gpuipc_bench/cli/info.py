"""`list` and `info`: what can run here, and what this machine is."""

from __future__ import annotations

import click
from rich.markup import escape

from gpuipc_bench.cli.console import stdout_console


@click.command("list")
def list_cmd():
    """List the scenarios and whether each can run on this machine (and if not, why)."""
    from rich.table import Table

    from gpuipc_bench.harness.plan import registry
    from gpuipc_bench.machine.probe import probe

    machine = probe()
    table = Table(title="scenarios", title_justify="left")
    for column in ("scenario", "what it measures", "GPUs", "workers", "runs here"):
        table.add_column(column)
    for scenario in registry().values():
        reason = scenario.waive_reason(machine)
        workers = f"{scenario.min_workers}" if scenario.min_workers == scenario.max_workers \
            else f"{scenario.min_workers}-{scenario.max_workers}"
        here = "[green]yes[/]" if reason is None else f"[yellow]no[/]: {escape(reason)}"
        if not scenario.in_default_run:
            here += " (not in the default run: name it with -s)"
        table.add_row(escape(scenario.name), escape(scenario.summary), str(scenario.gpus_needed), workers, here)
    stdout_console().print(table)


@click.command()
def info():
    """Describe this machine: CPU, GPUs, PCIe and NVLink topology, MIG/MPS, driver and CUDA."""
    from gpuipc_bench.machine.probe import probe
    from gpuipc_bench.machine.info import render_info

    render_info(probe(), stdout_console())

