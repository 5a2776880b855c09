"""The CUDA layer: one module per concern, nothing touches CUDA at import time.

    errors    CUDA errors as one-line BenchErrors naming the call and the GPU
    memory    device, mapped, pinned and registered memory; streams; interprocess events; rings
    kernels   the CUDA C kernels (copy.cu, pingpong.cu), compiled by NVRTC through CuPy
    timing    the gate, the gated batch timed with events, setup timing
    device    one worker's GPU (Gpu) and peer access
    ceilings  what the hardware does in one process, measured like the paths
    lanes     the known copies that prove the lane counters (pinned host each way, peer)

CuPy is imported inside functions only: the parent process never initialises CUDA (a
child forked after its parent did cannot use CUDA at all). The layer builds no result
rows and knows nothing of how the GPUs are shared.
"""
