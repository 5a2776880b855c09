"""Test and developer hooks, each off unless its environment variable is set.

  faults.py     fault injection for the test suite (GPUIPC_BENCH_FAULT)
  profiling.py  where a run's time goes (traces and profiles for the developers)
  plant.py      the check's planted faults and simulated node names
"""
