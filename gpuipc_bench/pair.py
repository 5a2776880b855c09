"""What every producer/consumer GPU scenario shares: the pair's fields, the run loop, teardown.

A scenario's worker class subclasses PairWorker, names its `path`, and writes
`setup()` and `measure(nbytes)`; both are generators of result rows.
"""

from __future__ import annotations

from typing import Any, Iterator

from gpuipc_bench import cuda
from gpuipc_bench.faults import corrupt_requested
from gpuipc_bench.results import new_row
from gpuipc_bench.scenario import Scenario, WorkerSpec

PRODUCER, CONSUMER = 0, 1


class PairScenario(Scenario):
    """A producer on the first GPU of --devices (default 0) and a consumer on the second
    (default: the same GPU). `worker_class` (a PairWorker) runs in both."""

    gpus_needed = 1
    min_workers = max_workers = default_workers = 2
    worker_class: type["PairWorker"]

    def workers(self, config, machine):
        devices = list(config.devices) if config.devices else [0]
        consumer = devices[1] if len(devices) > 1 else devices[0]
        return [WorkerSpec(PRODUCER, "producer", devices[0]), WorkerSpec(CONSUMER, "consumer", consumer)]

    def run(self, ctx) -> Iterator[dict]:
        return self.worker_class(ctx, self.default_sizes()).run()


class PairWorker:
    path = ""  # the path named in rows and errors

    def __init__(self, ctx, default_sizes):
        self.ctx, self.config, self.seg = ctx, ctx.config, ctx.segment
        self.timeout = ctx.config.timeout
        self.producer = ctx.rank == PRODUCER
        self.other = [CONSUMER if self.producer else PRODUCER]
        self.device = ctx.spec.device
        self.pdev, self.cdev = ctx.specs[PRODUCER].device, ctx.specs[CONSUMER].device
        self.sizes = tuple(sorted(ctx.config.sizes_for(default_sizes)))
        self.max_bytes = max(self.sizes)
        self.corrupt = corrupt_requested()
        self.fields = dict(scenario=self.path, workers=ctx.nworkers,
                           sharing=cuda.sharing_mode([self.pdev, self.cdev]))
        self.seq = 0  # samples so far; both workers count in step
        self.gpu: cuda.Gpu | None = None
        self.imports: list = []  # what this worker opened from the other (closed first)

    # ------------------------------------------------------------------ to write

    def setup(self) -> Iterator[dict]:
        return iter(())

    def measure(self, nbytes: int) -> Iterator[dict]:
        raise NotImplementedError

    def open_gpu(self) -> cuda.Gpu:
        return cuda.Gpu(self.device)

    # ------------------------------------------------------------------ driver

    def run(self) -> Iterator[dict]:
        clean = False
        try:
            self.ctx.phase("setup")
            self.gpu = self.open_gpu()
            yield from self.setup()
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
            if self.gpu is not None:
                gpu, self.gpu = self.gpu, None
                try:
                    gpu.close()
                except BaseException as exc:  # noqa: BLE001
                    first = first or exc
        if first is not None and clean:
            raise first

    # ------------------------------------------------------------------ helpers

    def _import(self, resource: Any) -> Any:
        """Something opened from the other worker (IPC mapping, event): closed before teardown's barrier."""
        self.gpu.adopt(resource)
        self.imports.append(resource)
        return resource

    def _row(self, **fields) -> dict:
        return new_row(**{**self.fields, **fields})  # a row may override the common fields

    def _setup_row(self, variant: str, seconds: float, nbytes: int = 0, src: Any = "", dst: Any = "") -> dict:
        return cuda.setup_row(variant, seconds, nbytes=nbytes, src=src, dst=dst, path=self.path, **self.fields)

    def _ceiling_rows(self, ceilings: cuda.Ceilings, key: str, nbytes: int, latency: bool = False):
        """Rows of the ceiling `key` at this size (bandwidth, or latency), measured by this worker."""
        measure = ceilings.latency_rows if latency else ceilings.rows
        phase = "latency" if latency else "sample"
        return measure(key, nbytes, self.config.warmup, self.config.iterations,
                       on_sample=lambda i: self.ctx.phase(phase, nbytes, i), **self.fields)

    def _in_turn(self, measure_mine) -> Iterator[dict]:
        """The producer, then the consumer, each runs measure_mine() while the other waits,
        so two measurements never share the GPU."""
        for turn in (PRODUCER, CONSUMER):
            if self.ctx.rank == turn:
                yield from measure_mine()
            self.ctx.sync()
