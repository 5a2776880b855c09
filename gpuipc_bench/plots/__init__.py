"""Plots of one run: bandwidth and one-way latency against message size, the GPU-pair
matrices, and set-up costs.

matplotlib is imported inside the functions, with the Agg backend, so that only the
commands that draw pay for it (and no display is needed). Every figure names the machine it
was measured on, its units and what the lines are, and has one legend, outside the panels;
the figures render the analysis (analysis.model's summary, the path facts) and compute
nothing of their own beyond choosing what to draw:

- bandwidth (bandwidth.py): a row of panels per link class (the same GPU; GPU pairs of one
  NVML link class; host and GPU), a panel per measure and sharing mode side by side, one
  line per path (its best variant at each size; pairs of a class: their median, shaded
  from the lowest to the highest pair's interval), the link's ceilings dashed;
- latency (latency.py): a panel per link class and sharing mode, a line per path/variant,
  GPU-initiated ping-pongs dashed with open markers;
- matrix (matrix.py): heatmaps GPU × GPU per path and measure, and the NVML links (only for
  a run over two GPU pairs or more);
- setup, setup-size (setup.py): one bar per one-time operation; cost against allocation size.

How the rows are cut into panels and lines: facets.py. save_plots() (files.py) writes them
for one run: into a folder (RUN-bandwidth.png, ...) or, given a file name, the bandwidth
figure there and the others beside it.
"""

from __future__ import annotations

from gpuipc_bench.plots.bandwidth import plot_bandwidth
from gpuipc_bench.plots.files import (
    FORMATS, KINDS, PLOTTERS, check_plot_dest, check_plot_targets, plot_targets, save_plots)
from gpuipc_bench.plots.latency import plot_latency
from gpuipc_bench.plots.matrix import plot_matrix
from gpuipc_bench.plots.setup import plot_setup, plot_setup_size, sized_setup
from gpuipc_bench.plots.style import pyplot, machine_title
from gpuipc_bench.plots.summary import analysed_summary

__all__ = ["FORMATS", "KINDS", "PLOTTERS", "pyplot", "analysed_summary", "check_plot_dest", "check_plot_targets",
           "machine_title", "plot_bandwidth", "plot_latency", "plot_matrix", "plot_setup", "plot_setup_size",
           "plot_targets", "save_plots", "sized_setup"]
