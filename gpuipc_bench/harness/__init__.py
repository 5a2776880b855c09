"""Running scenarios in processes: the manager side (pyperf's Manager, nccl-tests' common.cu).

  plan.py        which scenarios run here, with which workers, pairs and sharing modes
  session.py     a run: every planned scenario in its mode and process set, the results file kept current;
                 `run` and `check` alike (check: an independent plan, each run on its own, no file)
  header.py      the CSV header of a run: the tool, the command, the machine, the paths' facts
  launcher.py    fork one scenario's workers, collect their rows, leave nothing behind
  pool.py        persistent process sets: forked once per run, scenario after scenario
  mpi_launch.py  the same workers as MPI ranks (mpirun / srun)
  supervision.py the worker protocol: one dispatch of the workers' messages, how a worker failed
  known.py       the best figures the run knows so far (a group far behind them decided early)
  classes.py     GPU pairs by link class, and the resweep of a pair outside its class
  estimate.py    how long a plan should take: the starts of processes the run makes, each run's costs
  rounds.py      disjoint GPU pairs at once (--pairs all on an all-NVLink node): the tournament, the proof
  resample.py    after the first pass: where a decision is open or can move, measured again on a fresh set
"""
