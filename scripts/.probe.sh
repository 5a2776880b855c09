set -x
python3 --version; nproc; lscpu | head -20
python3 -m pip show cupy-cuda13x cuda-bindings cuda-core nvidia-ml-py click rich pandas 2>/dev/null | grep -E "^(Name|Version)"
nvidia-smi
nvidia-smi -q | grep -i -E "persistence|compute mode|timeslice|time slice|clocks|SM  |Memory  |Graphics|Applications" | head -40
nvidia-smi compute-policy --help 2>&1 | head -30
nvidia-smi compute-policy -l 2>&1 | head
python3 - <<'PY'
import pynvml as n
n.nvmlInit()
h=n.nvmlDeviceGetHandleByIndex(0)
print("affinity", [hex(x) for x in n.nvmlDeviceGetCpuAffinity(h, 4)])
for name in ("nvmlDeviceGetPersistenceMode","nvmlDeviceGetComputeMode"):
    try: print(name, getattr(n,name)(h))
    except Exception as e: print(name, "ERR", e)
for c in (n.NVML_CLOCK_SM, n.NVML_CLOCK_MEM):
    for f in ("nvmlDeviceGetClockInfo","nvmlDeviceGetApplicationsClock","nvmlDeviceGetMaxClockInfo","nvmlDeviceGetDefaultApplicationsClock"):
        try: print(f, c, getattr(n,f)(h,c))
        except Exception as e: print(f, c, "ERR", e)
print([x for x in dir(n) if 'imeslice' in x.lower() or 'TimeSlice' in x][:20])
try:
    print("timeslice", n.nvmlDeviceGetVgpuSchedulerState)
except Exception as e: print(e)
for f in [x for x in dir(n) if 'SchedulerLog' in x or 'Scheduler' in x]:
    print(f)
PY
python3 - <<'PY'
import cupy, time
print("cupy", cupy.__version__)
d=cupy.cuda.Device(0)
a=d.attributes
print("L2", a.get("L2CacheSize"), "SMs", a.get("MultiProcessorCount"), "persistL2", a.get("MaxPersistingL2CacheSize"))
from cupy.cuda import runtime
print([x for x in dir(runtime) if 'ost' in x and 'Pointer' in x])
print("hasHostGetDevicePointer", hasattr(runtime,'hostGetDevicePointer'))
import cuda.bindings, cuda.bindings.driver as drv
print("cuda.bindings", cuda.bindings.__version__)
import os; print(os.sched_getaffinity(0))
PY
ls /usr/local/nvidia/bin 2>/dev/null | head; which nvidia-cuda-mps-control
