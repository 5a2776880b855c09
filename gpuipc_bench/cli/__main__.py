"""`python -m gpuipc_bench.cli`: the same as the gpuipc-bench command."""

from gpuipc_bench.cli import main

main()
