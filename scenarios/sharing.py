"""sharing: N worker processes on one GPU, time-sliced (the default) and under MPS.

One GPU (the first of --devices, default 0). A group of M workers (--workers, default 8)
runs the sweep N = 1, 2, 4, ..., M: the first N workers of the group run the same
transfer at once while the others wait at the barriers. Transfers, each worker on its
own buffers:

  d2d   cudaMemcpyAsync device -> device (a 64 MiB message by default; --sizes changes it)
  h2d   cudaMemcpyAsync from the worker's pinned host buffer to the device

All N batches queue behind one shared gate (a flag in a shared host page registered by
every worker) released by one store, so they start together. Each batch is bracketed by
two one-thread kernels that write the GPU's %globaltimer (one clock for every context
of the GPU), so the batches of different processes can be compared:

  per-worker row  seconds = (end of this worker's batch - earliest start of any batch) / batch
                  (the bandwidth this worker got from the moment they all started)
  aggregate row   variant '<transfer>-aggregate', bytes = N x message,
                  seconds = (last end - earliest start) / batch: what the GPU moved for all

Ceilings: the group's first worker alone (d2d@<gpu>, h2d@<gpu>). Then the device
ping-pong latency between the group's first two workers (the latency scenario's
kernels, 4 bytes, both protocols).

Time-sliced and MPS need different processes: a process is an MPS client or not from
the moment it initialises CUDA. So when nvidia-cuda-mps-control is on PATH there are
two groups: workers 0..M-1 (time-sliced; their CUDA_MPS_PIPE_DIRECTORY points at an
empty private folder, so that they never join a daemon that may run on the machine), and
workers M..2M-1, which initialise CUDA only for the second half, as clients of a private
daemon the parent starts in prepare() (gpuipc_bench.mps: its own pipe and log folders,
no GPU setting touched) after a probe client proved that it serves; the group's first
worker checks with get_server_list / get_client_list that every worker of the group is a
client of its server. release() quits the daemon (then kills what is left, by pid) and
removes the folders, on every exit path. When MPS cannot be used (no binary, a daemon
that does not start or answer, a client that does not connect), the MPS half is waived
and a note with the reason is printed; the 'sharing' column says 'time-sliced' or 'mps'.
"""

from __future__ import annotations

import mmap
import multiprocessing
import os
import shutil
import sys
import tempfile
from typing import Iterator

import numpy as np

from gpuipc_bench import cuda, mps
from gpuipc_bench.errors import BenchError
from gpuipc_bench.faults import corrupt_requested
from gpuipc_bench.results import new_row
from gpuipc_bench.scenario import Scenario, WorkerSpec
from gpuipc_bench.scenarios.latency import IDLE, INITIATOR, PROTOCOLS, RESPONDER, DevicePingPong

TIME_SLICED, MPS = "time-sliced", "mps"
DEFAULT_SIZES = (64 << 20,)
DEFAULT_GROUP = 8
MAX_GROUP = 16
BATCH_BYTES = 1 << 30  # each worker moves about this much a sample
LATENCY_SIZES = (4,)
TRANSFERS = ("d2d", "h2d")
PROBE_TIMEOUT_S = 30.0

# Mailbox slots.
ROUNDS = 0
FAILED = 1  # an MPS worker could not start, or is not a client of the daemon
STARTS = 8  # STARTS + local index: globaltimer at the start of that worker's batch
# ... and STARTS + group size + local index: at its end.


def sweep(group: int) -> tuple[int, ...]:
    """Worker counts to run: 1, 2, 4, ... below `group`, then `group`."""
    counts, n = [], 1
    while n < group:
        counts.append(n)
        n *= 2
    counts.append(group)
    return tuple(counts)


def batch_for(nbytes: int) -> int:
    return max(1, min(cuda.MAX_REPS, BATCH_BYTES // max(1, nbytes)))


def note(text: str) -> None:
    """A line on stderr (rich's progress display, when on, prints it above the bar)."""
    print(f"note: {text}", file=sys.stderr, flush=True)


class _Shared:
    """Made by the parent in prepare(), inherited by the workers."""

    NOTE_AT = 512  # bytes 0..511: int64 words (0: waived flag, 1..32: MPS server pids); then the reason

    def __init__(self):
        self.gate = cuda.SharedGatePage()
        self.page = mmap.mmap(-1, 4096, flags=mmap.MAP_SHARED)
        self.words = np.frombuffer(self.page, dtype=np.int64, count=self.NOTE_AT // 8)
        self.daemon: mps.MpsDaemon | None = None
        self.nomps_dir: str | None = None

    def waive(self, reason: str) -> None:
        """Record why the MPS half is waived (the first reason is kept)."""
        if self.words[0]:
            return
        data = reason.encode(errors="replace")[: len(self.page) - self.NOTE_AT - 1]
        self.page[self.NOTE_AT:self.NOTE_AT + len(data) + 1] = data + b"\0"
        self.words[0] = 1

    def waived(self) -> str | None:
        if not self.words[0]:
            return None
        raw = self.page[self.NOTE_AT:]
        return raw[: raw.index(b"\0")].decode(errors="replace") if b"\0" in raw else raw.decode(errors="replace")

    def add_servers(self, pids) -> None:
        for pid in pids:
            for k in range(1, 33):
                if self.words[k] in (0, pid):
                    self.words[k] = pid
                    break

    def servers(self) -> set[int]:
        return {int(p) for p in self.words[1:33] if p > 0}

    def close(self) -> None:
        self.words = None
        self.gate.close()
        try:
            self.page.close()
        except BufferError:
            pass


def probe_client(daemon: mps.MpsDaemon, device: int, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Fork a short-lived CUDA client of `daemon` (the parent never initialises CUDA); None when it
    ran under an MPS server of the daemon, else why not. The server is shut down afterwards, so
    that the time-sliced half runs next to no MPS server."""
    fork = multiprocessing.get_context("fork")
    here, there = fork.Pipe()
    child = fork.Process(target=_probe_child, args=(there, daemon.env(), device), daemon=True,
                         name="gpuipc-bench-mps-probe")
    child.start()
    there.close()
    try:
        if not here.poll(timeout):
            return f"a CUDA client of the private MPS daemon did not start within {timeout:g} s"
        try:
            said = here.recv()
        except EOFError:
            return "the MPS probe client died while starting CUDA"
        if said != "ready":
            return f"a CUDA client could not start under the private MPS daemon: {said}"
        servers = daemon.server_pids()
        if not servers:
            return "the private MPS daemon started no server for its client (get_server_list is empty)"
        return None
    except mps.MpsUnavailable as exc:
        return str(exc)
    finally:
        try:
            here.send("done")
        except OSError:
            pass
        here.close()
        child.join(10)
        if child.is_alive():
            child.kill()
            child.join()
        for pid in list(daemon.known_servers):
            try:
                daemon.control(f"shutdown_server {pid}")
            except mps.MpsUnavailable:
                pass


def _probe_child(conn, env, device) -> None:
    code = 0
    try:
        os.environ.update(env)
        try:
            from cupy.cuda import runtime

            runtime.setDevice(device)
            ptr = runtime.malloc(1 << 20)
            runtime.deviceSynchronize()
            runtime.free(ptr)
            conn.send("ready")
        except Exception as exc:  # noqa: BLE001 - reported as a sentence
            conn.send(f"{type(exc).__name__}: {exc}")
            return
        if conn.poll(60):
            conn.recv()
    except BaseException:  # noqa: BLE001
        code = 1
    finally:
        os._exit(code)


class SharingScenario(Scenario):
    name = "sharing"
    summary = ("N = 1..8 processes on one GPU (d2d and pinned h2d), time-sliced vs MPS: "
               "per-worker and aggregate bandwidth, co-located device ping-pong")
    gpus_needed = 1
    min_workers = 2
    max_workers = MAX_GROUP
    default_workers = DEFAULT_GROUP

    def default_sizes(self):
        return DEFAULT_SIZES

    def group_size(self, config) -> int:
        return config.workers or self.default_workers

    def workers(self, config, machine):
        m = self.group_size(config)
        device = config.devices[0] if config.devices else 0
        groups = 2 if mps.find_binary() else 1
        return [WorkerSpec(r, "peer", device) for r in range(groups * m)]

    def mailbox_slots(self, config, specs):
        return STARTS + 2 * self.group_size(config)

    def progress_total(self, config, specs):
        m = self.group_size(config)
        return len(specs) * (len(specs) // m) * (len(sweep(m)) + 1)

    def prepare(self, config, specs):
        shared = _Shared()
        try:
            shared.nomps_dir = tempfile.mkdtemp(prefix=mps.PREFIX + "none-")
            if len(specs) <= self.group_size(config):
                shared.waive(f"{mps.BINARY} is not on PATH")
            else:
                try:
                    shared.daemon = mps.MpsDaemon.start()
                    reason = probe_client(shared.daemon, specs[0].device, min(PROBE_TIMEOUT_S, config.timeout))
                    if reason:
                        raise mps.MpsUnavailable(reason)
                except mps.MpsUnavailable as exc:
                    shared.waive(str(exc))
                    if shared.daemon is not None:
                        for problem in shared.daemon.stop():
                            note(f"sharing: {problem}")
                        shared.daemon = None
        except BaseException:
            self.release(shared)
            raise
        return shared

    def release(self, shared):
        if shared is None:
            return
        try:
            if shared.daemon is not None:
                shared.daemon.known_servers.update(shared.servers())
                daemon, shared.daemon = shared.daemon, None
                for problem in daemon.stop():
                    note(f"sharing: stopping the MPS daemon: {problem}")
        finally:
            if shared.nomps_dir:
                shutil.rmtree(shared.nomps_dir, ignore_errors=True)
            reason = shared.waived()
            shared.close()
            if reason:
                note(f"sharing: the MPS half was waived: {reason}")

    def run(self, ctx):
        return SharingWorker(ctx, self.group_size(ctx.config), self.default_sizes()).run()


class SharingWorker:
    def __init__(self, ctx, group_size: int, default_sizes):
        self.ctx, self.seg, self.config, self.shared = ctx, ctx.segment, ctx.config, ctx.shared
        self.m = group_size
        self.group = TIME_SLICED if ctx.rank < group_size else MPS
        self.local = ctx.rank % group_size
        self.groups = (TIME_SLICED, MPS)[: ctx.nworkers // group_size]
        self.device = ctx.spec.device
        self.sizes = tuple(sorted(ctx.config.sizes_for(default_sizes)))
        self.corrupt = corrupt_requested()
        self.sample = 0  # samples so far, counted by every worker alike (the shared gate's generation)
        self.gpu: cuda.Gpu | None = None
        self._ends = STARTS + group_size

    def run(self) -> Iterator[dict]:
        # Before any CUDA call: a process joins an MPS daemon (or not) when it initialises CUDA.
        if self.group == MPS and self.shared.daemon is not None:
            os.environ.update(self.shared.daemon.env())
        elif self.group == TIME_SLICED:
            os.environ[mps.PIPE_ENV] = self.shared.nomps_dir
        for group in self.groups:
            yield from self.half(group)

    # ---------------------------------------------------------------- one half

    def half(self, group: str) -> Iterator[dict]:
        ctx, seg = self.ctx, self.seg
        steps = len(sweep(self.m)) + 1
        if group == MPS and self.shared.daemon is None:  # known alike to every worker
            ctx.progress(steps)
            return
        member = self.group == group
        leader = member and self.local == 0
        ctx.phase("setup")
        ctx.sync()
        clean = False
        pp = None
        try:
            if member:
                try:
                    self.open_gpu()
                except BenchError as exc:
                    if group != MPS:
                        raise
                    self.shared.waive(f"worker {ctx.rank} could not start CUDA as an MPS client: {exc}")
                    seg.store(FAILED, 1)
            ctx.sync()
            if group == MPS:
                if leader and not seg.load(FAILED):
                    reason = self.check_clients()
                    if reason:
                        self.shared.waive(reason)
                        seg.store(FAILED, 1)
                ctx.sync()
                if seg.load(FAILED):
                    ctx.progress(steps)
                    clean = True
                    return
            fields = dict(scenario="sharing", sharing=group)
            if leader:
                yield from self.ceilings(fields)
            ctx.sync()
            for n in sweep(self.m):
                for transfer in TRANSFERS:
                    for nbytes in self.sizes:
                        yield from self.bandwidth(n, transfer, nbytes, member, fields)
                ctx.progress()
            role = IDLE
            if member and self.local in (0, 1):
                role = INITIATOR if self.local == 0 else RESPONDER
            base = ctx.rank - self.local if member else 0
            peer = base + 1 - self.local if role != IDLE else None
            pp = DevicePingPong(ctx, role, peer, self.gpu if role != IDLE else None, max_bytes=max(LATENCY_SIZES),
                                fields=dict(fields, workers=2), path="ipc")
            pp.setup()
            for protocol in PROTOCOLS:
                for nbytes in LATENCY_SIZES:
                    yield from pp.measure(protocol, nbytes, self.config.warmup, self.config.iterations)
            ctx.progress()
            ctx.phase("teardown")
            clean = True
        finally:
            if pp is not None:
                pp.close()
            try:
                if clean:
                    ctx.sync()  # every mapping is closed before anyone frees
            finally:
                if self.gpu is not None:
                    gpu, self.gpu = self.gpu, None
                    gpu.close()

    def open_gpu(self) -> None:
        gpu = self.gpu = cuda.Gpu(self.device, shared_gate=self.shared.gate)
        n = max(self.sizes)
        self.src, self.dst = gpu.alloc(n), gpu.alloc(n)
        self.host = gpu.pinned(n)
        self.stamps = gpu.alloc(64)
        self.stamper = gpu.adopt(cuda.PingPongKernels(self.device))

    def check_clients(self) -> str | None:
        """None when every worker of the MPS group is a client of the private daemon's server."""
        daemon = self.shared.daemon
        ranks = range(self.ctx.rank, self.ctx.rank + self.m)
        pids = {self.seg.pid(r) for r in ranks}
        try:
            servers = daemon.server_pids()
            self.shared.add_servers(servers)
            if not servers:
                return "the workers did not connect to the private MPS daemon (it runs no server)"
            try:
                clients = set()
                for server in servers:
                    clients.update(daemon.client_pids(server))
            except mps.MpsUnavailable:
                return None  # no client list here: a server of our own daemon serves them
        except mps.MpsUnavailable as exc:
            return str(exc)
        missing = sorted(pids - clients)
        if missing and clients:  # (an empty list: this driver names no clients; the server is ours)
            return (f"worker processes {', '.join(map(str, missing))} are not clients of the private MPS "
                    f"server (pid {', '.join(map(str, servers))}; clients: {', '.join(map(str, sorted(clients))) or 'none'})")
        return None

    # ---------------------------------------------------------------- measuring

    def ceilings(self, fields) -> Iterator[dict]:
        ceilings = cuda.Ceilings(self.gpu, max(self.sizes))
        for nbytes in self.sizes:
            for key in (f"d2d@{self.device}", f"h2d@{self.device}"):
                yield from ceilings.rows(key, nbytes, self.config.warmup, self.config.iterations,
                                         on_sample=lambda i: self.ctx.phase("sample", nbytes, i),
                                         workers=1, **fields)

    def bandwidth(self, n: int, transfer: str, nbytes: int, member: bool, fields) -> Iterator[dict]:
        ctx, seg, gpu = self.ctx, self.seg, self.gpu
        active = member and self.local < n
        reps = batch_for(nbytes)
        warmup = self.config.warmup
        for i in range(warmup + self.config.iterations):
            ctx.phase("warmup" if i < warmup else "sample", nbytes, i)
            self.sample += 1
            seed = cuda.seed_for(self.sample * 64 + self.local)
            if active:
                gpu.fill(self.src.ptr, nbytes, seed)
                if transfer == "h2d":
                    gpu.memcpy(self.host.ptr, self.src.ptr, nbytes)
                gpu.synchronize()
                gate = gpu.shared_gate
                gate.generation = self.sample - 1  # arm() makes it self.sample, the same in every worker
                gate.arm(gpu.stream)
                self.stamper.stamp(self.stamps.ptr, gpu.stream)
                src = self.host.ptr if transfer == "h2d" else self.src.ptr
                copy = gpu.memcpy_launcher(self.dst.ptr, src, nbytes)
                for _ in range(reps):
                    copy()
                self.stamper.stamp(self.stamps.ptr + 8, gpu.stream)
            ctx.sync()  # every active worker's batch waits behind its gate
            if active:
                gate.release()
                gpu.synchronize()
                gate.check()
                start, end = (int(w) for w in cuda.read_words(self.stamps.ptr, 2, gpu.stream, self.device))
                seg.store(STARTS + self.local, start)
                seg.store(self._ends + self.local, end)
                gpu.verify(self.dst.ptr, nbytes, seed, "sharing", transfer, corrupt=self.corrupt)
            ctx.sync()  # every stamp published, every batch verified
            if not active or i < warmup:
                continue
            starts = [seg.load(STARTS + j) for j in range(n)]
            ends = [seg.load(self._ends + j) for j in range(n)]
            t0 = min(starts)
            src_name = "host" if transfer == "h2d" else self.device
            yield new_row(**fields, path="sharing", variant=transfer, metric="bandwidth", src=src_name,
                          dst=self.device, bytes=nbytes, iteration=i - warmup, batch=reps,
                          seconds=(ends[self.local] - t0) / 1e9 / reps, verified=True, workers=n,
                          ceiling=f"{transfer}@{self.device}")
            if self.local == 0:
                yield new_row(**fields, path="sharing", variant=f"{transfer}-aggregate", metric="bandwidth",
                              src=src_name, dst=self.device, bytes=n * nbytes, iteration=i - warmup, batch=reps,
                              seconds=(max(ends) - t0) / 1e9 / reps, verified=True, workers=n,
                              ceiling=f"{transfer}@{self.device}")
