"""What the hardware does for a link, in one process, measured like the paths (rings, gate,
warm-up, verification), so that a path's figure and its ceiling differ only in the path.

Keys (the `variant` of ceiling rows, and the `ceiling` column of the rows they bound):
    d2d@N      device-local copy on GPU N, copy engine     d2d-sm@N    the same by a kernel
    h2d@N      pinned host -> GPU N, copy engine           h2d-sm@N    a kernel on N reads host memory
    d2h@N      GPU N -> pinned host, copy engine           d2h-sm@N    a kernel on N writes host memory
    peer@A>B   GPU A -> GPU B, peer access on, copy engine  peer-sm@A>B  a kernel on A stores into B
A peer ceiling is issued by the source GPU (it pushes): on two H200s a copy issued by the
destination took ~13 us per 4 KiB against ~2.3 us pushed, and fell below the IPC path it bounds.

A key may end in '/producer' or '/consumer': the process that measured it, where a scenario
measures one ceiling in both of its processes because each bounds a path that process times.
Up to a few MiB a copy costs a fixed time more than its bytes (~1.8 us on an H100), and
that time is not the same in every process: one process's copies took 40-165 ns longer than
the other's, 4 B to 4 MiB alike, the slower one changing from run to run
(scripts/probes/probe_nvshmem_put.py); a bound measured in another process is then no bound.
"""

from __future__ import annotations

import time
from typing import Any

from gpuipc_bench.gpu.device import Gpu
from gpuipc_bench.gpu.memory import L2Check, Ring, on_device, reps_for
from gpuipc_bench.gpu.timing import host_warm_bytes

KINDS = ("d2d", "h2d", "d2h", "peer")


def parse_ceiling(key: str) -> tuple[str, str, Any, Any]:
    """'d2d@0' -> ('d2d', 'ce', 0, 0); 'h2d-sm@0' -> ('h2d', 'sm', 'host', 0);
    'peer@0>1' -> ('peer', 'ce', 0, 1). Kind, engine, source, destination. A trailing
    '/producer' or '/consumer' (who measured it) changes nothing here."""
    key, _, who = key.partition("/")
    if who not in ("", "producer", "consumer"):
        raise ValueError(f"unknown ceiling {key}/{who!r}")
    name, _, where = key.partition("@")
    kind, _, engine = name.partition("-")
    engine = engine or "ce"
    if kind not in KINDS or engine not in ("ce", "sm"):
        raise ValueError(f"unknown ceiling {key!r}")
    if kind == "peer":
        a, _, b = where.partition(">")
        return kind, engine, int(a), int(b)
    device = int(where)
    ends = {"d2d": (device, device), "h2d": ("host", device), "d2h": (device, "host")}[kind]
    return kind, engine, ends[0], ends[1]


class Ceilings:
    """Ceilings measured by one worker; buffers are made on first use (or by reserve()) at
    `capacity` bytes (a ring of the largest size) and released with the worker's Gpu, the pinned
    host ones into the process's keep (memory.KeptPinnedBuffer: the next scenario of the process
    takes them again). `host_rings`: the pinned source rings an h2d sample takes in turn
    (_host_source; 1: one ring, filled for every sample)."""

    def __init__(self, gpu: Gpu, capacity: int, host_rings: int = 2):
        self.gpu, self.capacity, self.host_rings = gpu, int(capacity), max(1, int(host_rings))
        self._buffers: dict[tuple, tuple[Any, Any]] = {}
        self._others: dict[int, Gpu] = {}
        self._host_sources: dict[tuple, list[list]] = {}  # (kind, src, dst) -> two [buffer, (ring, seed)]
        self._host_turn: dict[tuple, int] = {}

    def gpu_for(self, device: int) -> Gpu:
        """This worker's Gpu for `device`: the main one, or one made (and owned by it) on demand."""
        if device == self.gpu.device:
            return self.gpu
        if device not in self._others:
            with on_device(device):
                self._others[device] = self.gpu.adopt(Gpu(device))
        return self._others[device]

    def _ends(self, key: str):
        kind, engine, src, dst = parse_ceiling(key)
        if kind != "peer" and self.gpu.device not in (src, dst):
            raise ValueError(f"ceiling {key} must be measured on its own GPU, not GPU {self.gpu.device}")
        ends = (kind, src, dst)  # the copy engine and the kernel copy share buffers
        if ends not in self._buffers:
            def make(where):
                if where == "host":
                    return self.gpu.kept_pinned(self.capacity)
                with on_device(where):
                    return self.gpu_for(where).alloc(self.capacity)

            self._buffers[ends] = (make(src), make(dst))
        s, d = self._buffers[ends]
        return kind, engine, src, dst, s, d

    def reserve(self, key: str) -> None:
        """Make the buffers of `key` now (with an h2d key, its source rings too): in a scenario's
        set-up, where both workers make theirs at once, rather than at the first sample of each
        in turn (in_turn), where the other worker waits (the pinned ones: ~0.14 s per 256 MiB)."""
        kind, _, src, dst, s, _ = self._ends(key)
        if src == "host":
            self._source_rings((kind, src, dst), s)

    def _source_rings(self, ends: tuple, first) -> list[list]:
        """The pinned source rings of an h2d key ([buffer, (ring, seed) it holds]): `first` and
        host_rings - 1 more, made on first need."""
        rings = self._host_sources.get(ends)
        if rings is None:
            rings = self._host_sources[ends] = [[first, None]] + [[self.gpu.kept_pinned(self.capacity), None]
                                                                  for _ in range(self.host_rings - 1)]
        return rings

    def issuer(self, key: str) -> Gpu:
        """The Gpu whose stream runs the copies of `key`: the source GPU for peer copies; for a
        kernel copy between host and device, the device's."""
        kind, _, src, dst = parse_ceiling(key)
        return self.gpu_for(src) if kind == "peer" else self.gpu

    def l2_resident(self, key: str, nbytes: int, reps: int | None = None) -> L2Check:
        """The L2 flag of the samples of `key` (each sample's from its own batch): both rings on
        the issuing GPU for a copy within it; one (the device side, or the issuer's side of a
        peer copy) otherwise."""
        kind, _, src, dst = parse_ceiling(key)
        sides = 2 if src == dst and src != "host" else 1
        return L2Check(int(nbytes), self.issuer(key).l2_bytes, sides)

    def bandwidth(self, key: str, nbytes: int, seed: int, reps: int | None = None,
                  window: Any = None) -> tuple[float, int]:
        """(seconds per transfer, reps) of one verified sample: rep r copies slot r of a source ring
        filled with seed + r into slot r of the destination ring (from host memory: one of two
        rings filled once per shape, _host_source). `window`: the sample's lane reading
        (machine.lanes.LaneWindow), begun again after a fill of host memory and ended before the
        verification, which reads host memory too where the copies write it."""
        kind, engine, src, dst, s, d = self._ends(key)
        reps = reps or reps_for(nbytes)
        ring = Ring.for_size(nbytes, reps)
        issuer = self.issuer(key)
        dp = _dptr(d)
        if src == "host":
            sp, seed, filled = self._host_source((kind, src, dst), s, ring, seed)
            if filled and window is not None:
                window.begin()
        else:
            sp = _dptr(s)
            filler = self.gpu_for(src)
            with on_device(filler.device):
                filler.fill(sp, ring, seed)
                filler.synchronize()
        with on_device(issuer.device):
            copy = issuer.copy_launcher(nbytes, engine)
            # over PCIe a large copy's warm-up moves 1 MiB (gpu.timing.host_warm_bytes)
            warm = issuer.copy_launcher(host_warm_bytes(nbytes), engine) if "host" in (src, dst) else copy
            scratch = dp + ring.offset(reps - 1)  # warm-ups land in the last slot, rewritten by its rep
            marks = issuer.time_batch(lambda r: copy(dp + ring.offset(r), sp + ring.offset(r)), reps,
                                      warm=lambda: warm(scratch, sp), transfer_bytes=nbytes)
            seconds = marks.seconds() / reps
        if window is not None:
            window.end()
        checker = self.gpu if dst == "host" else self.gpu_for(dst)
        with on_device(checker.device):
            checker.verify(dp, ring, seed, "ceiling", key)
        return seconds, reps

    def _host_source(self, ends: tuple, first, ring: Ring, seed: int) -> tuple[int, int, bool]:
        """(address, seed, whether it was filled now) of the pinned host ring an h2d sample copies
        from. Filling it crosses the bus as the copy does (at 256 MiB, ~5 ms a sample, as long as the
        copy it is filled for), so two rings (`first` and one more) are filled once per ring shape
        and taken in turn: the destination's bytes still change from every sample to the next, and
        a copy that did not happen still fails verification. `seed` fills a ring that holds another
        shape. With one ring (host_rings 1) it is filled with `seed` for every sample."""
        rings = self._source_rings(ends, first)
        turn = self._host_turn[ends] = (self._host_turn.get(ends, -1) + 1) % len(rings)
        buffer, held = rings[turn]
        filled = held is None or held[0] != ring or len(rings) == 1
        if filled:
            other = rings[1 - turn][1] if len(rings) == 2 else None
            if other is not None and other == (ring, seed):
                seed ^= 1
            with on_device(self.gpu.device):
                self.gpu.fill(_dptr(buffer), ring, seed)
                self.gpu.synchronize()
            rings[turn][1] = held = (ring, seed)
        return _dptr(buffer), held[1], filled

    def latency(self, key: str, nbytes: int, seed: int, reps: int = 100) -> float:
        """Seconds of one copy + stream synchronize, host-timed, mean of `reps` (after one more),
        verified: the ceiling of the host-driven ping-pongs."""
        kind, engine, src, dst, s, d = self._ends(key)
        ring = Ring.for_size(nbytes, 1)
        issuer = self.issuer(key)
        filler = self.gpu if src == "host" else self.gpu_for(src)
        with on_device(filler.device):
            filler.fill(_dptr(s), ring, seed)
            filler.synchronize()
        with on_device(issuer.device):
            copy = issuer.copy_launcher(nbytes, engine)
            sync = issuer.stream.synchronize
            sp, dp = _dptr(s), _dptr(d)
            copy(dp, sp)
            sync()
            t0 = time.perf_counter()
            for _ in range(reps):
                copy(dp, sp)
                sync()
            seconds = (time.perf_counter() - t0) / reps
        checker = self.gpu if dst == "host" else self.gpu_for(dst)
        with on_device(checker.device):
            checker.verify(_dptr(d), ring, seed, "ceiling", key)
        return seconds


def _dptr(buf: Any) -> int:
    return buf.dptr if hasattr(buf, "dptr") else buf.ptr
