"""The results table and its CSV file (schema version 3).

One row per sample, tidy long format (see COLUMNS). The CSV carries the machine
facts with it, so a file pasted into an issue stands alone:

    # gpuipc-bench results
    # schema_version: 3
    # host: node17
    # gpu.0.name: NVIDIA H100 80GB HBM3
    scenario,path,variant,metric,...
    ipc,ipc,ce,bandwidth,...

Metadata is a flat str -> str dict, one `# key: value` line each; backslashes,
newlines and carriage returns in values are escaped as \\\\, \\n and \\r, other
control characters as \\xHH.
A run's file is written atomically (temp file in the same folder, fsync, rename) at its
start and after every scenario, and each row is appended (and flushed) as it arrives
in between, so a killed run keeps every sample it had sent and its header says the run
is partial. Only a regular file is ever replaced; a symlink is followed. A reader
drops the torn last line a kill in the middle of an append can leave in a partial file.

Schema history (read_results reads every version; rows come out in the newest form):
  1  first release (2026-11).
  2  columns `measure` (stream | handoff | pingpong | '') and `l2_resident`; kernel-copy
     ceilings named '<kind>-sm@...' next to the copy-engine '<kind>@...'; setup rows
     repeated (iteration 0..n-1); path facts in the header ('# path.<name>: ...').
     A schema-1 file reads with measure 'handoff' for staging and host bandwidth rows
     (they handed every transfer over), 'stream' for the other bandwidth rows,
     'pingpong' for latency rows, and l2_resident unknown (empty).
  3  columns `mps_thread_pct` (MPS active thread percentage; empty unless sharing is mps),
     `transport` (what a library really used: NCCL 'P2P/CUMEM', 'SHM', 'NET/Socket', UCX
     'cuda_ipc'; '' for raw CUDA paths), `node` (host name of the node that measured the row;
     the writer fills in the header's `host` where a row leaves it empty), `seq` (the order in
     which the sample was taken within its worker set; -1 unknown) and `sm_clock_mhz` (SM clock
     sampled through NVML for the group; NaN unknown). Header keys `seconds.total` (the run's
     wall time, written at its clean end only) and, optional, `order_seed` (the seed of a
     shuffled measuring order). The header says `partial: true` until the clean end.
     An older file reads with these columns empty (NA/NaN/'') and seq -1. Column `replica` (the
     process set behind a sample: 1 the first pass, 2 the resampling pass's fresh set;
     harness.resample) came later within schema 3: a file without it reads replica 1.
     Optional columns (a schema-3 file without them reads them empty, '' and NaN): `lane`,
     `lane_nvlink_bytes` and `lane_pcie_bytes` (which lane carried a sample's bytes, from NVML's
     byte counters, and the header's `lanes.*` lines: gpuipc_bench.machine.lanes).

The modules: rows.py (the columns, new_row, typed frames), writing.py (ResultsFile, atomic
writes), reading.py (read_results, every schema version), table.py (the table parsed cell by
cell: what is valid, and the wording of what is not), vectorised.py (the same table parsed a
column at a time, for large files; it hands what it cannot vouch for to table.py).
"""

from gpuipc_bench.results.reading import MAX_RESULTS_BYTES, read_results
from gpuipc_bench.results.rows import (
    AGGREGATE_SUFFIX, BOOL_COLUMNS, COLUMNS, FLOAT_COLUMNS, INT_COLUMNS, MAGIC, MEASURES, METRICS, SCHEMA_VERSION,
    STR_COLUMNS, base_mode, empty_frame, new_row, typed_frame,
)
from gpuipc_bench.results.writing import (
    ResultsFile, ResultsWriteError, claim_free_name, default_results_path, format_results, format_rows, write_results,
)

__all__ = [
    "AGGREGATE_SUFFIX", "BOOL_COLUMNS", "COLUMNS", "FLOAT_COLUMNS", "INT_COLUMNS", "MAGIC", "MAX_RESULTS_BYTES",
    "MEASURES", "METRICS",
    "SCHEMA_VERSION", "STR_COLUMNS", "ResultsFile", "ResultsWriteError", "base_mode", "claim_free_name",
    "default_results_path", "empty_frame", "format_results", "format_rows",
    "new_row", "read_results", "typed_frame", "write_results",
]
