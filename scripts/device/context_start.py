"""Start-up costs by what a process sees: a CUDA context with one GPU or every GPU visible (and peer
access to the others), NVML's init and handles, CuPy's import; each case in 5 fresh processes.

    python3 scripts/device/context_start.py     # on a node of two GPUs or more

Prints a line per case and visibility (seconds) and writes $OUT/context_start.json
(results/h200x2-context-start.txt: two H200s)."""

import json
import os
import subprocess
import sys

TIMED = "import time; t = time.perf_counter(); {body}; print(time.perf_counter() - t)"
CASES = {
    "cuda_ctx": "import cupy; r = cupy.cuda.runtime; r.setDevice(0); r.free(0)",
    "cuda_ctx_peer": "import cupy; r = cupy.cuda.runtime; r.setDevice(0); r.free(0); "
                     "[r.deviceEnablePeerAccess(k) for k in range(1, r.getDeviceCount())]",
    "nvml_all": "import pynvml; pynvml.nvmlInit(); "
                "[pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(k)) "
                "for k in range(pynvml.nvmlDeviceGetCount())]",
    "import_cupy": "import cupy",
}


def timed(body: str, env: dict) -> float | str:
    done = subprocess.run([sys.executable, "-c", TIMED.format(body=body)], env=env, capture_output=True, text=True)
    try:
        return round(float(done.stdout.strip().splitlines()[-1]), 4)
    except (IndexError, ValueError):
        return done.stderr.strip()[-200:]


def main() -> None:
    out = {}
    for name, body in CASES.items():
        for visible in ("0", "all"):
            env = dict(os.environ)
            env.pop("CUDA_VISIBLE_DEVICES", None)
            if visible == "0":
                env["CUDA_VISIBLE_DEVICES"] = "0"
            values = [timed(body, env) for _ in range(5)]
            out[f"{name} visible={visible}"] = values
            print(f"{name:20s} visible={visible:3s} {values}", flush=True)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "context_start.json"), "w") as file:
        json.dump(out, file, indent=1)


if __name__ == "__main__":
    main()
