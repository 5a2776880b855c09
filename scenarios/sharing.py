"""sharing: N worker processes on one GPU, time-sliced (the default) and under MPS.

One GPU (the first of --devices, default 0). A group of M workers (--workers, default 8)
runs the sweep N = 1, 2, 4, ..., M (pinned h2d, which one worker already saturates, at
N = 1, 2 and M): the first N workers of the group run the same transfer at once while the
others wait at the barriers. Transfers, each worker on its own buffers:

  d2d   cudaMemcpyAsync device -> device (a 64 MiB message by default; --sizes changes it)
  h2d   cudaMemcpyAsync from the worker's pinned host buffer to the device

All N batches queue behind one shared gate (a flag in a shared host page registered by
every worker) released by one store, so they start together. Each batch is bracketed by
two one-thread kernels that write the GPU's %globaltimer (one clock for every context
of the GPU), so the batches of different processes can be compared:

  row   variant '<transfer>-aggregate', bytes = N x message, workers = N,
        seconds = (last end - earliest start) / batch: what the GPU moved for all of them
        (a reference: N processes each copying its own memory, never a verdict candidate)

Ceilings: the group's first worker alone (d2d@<gpu>, h2d@<gpu>). Then the device
ping-pong latency between the group's first two workers (the latency scenario's
kernels, 4 B and 4 KiB, both protocols): a second process set's figures beside the latency
scenario's, whose ratio's movement between the two sets the verdict's delta takes in.

Time-sliced and MPS are the run's sharing modes (gpuipc_bench.modes, --sharing): the
scenario runs once per mode with a fresh group of workers, each of which the harness made
an MPS client of the run's daemon (or pointed at an empty private pipe folder) before its
first CUDA call; the harness hands the workers the mode's name (where it hands none, they tell
from their environment). Under MPS the group's first worker checks with get_server_list /
get_client_list that every worker of the group is a client of the daemon's server; when one is
not, that half is waived with a note.
"""

from __future__ import annotations

import mmap
import os
import sys
from typing import Iterator

import numpy as np

from gpuipc_bench.modes import daemon as mps
from gpuipc_bench.errors import BenchError
from gpuipc_bench.gpu.ceilings import Ceilings
from gpuipc_bench.gpu.device import Gpu
from gpuipc_bench.gpu.memory import MAX_REPS, L2Check, Ring
from gpuipc_bench.gpu.timing import SharedGatePage, host_warm_bytes
from gpuipc_bench.paths import PathInfo
from gpuipc_bench.engine.pingpong import IDLE, INITIATOR, PROTOCOLS, RESPONDER, DevicePingPong
from gpuipc_bench.engine.sampler import Sample, Sampler
from gpuipc_bench.engine.scenario import Scenario, WorkerSpec, gpu_cpus, same_gpu_mode
from gpuipc_bench.results import base_mode

TIME_SLICED, MPS = "time-sliced", "mps"
DEFAULT_SIZES = (64 << 20,)
DEFAULT_GROUP = 8
MAX_GROUP = 16
BATCH_BYTES = 256 << 20  # each worker moves about this much a sample
LATENCY_SIZES = (4, 4096)  # the MPS hand-off's smallest sizes, where the kernel ping-pongs are the choice
TRANSFERS = ("d2d", "h2d")
PROBE_TIMEOUT_S = 30.0


def sweep(group: int) -> tuple[int, ...]:
    """Worker counts to run: 1, 2, 4, ... below `group`, then `group`."""
    counts, n = [], 1
    while n < group:
        counts.append(n)
        n *= 2
    counts.append(group)
    return tuple(counts)


def counts_for(transfer: str, group: int) -> tuple[int, ...]:
    """Worker counts a transfer runs at: pinned h2d saturates PCIe with one worker, so it runs at
    1, 2 and the whole group only."""
    counts = sweep(group)
    return tuple(n for n in counts if n in (1, 2, group)) if transfer == "h2d" else counts


def batch_for(nbytes: int) -> int:
    return max(1, min(MAX_REPS, BATCH_BYTES // max(1, nbytes)))


def note(text: str) -> None:
    """A line on stderr (rich's progress display, when on, prints it above the bar)."""
    print(f"note: {text}", file=sys.stderr, flush=True)


class _Shared:
    """Made by the parent in prepare(), inherited by the workers."""

    NOTE_AT = 512  # bytes 0..511: int64 words (0: waived flag); then the reason

    def __init__(self):
        self.gate = SharedGatePage()
        self.page = mmap.mmap(-1, 4096, flags=mmap.MAP_SHARED)
        self.words = np.frombuffer(self.page, dtype=np.int64, count=self.NOTE_AT // 8)

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

    def close(self) -> None:
        self.words = None
        self.gate.close()
        try:
            self.page.close()
        except BufferError:
            pass


class SharingScenario(Scenario):
    name = "sharing"
    in_quick_run = False  # up to 8 processes with a context each: about a second a mode
    mpi_waiver = "forks 1 to 8 workers on one GPU, in each sharing mode of the run: the fork launcher only"
    sharing_modes = True
    summary = ("N = 1..8 processes on one GPU (d2d and pinned h2d), time-sliced vs MPS: "
               "aggregate bandwidth, co-located device ping-pong")
    gpus_needed = 1
    min_workers = 2
    max_workers = MAX_GROUP
    default_workers = DEFAULT_GROUP

    paths = (PathInfo("sharing", role="reference", colour="#8c564b"),)

    def default_sizes(self, preset=""):
        return DEFAULT_SIZES

    def group_size(self, config) -> int:
        return config.workers or (2 if config.preset == "quick" else self.default_workers)

    def workers(self, config, machine):
        m = self.group_size(config)
        device = config.devices[0] if config.devices else 0
        return [WorkerSpec(r, "peer", device, gpu_cpus(machine, device)) for r in range(m)]

    def mailbox_slots(self, config, specs):
        return 16 + 2 * self.group_size(config) + len(specs)

    def progress_total(self, config, specs):
        return len(specs) * (len(sweep(self.group_size(config))) + 1)

    def prepare(self, config, specs):
        return _Shared()

    def release(self, shared):
        if shared is None:
            return
        reason = shared.waived()
        shared.close()
        if reason:
            note(f"sharing: the MPS half was waived: {reason}")

    def run(self, ctx):
        return SharingWorker(ctx, self).run()


class SharingWorker:
    def __init__(self, ctx, scenario):
        self.ctx, self.config, self.shared = ctx, ctx.config, ctx.shared
        self.m = scenario.group_size(ctx.config)
        # The harness set this worker's mode before anything initialised CUDA and named it (gpuipc_bench.modes)
        self.group = base_mode(same_gpu_mode(ctx.mode))  # TIME_SLICED or MPS
        self.local = ctx.rank
        self.device = ctx.spec.device
        self.sizes = scenario.sizes(ctx.config)
        self.name = scenario.name
        self.sampler = Sampler(ctx)
        self.gpu: Gpu | None = None

    def run(self) -> Iterator[dict]:
        ctx = self.ctx
        ctx.begin(self.name, sharing=self.group)
        ctx.declare("sampler", "failed", *(f"start.{j}" for j in range(self.m)), *(f"end.{j}" for j in range(self.m)))
        DevicePingPong(ctx, IDLE, None, None, self.sampler, max_bytes=max(LATENCY_SIZES), path="ipc").declare()
        ctx.lock_names()
        yield from self.half(self.group)

    # ---------------------------------------------------------------- one half

    def half(self, group: str) -> Iterator[dict]:
        ctx = self.ctx
        steps = len(sweep(self.m)) + 1
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
                    ctx.store("failed", 1)
            ctx.sync()
            if group == MPS:
                if leader and not ctx.load("failed"):
                    reason = self.check_clients()
                    if reason:
                        self.shared.waive(reason)
                        ctx.store("failed", 1)
                ctx.sync()
                if ctx.load("failed"):
                    ctx.progress(steps)
                    clean = True
                    return
            if leader:
                yield from self.ceilings(group)
            ctx.sync()
            for n in sweep(self.m):
                for transfer in TRANSFERS:
                    if n not in counts_for(transfer, self.m):
                        continue
                    for nbytes in self.sizes:
                        yield from self.bandwidth(group, n, transfer, nbytes, member)
                ctx.progress()
            role = IDLE
            if member and self.local in (0, 1):
                role = INITIATOR if self.local == 0 else RESPONDER
            base = ctx.rank - self.local if member else 0
            peer = base + 1 - self.local if role != IDLE else None
            pp = DevicePingPong(ctx, role, peer, self.gpu if role != IDLE else None, self.sampler,
                                max_bytes=max(LATENCY_SIZES), path="ipc")
            pp.setup()
            for protocol in PROTOCOLS:
                for nbytes in LATENCY_SIZES:
                    yield from pp.measure(protocol, nbytes, fields=dict(sharing=group, workers=2))
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
        gpu = self.gpu = Gpu(self.device, shared_gate=self.shared.gate)
        n = max(self.sizes)
        self.src, self.dst = gpu.alloc(n), gpu.alloc(n)
        self.host = gpu.pinned(n)
        self.stamps = gpu.alloc(16)

    def check_clients(self) -> str | None:
        """None when every worker of the group is a client of the run's MPS daemon's server."""
        daemon = mps.MpsDaemon(mps.find_binary() or mps.BINARY, os.environ.get(mps.PIPE_ENV) or mps.DEFAULT_PIPE_DIR,
                               os.environ.get(mps.LOG_ENV, ""), owns_dirs=False)  # to ask it; never stopped here
        ranks = range(self.ctx.rank, self.ctx.rank + self.m)
        pids = {self.ctx.segment.pid(r) for r in ranks}
        try:
            servers = daemon.server_pids()
            if not servers:
                return "the workers did not connect to the run's MPS daemon (it runs no server)"
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
            listed = ", ".join(map(str, sorted(clients))) or "none"
            return (f"worker processes {', '.join(map(str, missing))} are not clients of the run's MPS "
                    f"server (pid {', '.join(map(str, servers))}; clients: {listed})")
        return None

    # ---------------------------------------------------------------- measuring

    def ceilings(self, group: str) -> Iterator[dict]:
        """The leader alone: d2d and h2d on this GPU, the figures one process gets."""
        ceilings = Ceilings(self.gpu, max(self.sizes))
        for nbytes in self.sizes:
            for key, src in ((f"d2d@{self.device}", self.device), (f"h2d@{self.device}", "host")):
                fields = dict(path="ceiling", variant=key, measure="stream", metric="bandwidth", src=src,
                              dst=self.device, bytes=nbytes, ceiling="", sharing=group, workers=1,
                              l2_resident=L2Check(nbytes, self.gpu.l2_bytes, 2 if src == self.device else 1,
                                                  slots=1))
                yield from self.sampler.run(
                    fields, lambda trial, key=key: Sample(*ceilings.bandwidth(key, nbytes, trial.seed, 1)),
                    timer=True, solo=True, reps=1, calibrate=False, phase="ceiling")

    def bandwidth(self, group: str, n: int, transfer: str, nbytes: int, member: bool) -> Iterator[dict]:
        """The first n workers of the group copy at once behind one shared gate, each stamping the
        GPU clock after its gate and after its batch; the leader times them all: an aggregate row,
        n x message bytes from the earliest start to the latest end (what the GPU moved for all)."""
        ctx = self.ctx
        active = member and self.local < n
        leader = member and self.local == 0
        reps = batch_for(nbytes)
        src_name = "host" if transfer == "h2d" else self.device
        one = Ring.for_size(nbytes, 1)

        def take(trial) -> Sample | None:
            seed = (trial.seed + self.local * 7919) & 0xFFFFFFFF
            gpu = self.gpu
            if active:
                gpu.fill(self.src.ptr, one, seed)
                if transfer == "h2d":
                    gpu.memcpy(self.host.ptr, self.src.ptr, nbytes)
                gpu.synchronize()
                src = self.host.ptr if transfer == "h2d" else self.src.ptr
                copy = gpu.copy_launcher(nbytes)
                warm = gpu.copy_launcher(host_warm_bytes(nbytes)) if transfer == "h2d" else copy
                marks = gpu.marks(self.stamps.ptr)
            # Every worker arms the shared gate alike (its generation counts samples), active or not.
            if active:
                gpu.time_batch(lambda r: copy(self.dst.ptr, src), trial.reps, shared=True, marks=marks,
                               warm=lambda: warm(self.dst.ptr, src), before_release=ctx.sync, transfer_bytes=nbytes)
                start, end = marks.stamped()
                ctx.store(f"start.{self.local}", start)
                ctx.store(f"end.{self.local}", end)
                gpu.verify(self.dst.ptr, one, seed, "sharing", transfer, corrupt=ctx.corrupt)
            else:
                ctx.sync()  # the active workers' before_release
                if member:
                    self.gpu.shared_gate.generation += 1  # stay in step with the gate's generation
            ctx.sync()  # every stamp published, every batch verified
            if not leader:
                return None
            starts = [ctx.load(f"start.{j}") for j in range(n)]
            ends = [ctx.load(f"end.{j}") for j in range(n)]
            return Sample((max(ends) - min(starts)) / 1e9 / trial.reps, trial.reps)

        aggregate = dict(path="sharing", variant=f"{transfer}-aggregate", measure="stream", metric="bandwidth",
                         src=src_name, dst=self.device, bytes=n * nbytes, ceiling="", sharing=group, workers=n)
        yield from self.sampler.run(aggregate, take, timer=leader, reps=reps, calibrate=False)
