"""What a scenario is written against (nccl-tests' common.h): the contract and the worker's tools.

  scenario.py    the Scenario contract, the sweeps, WorkerSpec and WorkerContext
  sampler.py     the sample loop: groups, interleaving, the stop rule
  pair.py        what every producer/consumer GPU scenario shares (PairWorker)
  exchange.py    a batch of transfers between two workers, timed across both
  gpu_signal.py  GPU-ordered hand-over between two workers (a ring of interprocess events)
  pingpong.py    device-initiated ping-pong through each other's IPC-mapped buffer
  lanes.py       the lane counters of a pair: proven once per process, the workers in turn, the sampler's meter
"""
