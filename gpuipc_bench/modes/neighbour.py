"""A busy neighbour: a sharing mode (time-sliced or MPS) with a third process keeping the pair's
GPU busy while the pair is measured: what a user sharing a GPU pays for a neighbour.

`--sharing time-sliced+compute,mps+copy`: the base mode as it is, and beside the pair a process of
that mode (an MPS client under mps) that, until the run leaves the mode, either runs a compute-bound
kernel on every SM back to back (`compute`: fused multiply-adds in registers, no memory traffic) or
copies 256 MiB device to device with the copy engine back to back (`copy`: HBM and a copy engine
busy). The rows' `sharing` is the mode's name ('time-sliced+compute'), so each figure sits beside
the same figure without the neighbour. The neighbour is forked like a worker (the parent never
touches CUDA), says when its first work has run, and is ended (SIGTERM, then SIGKILL) when the run
moves to another mode, at the run's end, and with the parent (PR_SET_PDEATHSIG)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

from gpuipc_bench.errors import BenchError
from gpuipc_bench.modes.base import Mode

KINDS = {
    "compute": "a compute-bound kernel on every SM, back to back",
    "copy": "256 MiB device-to-device copies by the copy engine, back to back",
}
READY_S = 60.0  # the neighbour's CUDA start and first work, at most
COPY_BYTES = 256 << 20


class Neighbour(Mode):
    """A base mode (time-sliced, mps, mps:PCT) with a busy third process on the pair's GPU."""

    def __init__(self, base: Mode, kind: str):
        if kind not in KINDS:
            raise ValueError(kind)
        self.base, self.kind = base, kind
        self.name = f"{base.name}+{kind}"
        self.summary = f"{base.summary}; beside the pair, a third process: {KINDS[kind]}"
        self.scenarios = base.scenarios
        self.device: int | None = None  # the pair's GPU (set by the harness before start)
        self.process = None
        self.said = ""  # what the neighbour reported at its start

    def unavailable(self) -> str | None:
        return self.base.unavailable()

    def start(self) -> None:
        self.base.start()
        if self.process is not None and self.process.is_alive():
            return
        self.process, self.said = start_neighbour(self.kind, self.device or 0, self.base.env())

    def env(self) -> dict[str, str]:
        return self.base.env()  # (the rows say 'mps+copy': the harness hands the workers the mode's name)

    def facts(self) -> dict[str, str]:
        facts = dict(self.base.facts())
        if self.process is not None:
            facts[f"sharing.{self.name}"] = (f"a third process (pid {self.process.pid}) on GPU {self.device or 0}: "
                                             f"{KINDS[self.kind]}; {self.said}")
        return facts

    def leave(self) -> list[str]:
        """The run moves to another mode: the neighbour goes (what happened to it, for the notes)."""
        process, self.process = self.process, None
        return end_neighbour(process, self.name)

    def stop(self) -> list[str]:
        notes = self.leave()
        return notes + self.base.stop()


def start_neighbour(kind: str, device: int, env: dict[str, str], target=None):
    """Fork the busy process; return it once it says its first work ran, and what it said.
    BenchError (the process ended) when it cannot start: the mode then cannot run."""
    context = multiprocessing.get_context("fork")
    reader, writer = context.Pipe(duplex=False)
    process = context.Process(target=target or _busy, args=(kind, device, env, writer), daemon=True,
                              name=f"gpuipc-bench-neighbour-{kind}")
    process.start()
    writer.close()
    try:
        if not reader.poll(READY_S):
            end_neighbour(process, kind)
            raise BenchError(f"the busy neighbour ({kind}) did not start within {READY_S:g} s")
        try:
            said = reader.recv()
        except EOFError:
            said = ("error", "it exited without a word")
        if said[0] != "ready":
            end_neighbour(process, kind)
            raise BenchError(f"the busy neighbour ({kind}) could not start: {said[1]}")
        return process, said[1]
    finally:
        reader.close()


def end_neighbour(process, name: str) -> list[str]:
    """SIGTERM, then SIGKILL a second later; reaped. A neighbour that had died on its own is said."""
    if process is None:
        return []
    notes = []
    if not process.is_alive() and process.exitcode not in (None, 0, -signal.SIGTERM):
        notes.append(f"the busy neighbour of {name} had ended on its own (exit code {process.exitcode})")
    if process.is_alive():
        process.terminate()
        process.join(1.0)
    if process.is_alive():
        process.kill()
    process.join()
    return notes


def _busy(kind: str, device: int, env: dict[str, str], conn) -> None:
    """The neighbour: the mode's environment before CUDA, then work until ended."""
    from gpuipc_bench.ipc.process import die_with_parent, set_process_title

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent()
    os.environ.update(env)
    set_process_title(f"gpuipc-bench: busy neighbour ({kind}) GPU{device}", f"neighbour {kind}"[:15])
    try:
        import cupy

        cupy.cuda.Device(device).use()
        stream = cupy.cuda.Stream(non_blocking=True)
        if kind == "copy":
            src = cupy.cuda.alloc(COPY_BYTES)
            dst = cupy.cuda.alloc(COPY_BYTES)

            def work() -> None:
                for _ in range(4):
                    cupy.cuda.runtime.memcpyAsync(dst.ptr, src.ptr, COPY_BYTES,
                                                  cupy.cuda.runtime.memcpyDeviceToDevice, stream.ptr)
        else:
            from gpuipc_bench.gpu.kernels import file_source

            kernel = cupy.RawKernel(file_source("busy.cu"), "busy")
            sink = cupy.zeros(1, dtype=cupy.float32)
            blocks = 8 * cupy.cuda.Device(device).attributes["MultiProcessorCount"]

            def work() -> None:
                with stream:
                    kernel((blocks,), (256,), (sink, cupy.int64(1 << 18)))

        start = time.perf_counter()
        work()
        stream.synchronize()
        conn.send(("ready", f"its first round took {(time.perf_counter() - start) * 1e3:.1f} ms"))
        conn.close()
    except Exception as exc:  # noqa: BLE001 - the reason goes to the parent, in one line
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        conn.close()
        os._exit(1)
    while True:  # until ended: two rounds in flight at most, so that an end is quick
        work()
        stream.synchronize()
