"""What `gpuipc-bench info` prints about a machine (gpuipc_bench.machine.probe gathers the facts)."""

from __future__ import annotations

import os

from gpuipc_bench.machine.probe import Machine


def render_info(machine: Machine, console) -> None:
    """What `gpuipc-bench info` prints."""
    from rich.markup import escape
    from rich.table import Table

    # Every fact is escaped: what a machine or an error says is text, never rich markup
    # (CuPy's install advice names the extras "[cuda12]" and "[cuda13]").
    console.print(
        f"[bold]CPU[/] {escape(machine.cpu_model)} ({machine.cpu_count} logical cores) · "
        f"host {escape(machine.hostname)} · {escape(machine.os)} · {escape(machine.python)}",
        highlight=False,
    )

    if machine.gpu_count == 0:
        why = machine.no_gpu_reason
        console.print(f"[bold red]No usable CUDA GPU[/]: {escape(why)}", highlight=False)
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None:
            console.print(f"  (CUDA_VISIBLE_DEVICES={escape(repr(visible))} limits what CUDA sees)", highlight=False)
    else:
        table = Table(title="GPUs", title_justify="left")
        for column in ("#", "name", "memory", "CC", "PCIe current (max)", "MIG", "PCI bus id"):
            table.add_column(column, justify="right" if column in ("#", "memory") else "left")
        for gpu in machine.gpus:
            mig = gpu.mig_mode
            if gpu.mig_instances:
                mig += f" ({len(gpu.mig_instances)} instances)"
            table.add_row(*(escape(cell) for cell in (
                str(gpu.index),
                gpu.name,
                f"{gpu.memory_bytes / 2**30:.1f} GiB",
                gpu.compute_capability,
                gpu.pcie_text() or "n/a",
                mig,
                gpu.pci_bus_id or "n/a",
            )))
        console.print(table)
        _render_mig(machine, console)
        if any(g.pcie_gen and g.pcie_max_gen and g.pcie_gen < g.pcie_max_gen for g in machine.gpus):
            console.print("  [dim]An idle GPU lowers its PCIe link speed; it returns to max under load.[/]")

    if machine.gpu_count > 1:
        _render_topology(machine, console)

    console.print(
        f"[bold]Driver[/] {escape(machine.driver_version or 'n/a')} · "
        f"[bold]CUDA driver[/] {escape(machine.cuda_driver_version or 'n/a')} · "
        f"[bold]CUDA runtime[/] {escape(machine.cuda_runtime_version or 'n/a')} · "
        f"[bold]CuPy[/] {escape(machine.cupy_version or 'not installed')}",
        highlight=False,
    )
    console.print(f"[bold]MPS[/] {escape(machine.mps)}", highlight=False)


def _render_mig(machine: Machine, console) -> None:
    """The MIG instances of each GPU that has them, one UUID a line."""
    from rich.markup import escape

    listed = False
    for gpu in machine.gpus:
        if not gpu.mig_instances:
            continue
        listed = True
        console.print(f"[bold]MIG instances of GPU {gpu.index}[/] ({len(gpu.mig_instances)})", highlight=False)
        for uuid in gpu.mig_instances:
            console.print(f"  {escape(uuid)}", highlight=False)
    if listed:
        console.print("  [dim]run on one MIG instance with --devices MIG-<uuid> (CUDA enumerates one "
                      "instance per process; IPC between instances is not supported).[/]", highlight=False)
    elif any(g.mig_mode == "enabled" for g in machine.gpus):
        console.print("  [dim]MIG is enabled, but NVML listed no instance (none created, or not visible).[/]",
                      highlight=False)


def _render_topology(machine: Machine, console) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="Topology (link, peer access)", title_justify="left")
    table.add_column("")
    for j in range(machine.gpu_count):
        table.add_column(f"GPU{j}", justify="center")
    for i in range(machine.gpu_count):
        cells = []
        for j in range(machine.gpu_count):
            if i == j:
                cells.append("X")
                continue
            peer = "✓" if (i, j) in machine.peer_access else "✗"
            cells.append(escape(f"{machine.links.get((i, j), '?')} {peer}"))
        table.add_row(f"GPU{i}", *cells)
    console.print(table)
    console.print(
        "  [dim]NV<k>: k NVLinks · PIX/PXB: PCIe switches · PHB: host bridge · "
        "NODE: one NUMA node · SYS: across sockets · ✓: peer access row->column[/]"
    )
