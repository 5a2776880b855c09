"""What this node is, learned without a CUDA context in the parent.

  probe.py  the machine: CPU, GPUs, links, driver and library versions (Machine, probe())
  nvml.py   what NVML says: PCI ids, PCIe and NVLink topology, MIG mode, clocks, nearby CPUs
  mig.py    pairs of workers on the instances of a GPU in MIG mode
  lanes.py  NVML's NVLink and PCIe byte counters: read, proven on known copies, a sample's lane
            (LaneMeter); docs/methods/lanes.md
  info.py   what `gpuipc-bench info` prints
"""
