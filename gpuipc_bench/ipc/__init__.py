"""Operating-system plumbing between the processes of a run; no CUDA, no scenario.

  segment.py   the shared segment every worker of a scenario sees (simpleIPC's shared struct)
  barrier.py   the shared-memory barrier with an abort word and a deadline
  shared.py    shared memory reached by forked, spawned and MPI-started workers alike
  fdpass.py    file descriptors between workers (SCM_RIGHTS), for VMM and memory-pool handles
  janitor.py   a small process that cleans up if the parent is killed
"""
