"""What every producer/consumer GPU scenario shares: the pair, the run, the teardown, the
ceilings and the setup costs. A scenario's worker subclasses PairWorker and writes
`setup()` and `measure(nbytes)`, both generators of result rows (through self.sampler).
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Any, Callable, Iterator

from gpuipc_bench.gpu.ceilings import Ceilings, parse_ceiling
from gpuipc_bench.gpu.device import Gpu, enable_peer_access
from gpuipc_bench.gpu.memory import L2Check, reps_for
from gpuipc_bench.gpu.timing import SharedGatePage
from gpuipc_bench.machine.mig import device_of
from gpuipc_bench.engine.lanes import prove_lanes
from gpuipc_bench.engine.sampler import Sample, Sampler
from gpuipc_bench.engine.scenario import Scenario, WorkerSpec, gpu_cpus

PRODUCER, CONSUMER = 0, 1
MEASURES = ("stream", "handoff")
# From this size a host link's ceiling (h2d, d2h, by the copy engine or a kernel) is the bus's, not the sharing
# mode's: in four runs on one H200 (results/h200-states-*.csv) the MPS medians over the time-sliced ones were
# 0.963-1.021 from 4 MiB, 1.000 in the middle, against up to 1.15 below it. A further mode of a run takes the
# first mode's there (RunConfig.host_ceilings_from), ~2.4 s of a default run on one H200 not spent again.
HOST_CEILINGS_SHARED_FROM = 4 << 20
# The ceilings this process has measured in this run: (key, bytes, sharing) -> the scenario whose
# rows hold them. A persistent worker (gpuipc_bench.harness.pool) or an MPI rank runs scenario after
# scenario: each ceiling is measured once per process and size, and a later scenario names the
# one that holds it (`# note.<scenario>.ceilings_from.<sharing>`), where the analysis finds it.
_MEASURED: dict[tuple[str, int, str], str] = {}


def pair_specs(producer: int, consumer: int, cpus: Callable[[int], tuple[int, ...]]) -> list[WorkerSpec]:
    """The producer's and the consumer's specs on their GPUs; `cpus(device)`: a GPU's local CPUs."""
    return [WorkerSpec(PRODUCER, "producer", producer, cpus(producer)),
            WorkerSpec(CONSUMER, "consumer", consumer, cpus(consumer))]


class PairScenario(Scenario):
    """A producer on the first GPU of --devices (default 0) and a consumer on the second
    (default: the same GPU). `worker_class` (a PairWorker) runs in both."""

    gpus_needed = 1
    pairable = True
    sharing_modes = True
    persistent_workers = True  # the subclasses below that cannot say so
    last_in_set = False  # runs after the other paths of its process set, whatever their shuffled order
    min_workers = max_workers = default_workers = 2
    worker_class: type["PairWorker"]

    def workers(self, config, machine):
        devices = list(config.devices) if config.devices else [0]
        consumer = devices[1] if len(devices) > 1 else devices[0]
        return pair_specs(devices[0], consumer, lambda device: gpu_cpus(machine, device))

    def prepare(self, config, specs):
        """The page of the shared gate that lets both workers' batches go with one store."""
        return PairShared(SharedGatePage())

    def release(self, shared):
        if shared is not None:
            shared.close()

    def run(self, ctx) -> Iterator[dict]:
        return self.worker_class(ctx, self).run()


class PairShared:
    """What the parent makes for a pair before the fork (scenarios add their buffers)."""

    def __init__(self, gate: SharedGatePage):
        self.gate = gate

    def close(self) -> None:
        self.gate.close()


class PairSharedWithFolder(PairShared):
    """The pair's gate page and a private folder (a library's files: a store, debug logs),
    removed with the pair."""

    def __init__(self, prefix: str):
        super().__init__(SharedGatePage())
        self.folder = tempfile.mkdtemp(prefix=prefix)

    def close(self) -> None:
        try:
            super().close()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


class PairWorker:
    path = ""  # the path named in rows and errors
    # Across two GPUs, where peer access is turned on in each worker: "run" (by the harness,
    # before the path's setup), "setup" (the path's own setup does it where its method needs
    # it: ipc's set-up rows, peer's P2P-off copies, are measured before it), or "never" (no
    # GPU of the path touches the other's memory).
    peer_access_at = "run"

    def __init__(self, ctx, scenario: Scenario):
        self.ctx, self.scenario, self.config = ctx, scenario, ctx.config
        self.producer = ctx.rank == PRODUCER
        self.other = CONSUMER if self.producer else PRODUCER
        # On MIG instances each worker sees its own instance alone, as device 0: these are 0 for
        # CUDA and name the instance's UUID in rows (gpuipc_bench.machine.mig.InstanceDevice). A pair
        # across two instances is then "same GPU" to the code (one index, no peer access).
        self.device = device_of(ctx.spec)
        self.pdev, self.cdev = device_of(ctx.specs[PRODUCER]), device_of(ctx.specs[CONSUMER])
        self.same_gpu = self.pdev == self.cdev
        self.across_mig = getattr(ctx.specs[PRODUCER], "mig", "") != getattr(ctx.specs[CONSUMER], "mig", "")
        self.sizes = scenario.sizes(ctx.config)
        self.health = bool(getattr(scenario, "health", False))  # its health form (check --preset health)
        self.sampler = Sampler(ctx)
        self._gpu: Gpu | None = None
        self.ceilings: Ceilings | None = None
        self.imports: list = []  # what this worker opened from the other (closed first)
        self.ceilings_from: dict[str, list[str]] = {}  # sharing -> the scenarios holding ceilings it reused
        self.host_ceilings_noted = False  # the note that a further mode's host-link ceilings are the first's

    # ------------------------------------------------------------------ to write

    def setup(self) -> Iterator[dict]:
        return iter(())

    def measure(self, nbytes: int) -> Iterator[dict]:
        raise NotImplementedError

    def open_gpu(self) -> Gpu:
        return Gpu(self.device, shared_gate=getattr(self.ctx.shared, "gate", None))

    # ------------------------------------------------------------------ driver

    def run(self) -> Iterator[dict]:
        self.ctx.begin(self.scenario.name)
        clean = False
        try:
            self.ctx.phase("setup")
            self.ctx.declare("sampler")
            self._gpu = self.open_gpu()
            if self._gpu is not None:
                from gpuipc_bench.gpu.clock import for_cuda_device

                self.ctx.clock = for_cuda_device(self.device)
            if self.peer_access_at == "run":
                yield from self.peer_enable_rows()
            prove_lanes(self)  # the lane counters, proven once per process (engine/lanes.py)
            yield from self.setup()
            if self.peer_access_at == "setup" and self.producer:
                # the producer's peer access both ways too (the consumer's set-up timed its own): the
                # lane proof's copies over NVLink in this process, whatever ran before in its set
                yield from self.peer_enable_rows()
            self.ctx.lock_names()
            prove_lanes(self)  # NVLink's, where the set-up turned peer access on
            for nbytes in self.sizes:
                yield from self.measure(nbytes)
                self.ctx.progress()
            self.ctx.phase("teardown")
            clean = True
        finally:
            self.teardown(clean)

    def teardown(self, clean: bool) -> None:
        """Importers close before exporters free: close what we opened, cross the barrier
        (on a clean exit only: after a failure the other worker may be gone), then free."""
        first: BaseException | None = None
        for item in reversed(self.imports):
            try:
                self.gpu.release(item)
            except BaseException as exc:  # noqa: BLE001 - keep releasing
                first = first or exc
        self.imports = []
        try:
            if clean:
                self.ctx.sync()
        finally:
            if self._gpu is not None:
                gpu, self._gpu = self._gpu, None
                try:
                    gpu.close()
                except BaseException as exc:  # noqa: BLE001
                    first = first or exc
        if first is not None and clean:
            raise first

    # ------------------------------------------------------------------ helpers

    @property
    def gpu(self) -> Gpu:
        if self._gpu is None:
            raise RuntimeError("this worker has no GPU open (before setup, or after teardown)")
        return self._gpu

    def peer_enable_rows(self) -> Iterator[dict]:
        """Peer access both ways in this process (GPU A's context may reach GPU B's memory and the
        other way). Every copy or kernel that touches the other GPU's memory, and every peer@A>B
        ceiling, needs it: without it the driver stages peer copies through host memory (37 GB/s
        against 395 on NV18, and a large one blocks the host while a gate holds the stream) and
        a kernel's load from the other GPU faults. The consumer's first enables are set-up rows."""
        if self.same_gpu:
            return
        for device, peer in ((self.cdev, self.pdev), (self.pdev, self.cdev)):
            seconds = enable_peer_access(device, peer)
            if seconds is not None and not self.producer:  # None: already on, or no peer access here
                yield self.setup_row("peer_enable", seconds, 0, 0, peer, device)

    def imported(self, resource: Any) -> Any:
        """Something opened from the other worker (IPC mapping, event): closed before teardown's barrier."""
        self.gpu.adopt(resource)
        self.imports.append(resource)
        return resource

    def group(self, variant: str, measure: str, nbytes: int, src: Any, dst: Any, ceiling: str = "",
              reps: int | None = None, metric: str = "bandwidth", path: str | None = None) -> dict:
        """The fields naming one measured group (the sampler adds the sample's)."""
        sides = 2 if str(src) == str(dst) and str(src) != "host" else 1
        return dict(path=path or self.path, variant=variant, measure=measure, metric=metric, src=src, dst=dst,
                    bytes=nbytes, ceiling=ceiling, l2_resident=L2Check(int(nbytes), self.gpu.l2_bytes, sides))

    def ceiling_rows(self, key: str, nbytes: int) -> Iterator[dict]:
        """Samples of the ceiling `key`, measured alone by this worker (see in_turn): once per
        process, size and sharing mode (_MEASURED); after that, a note names the scenario whose
        rows hold them. A host link's from HOST_CEILINGS_SHARED_FROM in a further sharing mode of
        the run (RunConfig.host_ceilings_from): not measured again, a note names the mode whose
        rows hold them."""
        sharing = str(self.ctx.row_fields.get("sharing", ""))
        first = getattr(self.ctx.config, "host_ceilings_from", None)
        if first and nbytes >= HOST_CEILINGS_SHARED_FROM and parse_ceiling(key)[0] in ("h2d", "d2h"):
            if not self.host_ceilings_noted:
                self.host_ceilings_noted = True
                self.ctx.note(f"host_ceilings_from.{sharing}", f"{first} from {HOST_CEILINGS_SHARED_FROM}")
            return
        if self.held_elsewhere(key, nbytes):
            return
        yield from self._measure_ceiling(key, nbytes)
        self.measured_here(key, nbytes)

    def held_elsewhere(self, key: str, nbytes: int) -> bool:
        """Whether another scenario of this process measured the ceiling `key` at nbytes in this
        sharing mode (_MEASURED); if so, a note names it (where the analysis finds the rows)."""
        sharing = str(self.ctx.row_fields.get("sharing", ""))
        held = _MEASURED.get((key, nbytes, sharing))
        if held is None or held == self.scenario.name:
            return False
        sources = self.ceilings_from.setdefault(sharing, [])
        if held not in sources:
            sources.append(held)
            self.ctx.note(f"ceilings_from.{sharing}", ",".join(sources))
        return True

    def measured_here(self, key: str, nbytes: int) -> None:
        _MEASURED[(key, nbytes, str(self.ctx.row_fields.get("sharing", "")))] = self.scenario.name

    def _measure_ceiling(self, key: str, nbytes: int) -> Iterator[dict]:
        ceilings = self.meter()
        reps = reps_for(nbytes)

        def take(trial) -> Sample:
            seconds, batch = ceilings.bandwidth(key, nbytes, trial.seed, trial.reps, window=self.sampler.window)
            return Sample(seconds, batch)

        yield from self.sampler.run(self.ceiling_group(key, nbytes, reps), take, timer=True, solo=True, reps=reps,
                                    phase="ceiling")

    def ceiling_group(self, key: str, nbytes: int, reps: int) -> dict:
        """The fields naming the samples of the ceiling `key` at nbytes."""
        _, _, src, dst = parse_ceiling(key)
        group = self.group(key, "stream", nbytes, src, dst, path="ceiling", reps=reps)
        group["l2_resident"] = self.meter().l2_resident(key, nbytes, reps)
        return group

    def in_turn(self, mine: Callable[[], Iterator[dict]]) -> Iterator[dict]:
        """The producer, then the consumer, each runs mine() while the other waits at the barrier,
        so two measurements never share the GPU."""
        for turn in (PRODUCER, CONSUMER):
            if self.ctx.rank == turn:
                yield from mine()
            self.ctx.sync()

    def setup_row(self, variant: str, seconds: float, iteration: int, nbytes: int, src: Any, dst: Any) -> dict:
        """A row of one timed setup operation (metric 'setup'), the iteration-th on fresh objects."""
        return self.sampler.row(dict(path=self.path, variant=variant, measure="", metric="setup", src=src,
                                     dst=dst, bytes=nbytes), Sample(seconds, 1, None), iteration)

    def meter(self) -> Ceilings:
        """This worker's ceilings, made on first use (their buffers hold a ring of the largest size)."""
        if self.ceilings is None:
            self.ceilings = Ceilings(self.gpu, self.ring_bytes(), self.host_rings())
        return self.ceilings

    def host_rings(self) -> int:
        """Pinned source rings an h2d ceiling takes in turn (gpu.ceilings.Ceilings)."""
        return 2

    def ring_bytes(self) -> int:
        """Bytes of a ring of the largest size of this run (every buffer that holds rings)."""
        from gpuipc_bench.gpu.memory import ring_capacity

        return ring_capacity(self.sizes)
