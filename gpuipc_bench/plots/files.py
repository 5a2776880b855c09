"""Where the figures of a run go, the checks made before any work, and writing them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from gpuipc_bench.errors import UsageError
from gpuipc_bench.plots.bandwidth import plot_bandwidth
from gpuipc_bench.plots.latency import plot_latency
from gpuipc_bench.plots.matrix import has_pairs, plot_matrix
from gpuipc_bench.plots.setup import plot_setup, plot_setup_size, sized_setup
from gpuipc_bench.plots.style import DPI, pyplot
from gpuipc_bench.plots.summary import analysed_summary

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FORMATS = ("png", "svg")
PLOTTERS = {"bandwidth": plot_bandwidth, "latency": plot_latency, "setup": plot_setup,
            "setup-size": plot_setup_size, "matrix": plot_matrix}
KINDS = ("bandwidth", "latency", "setup", "setup-size", "matrix")


def plot_targets(dest: Path, stem: str, fmt: str | None, several: bool) -> dict[str, Path]:
    """Where each figure of a run goes. dest is a folder (existing, or named without a
    suffix): dest/STEM-bandwidth.FMT, ...; dest is a file (FILE.png or FILE.svg): the
    bandwidth figure there, the others beside it (FILE-latency.png, FILE-setup.png);
    with several runs, each run's stem is added (FILE-STEM.png)."""
    dest = Path(dest)
    suffix = dest.suffix.lower().lstrip(".")
    if dest.is_dir() or not suffix:
        fmt = fmt or "png"
        return {kind: dest / f"{stem}-{kind}.{fmt}" for kind in KINDS}
    if suffix not in FORMATS:
        raise UsageError(f"--plot {dest}: a folder, or a file ending in .png or .svg")
    if fmt and fmt != suffix:
        raise UsageError(f"--plot {dest} and --plot-format {fmt} disagree: drop one")
    base = dest.with_suffix("")
    if several:
        base = base.with_name(f"{base.name}-{stem}")
    return {kind: (base if kind == "bandwidth" else base.with_name(f"{base.name}-{kind}")).with_suffix(f".{suffix}")
            for kind in KINDS}


def check_plot_targets(dest: Path, stems: list[str], fmt: str | None, force: bool) -> None:
    """Refuse, before any work, a --plot that names a bad file type or would overwrite a figure
    (any file save_plots may write for these runs) without --force."""
    for stem in stems:
        for target in plot_targets(dest, stem, fmt, len(stems) > 1).values():
            if not force and os.path.lexists(target):
                raise UsageError(f"--plot {dest}: {target} exists; use --force to overwrite it")


def check_plot_dest(dest: Path, option: str = "--plot") -> None:
    """Refuse a --plot destination that cannot be written, before any work."""
    dest = Path(dest)
    folder = dest if dest.is_dir() or not dest.suffix else dest.parent
    probe = folder
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"{option} {dest}: {probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {dest}: cannot write into {probe}")


def save_plots(df: pd.DataFrame, meta: Mapping[str, str], dest: Path, stem: str, fmt: str | None = None,
               several: bool = False, summary: pd.DataFrame | None = None) -> list[Path]:
    """Draw the figures of one run and write them; returns the files written. A run without
    setup rows gets no setup figure. `summary`: the run's analysed summary (analysis.model:
    with its `candidate` column), analysed here when not given."""
    plt = pyplot()
    targets = plot_targets(dest, stem, fmt, several)
    summary = analysed_summary(df, meta) if summary is None else summary
    if not (summary["metric"] == "setup").any():
        targets.pop("setup")
    if sized_setup(summary).empty:
        targets.pop("setup-size")
    if not has_pairs(summary, meta):
        targets.pop("matrix")
    written = []
    for kind, target in targets.items():
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"--plot {dest}: cannot create {target.parent} ({exc.strerror or exc})") from None
        fig = PLOTTERS[kind](df, meta, summary)
        # drawn into a temp name beside the target, then renamed: a full disk leaves no cut or empty file
        temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            if target.suffix == ".png":
                _save_png(fig, temp)
            else:
                fig.savefig(temp, dpi=DPI, format=target.suffix.lstrip("."))
            os.replace(temp, target)
        except OSError as exc:
            raise UsageError(f"--plot {dest}: cannot write {target} ({exc.strerror or exc})") from None
        finally:
            plt.close(fig)
            if temp.exists():
                temp.unlink()
        written.append(target)
    return written


def _save_png(fig: Figure, target: Path) -> None:
    """A PNG with an adaptive 256-colour palette: a third of the size of a full-colour
    one, small enough to attach to an issue or show in a README, and alike to the eye."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=DPI, format="png")
    try:
        from PIL import Image
    except ImportError:  # matplotlib needs Pillow, but keep the full-colour file if it is missing
        target.write_bytes(buffer.getvalue())
        return
    buffer.seek(0)
    with Image.open(buffer) as image:
        image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE) \
            .save(target, format="PNG", optimize=True)
