"""Running scenarios in processes: the manager side (pyperf's Manager, nccl-tests' common.cu).

  plan.py        which scenarios run here, with which workers, pairs and sharing modes
  header.py      the CSV header of a run: the tool, the command, the machine, the paths' facts
  launcher.py    fork one scenario's workers, collect their rows, leave nothing behind
  pool.py        persistent process sets: forked once per run, scenario after scenario
  mpi_launch.py  the same workers as MPI ranks (mpirun / srun)
"""
