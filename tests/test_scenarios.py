"""CPU tests of the harness and of every scenario's protocol, in real forked workers.

The GPU scenarios run on the fake CUDA layer of fake_gpu.py: real bytes in a shared arena,
every operation done when it is enqueued, so the host-side ordering of the two workers
(signals, mailbox counters, barriers) decides whether the bytes arrive, and the per-slot
verification checks them. The host and barrier scenarios need no fake.
"""

from __future__ import annotations

import collections
import os

import pytest

from gpuipc_bench.engine.sampler import SETUP_REPEATS

import fake_gpu
from conftest import ours
from gpuipc_bench.config import RunConfig
from gpuipc_bench.errors import UsageError, WorkerFailed
from gpuipc_bench.gpu.memory import MAX_REPS, Ring, reps_for, ring_capacity
from gpuipc_bench.harness.launcher import run_scenario
from gpuipc_bench.engine.pingpong import (
    MAX_ROUNDS, MIN_ROUNDS, TIME_SLICED_MIN_ROUNDS, Layout, rounds_for, spin_limits,
)
from gpuipc_bench.gpu import kernels
from gpuipc_bench.engine.sampler import TARGET_SAMPLE_S, Sample, calibrated
from gpuipc_bench.scenarios import SCENARIOS, latency, sharing
from gpuipc_bench.engine.gpu_signal import Signal

SIZES = (4, 4099, 64 << 10)
# These tests' runs take at most 3 samples a group, and time each set-up operation as often
RUN_REPEATS = min(SETUP_REPEATS, 3)


def run(monkeypatch, name, scenario=None, fault=None, fake=True, env=None, **overrides):
    if fake:
        fake_gpu.install(monkeypatch)
    if fault:
        monkeypatch.setenv("GPUIPC_BENCH_FAULT", fault)
    else:
        monkeypatch.delenv("GPUIPC_BENCH_FAULT", raising=False)
    settings = dict(scenarios=(name,), min_samples=2, max_samples=3, warmup=1, timeout=20.0)
    settings.update(overrides)
    config = RunConfig(**settings)
    scenario = scenario or SCENARIOS[name]
    rows: list[dict] = []
    progress: list[int] = []
    specs = scenario.workers(config, None)
    outcome = run_scenario(scenario, config, specs, on_row=rows.append, on_progress=progress.append, env=env)
    if outcome.ok:
        assert sum(progress) == scenario.progress_total(config, specs)
    return outcome, rows


def groups(rows, *keys):
    return collections.Counter(tuple(r[k] for k in keys) for r in rows)


# --------------------------------------------------------------------------- rings and the sample loop


def test_a_ring_gives_every_rep_its_own_slot_and_seed():
    ring = Ring.for_size(4099, 8)
    assert ring.stride == 4352 and ring.slots == 8
    assert [ring.offset(r) for r in range(9)] == [0, 4352, 8704, 13056, 17408, 21760, 26112, 30464, 0]
    assert ring.bytes == 7 * 4352 + 4099
    assert Ring.for_size(1 << 30).slots == 1 and Ring.for_size(4).slots == reps_for(4) == MAX_REPS
    assert ring_capacity((4, 1 << 20)) == Ring.for_size(1 << 20).bytes  # MAX_REPS slots of 1 MiB


def test_a_small_ring_is_l2_resident_and_a_large_one_is_not():
    l2 = 50 << 20
    assert Ring.for_size(64 << 10).l2_resident(l2)  # 128 x 64 KiB = 8 MiB
    assert not Ring.for_size(1 << 20).l2_resident(l2)  # 128 x 1 MiB = 128 MiB
    assert not Ring.for_size(256 << 20).l2_resident(l2)


def test_calibration_shortens_slow_samples_only():
    # time-sliced hand-offs: about TARGET_SAMPLE_S a sample
    assert calibrated(Sample(300e-6, 128), 128) == int(TARGET_SAMPLE_S / 300e-6) < 128
    assert calibrated(Sample(2e-6, 256), 256) == 256  # never more than asked
    assert calibrated(Sample(1.0, 8), 8, min_reps=4) == 4
    assert calibrated(Sample(float("nan"), 8), 8) == 8


def test_every_worker_takes_the_same_samples_and_the_timer_decides(monkeypatch, no_leaks):
    """host: consumer 1 times and decides; the producer and consumer 2 follow its decisions."""
    outcome, rows = run(monkeypatch, "host", fake=False, sizes=(4096, 65536), workers=3, min_samples=3, max_samples=9)
    assert outcome.ok, outcome.error
    by_group = groups(rows, "variant", "bytes")
    for nbytes in (4096, 65536):
        for variant in ("shared-buffer", "memcpy@host", "pingpong"):
            assert 3 <= by_group[(variant, nbytes)] <= 9
    for (variant, nbytes), n in by_group.items():
        got = sorted(r["iteration"] for r in rows if r["variant"] == variant and r["bytes"] == nbytes)
        assert got == list(range(n))
        # why a group stopped (its interval, a rival far ahead or apart: engine.sampler) is tested with
        # crafted samples in test_interleave.py and test_far_behind.py; real host timing cannot pin it
    assert all(r["workers"] == 3 and r["scenario"] == "host" for r in rows)
    assert {r["measure"] for r in rows if r["variant"] == "shared-buffer"} == {"handoff"}


def test_a_fixed_count_takes_exactly_that_many(monkeypatch, no_leaks):
    outcome, rows = run(monkeypatch, "barrier", fake=False, min_samples=4, max_samples=4)
    assert outcome.ok, outcome.error
    assert groups(rows, "variant") == {("shm",): 4, ("multiprocessing",): 4}


def test_workers_that_name_their_slots_differently_are_refused(monkeypatch, no_leaks):
    class Confused(type(SCENARIOS["barrier"])):
        def run(self, ctx):
            ctx.begin("barrier", sharing="none")
            ctx.declare("a", "b") if ctx.rank == 0 else ctx.declare("b", "a")
            ctx.lock_names()
            return iter(())

    outcome, _ = run(monkeypatch, "barrier", scenario=Confused(), fake=False)
    assert isinstance(outcome.error, WorkerFailed)
    assert "named their mailbox slots or handles in different orders" in str(outcome.error)


# --------------------------------------------------------------------------- the GPU paths' protocols


def check_bandwidth_rows(rows, path, variants, measures, sizes):
    got = groups([r for r in rows if r["path"] == path and r["metric"] == "bandwidth"], "variant", "measure", "bytes")
    assert set(got) == {(v, m, n) for v in variants for m in measures for n in sizes}
    assert all(2 <= n <= 3 for n in got.values())
    for r in rows:
        assert r["verified"] is not False
        assert r["seconds"] > 0 and r["scenario"] in (path, "peer")
    data = [r for r in rows if r["path"] == path and r["metric"] == "bandwidth"]
    assert {r["l2_resident"] for r in data if r["bytes"] == 4} == {True}
    assert {r["l2_resident"] for r in data if r["bytes"] == 64 << 10} == {False}  # a 4 MiB ring or more, 1 MiB L2


def test_ipc_protocol(monkeypatch, no_leaks):
    outcome, rows = run(monkeypatch, "ipc", sizes=SIZES)
    assert outcome.ok, outcome.error
    check_bandwidth_rows(rows, "ipc", ("ce", "sm", "push"), ("stream", "handoff"), SIZES)
    ceilings = groups([r for r in rows if r["path"] == "ceiling" and r["metric"] == "bandwidth"], "variant")
    assert set(ceilings) == {("d2d@0",), ("d2d-sm@0",)}
    sm = {r["ceiling"] for r in rows if r["variant"] == "sm"}
    assert sm == {"d2d-sm@0"}  # kernel copies against the kernel-copy ceiling
    setup = groups([r for r in rows if r["metric"] == "setup"], "variant")
    repeats = min(SETUP_REPEATS, 3)  # as often as the run's figures at most: this run's cap is 3
    assert setup == {(op,): repeats for op in ("ipc_export", "ipc_event_export", "ipc_open_cold", "ipc_close",
                                               "ipc_event_open")}
    pingpong = {r["bytes"] for r in rows if r["variant"] == "ce-pingpong"}
    assert pingpong == {4, 64 << 10}  # of the sweep, the ping-pong sizes only (4 B, 4 KiB, 64 KiB, 1 MiB)
    push = [r for r in rows if r["variant"] == "push"]
    assert {(r["src"], r["dst"]) for r in push} == {("0", "0")}


def test_staging_protocol(monkeypatch, no_leaks):
    outcome, rows = run(monkeypatch, "staging", sizes=SIZES, chunk_bytes=256 << 10)
    assert outcome.ok, outcome.error
    got = groups([r for r in rows if r["path"] == "staging" and r["metric"] == "bandwidth"], "variant", "measure")
    assert set(got) == {("pinned", "stream"), ("pinned", "handoff"), ("pipelined", "stream"),
                        ("pipelined", "handoff"), ("pinned-hostsync", "handoff"), ("pageable", "handoff")}
    ceilings = {(r["variant"], r["measure"], r["ceiling"]) for r in rows if r["path"] == "staging"
                and r["metric"] == "bandwidth"}
    in_sequence = {("pinned", "handoff"), ("pinned-hostsync", "handoff"), ("pageable", "handoff")}
    assert ceilings == {(v, m, "d2h@0+h2d@0" if (v, m) in in_sequence else "d2h@0|h2d@0") for v, m, _ in ceilings}
    assert {r["variant"] for r in rows if r["path"] == "ceiling"} == {"d2h@0", "h2d@0"}
    setup = groups([r for r in rows if r["metric"] == "setup"], "variant")
    assert setup == {("host_first_touch",): 1}  # the registration is timed by mmap, whose set-up it is


def test_mmap_protocol(monkeypatch, no_leaks):
    outcome, rows = run(monkeypatch, "mmap", sizes=SIZES)
    assert outcome.ok, outcome.error
    check_bandwidth_rows(rows, "mmap", ("zero-copy", "dma"), ("stream", "handoff"), SIZES)
    assert {(r["measure"], r["ceiling"]) for r in rows if r["variant"] == "zero-copy"} == {
        ("handoff", "d2h-sm@0+h2d-sm@0"), ("stream", "d2h-sm@0|h2d-sm@0")}
    assert {r["variant"] for r in rows if r["path"] == "ceiling"} == {"d2h@0", "d2h-sm@0", "h2d@0", "h2d-sm@0"}
    setup = groups([r for r in rows if r["metric"] == "setup"], "variant")
    assert setup == {("host_first_touch",): 1, ("host_register",): RUN_REPEATS, ("host_unregister",): RUN_REPEATS}


@pytest.mark.parametrize("name", ["ipc", "staging", "mmap"])
def test_a_corrupted_byte_is_caught_naming_its_slot(monkeypatch, no_leaks, name):
    outcome, rows = run(monkeypatch, name, fault="corrupt", sizes=(4099,))
    assert isinstance(outcome.error, WorkerFailed)
    assert f"verification failed on path {name}/" in str(outcome.error)
    assert "in ring slot" in str(outcome.error)


def test_a_consumer_that_copies_before_the_signal_is_caught(monkeypatch, no_leaks):
    """Plant an ordering bug: the consumer's 'filled' wait returns at once for transfer 3 (as a
    missing cudaStreamWaitEvent would), and the producer is slow to mark that slot. The consumer
    then copies a slot whose first bytes the fill left wrong, and the per-slot check names it."""
    import time

    real_receive, real_send = Signal.receive, Signal.send

    def hasty_receive(self, stream):
        if self.name == "pull.filled" and self.count % 8 == 3:
            self.count += 1  # skip the wait
            self.ctx.store(self.taken, self.count)
            return
        real_receive(self, stream)

    def slow_send(self, stream):
        if self.name == "pull.filled" and self.count % 8 == 2:
            time.sleep(0.2)  # transfer 3's mark comes late
        real_send(self, stream)

    monkeypatch.setattr(Signal, "receive", hasty_receive)
    monkeypatch.setattr(Signal, "send", slow_send)
    outcome, _ = run(monkeypatch, "ipc", sizes=(4099,))
    assert isinstance(outcome.error, WorkerFailed)
    assert "verification failed on path ipc/" in str(outcome.error) and "in ring slot" in str(outcome.error)


def test_ipc_across_two_gpus_uses_the_peer_ceilings(monkeypatch, no_leaks):
    outcome, rows = run(monkeypatch, "ipc", sizes=(4099,), devices=(0, 1))
    assert outcome.ok, outcome.error
    ceilings = {r["ceiling"] for r in rows if r["path"] == "ipc" and r["metric"] == "bandwidth"}
    assert ceilings == {"peer@0>1", "peer-sm@0>1", "peer@1>0"}
    assert {r["sharing"] for r in rows if r["path"] == "ipc"} == {"exclusive"}
    assert [r for r in rows if r["variant"] == "peer_enable"]


def test_rows_carry_the_order_they_were_taken_in(monkeypatch, no_leaks):
    outcome, rows = run(monkeypatch, "ipc", sizes=(4099, 64 << 10))
    assert outcome.ok, outcome.error
    for rank_rows in ([r for r in rows if r["measure"] == "stream" and r["path"] == "ipc"],):
        seqs = [r["seq"] for r in rank_rows]
        assert all(s >= 0 for s in seqs) and seqs == sorted(seqs)  # one timer: its samples in order


def test_peer_measures_both_directions_at_once(monkeypatch, no_leaks):
    """'bidir': both workers push at once; the consumer times both, a sample's transfers being
    the copies of both directions; each side checks what it received."""
    from gpuipc_bench.scenarios import peer

    monkeypatch.setattr(peer.PeerWorker, "p2p_off", lambda self: iter(()))  # staged copies: not faked
    outcome, rows = run(monkeypatch, "peer", sizes=(4099, 64 << 10), devices=(0, 1))
    assert outcome.ok, outcome.error
    bidir = [r for r in rows if r["variant"] == "bidir"]
    assert {r["bytes"] for r in bidir} == {4099, 64 << 10}
    assert all(r["verified"] is True and r["batch"] % 2 == 0 and r["measure"] == "stream" for r in bidir)
    assert {(r["src"], r["dst"], r["ceiling"]) for r in bidir} == {("0", "1", "")}


def test_peer_bidir_catches_a_wrong_answer(monkeypatch, no_leaks):
    from gpuipc_bench.scenarios import peer

    monkeypatch.setattr(peer.PeerWorker, "p2p_off", lambda self: iter(()))
    monkeypatch.setattr(peer.IpcWorker, "measure", lambda self, nbytes: iter(()))  # bidir alone
    outcome, _ = run(monkeypatch, "peer", sizes=(4099,), devices=(0, 1), fault="corrupt")
    assert isinstance(outcome.error, WorkerFailed)
    assert "verification failed on path peer/bidir" in str(outcome.error)


def test_peers_health_form_measures_the_checks_figures_and_the_path_only(monkeypatch, no_leaks):
    """check --preset health's peer (PeerScenario.health, on a copy): the copy engine's stream and its
    peer@A>B ceiling at the largest size, its hand-off at the other, each set-up operation once; no
    P2P-off pass (its staged copies are not faked: they would fail here), bidir, kernel copy, push,
    ping-pong or peer-sm ceiling; and it may run anywhere in a persistent process set (the full form only as
    the first path of a fresh one: first_in_set)."""
    import copy

    form = copy.copy(SCENARIOS["peer"])
    form.health = True
    assert form.persistent_workers and not form.first_in_set and form.cost_key == "ipc"
    assert SCENARIOS["peer"].persistent_workers and SCENARIOS["peer"].first_in_set
    outcome, rows = run(monkeypatch, "peer", scenario=form, sizes=(4099, 64 << 10), devices=(0, 1))
    assert outcome.ok, outcome.error
    measured = groups([r for r in rows if r["metric"] != "setup"], "path", "variant", "measure", "bytes")
    assert set(measured) == {("peer", "ce", "handoff", 4099), ("peer", "ce", "stream", 64 << 10),
                             ("ceiling", "peer@0>1", "stream", 64 << 10)}
    assert all(r["verified"] is True for r in rows if r["path"] == "peer" and r["metric"] != "setup")
    setup = groups([r for r in rows if r["metric"] == "setup"], "variant", "src", "dst")
    assert setup == {(v, "0", "1"): 1 for v in ("ipc_export", "ipc_event_export", "ipc_open_cold", "ipc_close",
                                                 "ipc_event_open", "peer_enable")} | {("peer_enable", "1", "0"): 1}


def test_the_health_forms_of_ipc_and_staging_measure_the_checks_figures_only(monkeypatch, no_leaks):
    """check --preset health's same-GPU forms (IpcScenario.health, StagingScenario.health, on copies): ipc's
    copy-engine stream and d2d ceiling at the largest size, its hand-off at the other, each set-up operation
    once; staging's two ceilings of the host link at the largest size and nothing else (no shared ring, no
    staged variant, no ping-pong)."""
    import copy

    ipc, staging = copy.copy(SCENARIOS["ipc"]), copy.copy(SCENARIOS["staging"])
    ipc.health = staging.health = True
    outcome, rows = run(monkeypatch, "ipc", scenario=ipc, sizes=(4099, 64 << 10))
    assert outcome.ok, outcome.error
    measured = groups([r for r in rows if r["metric"] != "setup"], "path", "variant", "measure", "bytes")
    assert set(measured) == {("ipc", "ce", "handoff", 4099), ("ipc", "ce", "stream", 64 << 10),
                             ("ceiling", "d2d@0", "stream", 64 << 10)}
    assert set(groups([r for r in rows if r["metric"] == "setup"], "variant").values()) == {1}
    outcome, rows = run(monkeypatch, "staging", scenario=staging, sizes=(4099, 64 << 10))
    assert outcome.ok, outcome.error
    assert set(groups(rows, "path", "variant", "measure", "bytes")) == {("ceiling", "d2h@0", "stream", 64 << 10),
                                                                        ("ceiling", "h2d@0", "stream", 64 << 10)}
    assert all(r["verified"] is True for r in rows)


# --------------------------------------------------------------------------- latency and sharing


def test_rounds_and_spin_limits():
    assert rounds_for(1e-6) == MAX_ROUNDS
    assert rounds_for(4.4e-3) == MIN_ROUNDS  # time-sliced: ~2.2 ms a hop
    # known time-sliced: a sample of about TARGET_SAMPLE_S (20 ms), at least TIME_SLICED_MIN_ROUNDS
    assert rounds_for(4.4e-3, lo=TIME_SLICED_MIN_ROUNDS) == TIME_SLICED_MIN_ROUNDS < MIN_ROUNDS
    assert rounds_for(2.0e-3, lo=TIME_SLICED_MIN_ROUNDS) == 10
    assert rounds_for(0.0) == rounds_for(float("nan")) == MAX_ROUNDS
    assert spin_limits(RunConfig(scenarios=("latency",))) == (5.0, 30.0)
    assert spin_limits(RunConfig(scenarios=("latency",), timeout=4)) == (2.0, 2.0)
    with pytest.raises(UsageError):
        spin_limits(RunConfig(scenarios=("latency",), extra=(("spin_timeout", "0"),)))


def test_layout_and_threads():
    layout = Layout(4099)
    assert layout.payload_cap == 4352 and layout.ll_offset == 256 + 4352
    assert layout.ll_cap >= kernels.ll_words(4099) * 8 and layout.total % 256 == 0
    assert kernels.pingpong_threads(0) == 32 and kernels.pingpong_threads(4096) == 256
    assert kernels.pingpong_threads(4096, ll=True) == 1024


def test_latency_workers_and_sizes():
    scenario = SCENARIOS["latency"]
    one = scenario.workers(RunConfig(scenarios=("latency",)), None)
    assert [(s.rank, s.device) for s in one] == [(0, 0), (1, 0)]
    with pytest.raises(UsageError, match="takes one GPU"):
        scenario.workers(RunConfig(scenarios=("latency",), devices=(0, 1, 2)), None)
    assert scenario.sizes(RunConfig(scenarios=("latency",), sizes=(4, 1 << 20, 1 << 21))) == (4, 1 << 20)
    assert latency.path_for((0, 0)) == "ipc" and latency.path_for((0, 1)) == "peer"


@pytest.mark.parametrize("devices, path", [(None, "ipc"), ((0, 1), "peer")])
def test_latency_orchestration(monkeypatch, no_leaks, devices, path):
    outcome, rows = run(monkeypatch, "latency", sizes=(0, 4, 4099), devices=devices)
    assert outcome.ok, outcome.error
    setup = [r for r in rows if r["metric"] == "setup"]
    rows = [r for r in rows if r["metric"] != "setup"]
    got = groups(rows, "variant", "bytes")
    assert set(got) == {("barrier", 0), ("flag-pingpong", 0), ("device-pingpong", 0), ("device-pingpong", 4),
                        ("device-pingpong", 4099), ("device-ll", 4), ("device-ll", 4099), ("host-pingpong", 4),
                        ("host-pingpong", 4099)}
    assert all(r["path"] == path and r["metric"] == "latency" and r["workers"] == 2 for r in rows)
    # across two GPUs the harness turns peer access on (both ways), a set-up row each, by the consumer
    assert [(r["variant"], r["src"], r["dst"]) for r in setup] == ([] if devices is None else
                                                                 [("peer_enable", "0", "1"), ("peer_enable", "1", "0")])


def test_sharing_sweep():
    assert sharing.sweep(8) == (1, 2, 4, 8) and sharing.sweep(6) == (1, 2, 4, 6)
    assert sharing.counts_for("h2d", 8) == (1, 2, 8) and sharing.counts_for("d2d", 8) == (1, 2, 4, 8)
    assert sharing.batch_for(64 << 20) == 4 and sharing.batch_for(4) == MAX_REPS


def test_sharing_orchestration_without_mps(monkeypatch, no_mps, no_leaks):
    outcome, rows = run(monkeypatch, "sharing", workers=4, sizes=(1 << 20,))
    assert outcome.ok, outcome.error
    assert {r["sharing"] for r in rows} == {"time-sliced"}
    aggregate = groups([r for r in rows if r["path"] == "sharing"], "variant", "workers")
    assert set(aggregate) == {("d2d-aggregate", 1), ("d2d-aggregate", 2), ("d2d-aggregate", 4),
                              ("h2d-aggregate", 1), ("h2d-aggregate", 2), ("h2d-aggregate", 4)}
    assert {r["bytes"] for r in rows if r["variant"] == "d2d-aggregate"} == {1 << 20, 2 << 20, 4 << 20}
    assert {r["variant"] for r in rows if r["path"] == "ipc"} == {"device-pingpong", "device-ll"}


def test_sharing_runs_in_each_mode_of_the_run(monkeypatch, fake_mps, no_leaks):
    """No daemon of its own: one group of workers per mode, each told its mode by the harness."""
    from gpuipc_bench import modes

    monkeypatch.setattr(sharing.SharingWorker, "check_clients", lambda self: None)
    seen = {}
    for mode in modes.make(("time-sliced", "mps")):
        mode.start()
        try:
            outcome, rows = run(monkeypatch, "sharing", workers=2, sizes=(1 << 20,), env=mode.env())
        finally:
            mode.stop()
        assert outcome.ok, outcome.error
        seen[mode.name] = {r["sharing"] for r in rows if r["path"] in ("sharing", "ipc")}
    assert seen == {"time-sliced": {"time-sliced"}, "mps": {"mps"}}
    assert ours(fake_mps) == []


def test_mmap_region_refuses_a_full_tmpfs(monkeypatch):
    """The region is made in the parent, before any worker: a /dev/shm too small for it is a
    one-line error, never a SIGBUS at first touch."""
    from gpuipc_bench.errors import BenchError
    from gpuipc_bench.scenarios import mmap as mmap_scenario

    class Tiny:
        f_bavail, f_frsize = 10, 4096

    monkeypatch.setattr(mmap_scenario.os, "statvfs", lambda path: Tiny())
    with pytest.raises(BenchError, match="needs 1 MiB in .* which has 40 KiB free"):
        mmap_scenario.shared_region(1 << 20)
    assert not [n for n in os.listdir(mmap_scenario.shm_dir()) if "mmap-" in n]


def test_prefault_touches_every_page_and_keeps_the_bytes():
    import mmap as mmap_module
    import resource

    from gpuipc_bench.gpu.memory import prefault

    region = mmap_module.mmap(-1, 64 << 20, flags=mmap_module.MAP_SHARED)
    region[4096 * 7] = 9
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    prefault(region)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults >= (64 << 20) // mmap_module.PAGESIZE // 2  # about one fault per page
    assert region[4096 * 7] == 9
    region.close()


# --------------------------------------------------------------------------- handles passed as file descriptors


def test_vmm_protocol(monkeypatch, no_leaks):
    """The ipc transfers over memory whose handle travels as a real fd over the real socket."""
    outcome, rows = run(monkeypatch, "vmm", sizes=SIZES)
    assert outcome.ok, outcome.error
    check_bandwidth_rows(rows, "vmm", ("ce", "sm", "push"), ("stream", "handoff"), SIZES)
    setup = groups([r for r in rows if r["metric"] == "setup"], "variant")
    assert setup == {(op,): RUN_REPEATS
                     for op in ("vmm_create", "vmm_export", "vmm_import", "vmm_map", "vmm_unmap_release")}
    assert {r["src"] for r in rows if r["metric"] == "setup"} == {"0"}


def test_mempool_protocol(monkeypatch, no_leaks):
    outcome, rows = run(monkeypatch, "mempool", sizes=SIZES)
    assert outcome.ok, outcome.error
    check_bandwidth_rows(rows, "mempool", ("ce", "sm", "push"), ("stream", "handoff"), SIZES)
    setup = groups([r for r in rows if r["metric"] == "setup"], "variant")
    assert setup == {(op,): RUN_REPEATS
                     for op in ("pool_create", "pool_alloc", "pool_export", "ptr_export", "pool_import",
                                "ptr_import_first", "ptr_import", "ptr_free")}


@pytest.mark.parametrize("name", ["vmm", "mempool", "hostpool"])
def test_fd_paths_catch_a_corrupted_byte(monkeypatch, no_leaks, name):
    outcome, _ = run(monkeypatch, name, fault="corrupt", sizes=(4099,))
    assert isinstance(outcome.error, WorkerFailed)
    assert f"verification failed on path {name}/" in str(outcome.error)


def test_vmm_notes_the_refused_fabric_handle(monkeypatch, no_leaks):
    fake_gpu.install(monkeypatch)
    notes = {}
    config = RunConfig(scenarios=("vmm",), sizes=(4099,), min_samples=2, max_samples=2, warmup=0, timeout=20.0)
    scenario = SCENARIOS["vmm"]
    outcome = run_scenario(scenario, config, scenario.workers(config, None), on_row=lambda row: None,
                           on_note=notes.__setitem__)
    assert outcome.ok, outcome.error
    assert notes == {"vmm.fabric_handle": "waived: CUDA_ERROR_NOT_PERMITTED"}


def test_handles_times_every_paths_setup_at_each_size_and_inside_most_of_the_gpu(monkeypatch, no_leaks):
    notes = {}
    fake_gpu.install(monkeypatch)
    config = RunConfig(scenarios=("handles",), sizes=(4096, 65536, 1 << 20), timeout=20.0)
    scenario = SCENARIOS["handles"]
    outcome = run_scenario(scenario, config, scenario.workers(config, None), on_row=(rows := []).append,
                           on_note=notes.__setitem__)
    assert outcome.ok, outcome.error
    assert notes == {"handles.skipped": "1 MiB: more than a quarter of GPU 0's 1 MiB"}
    setup = groups(rows, "path", "variant", "bytes")
    for nbytes in (4096, 65536):
        for path, op in (("ipc", "ipc_open_cold"), ("vmm", "vmm_import"), ("vmm", "vmm_map"),
                         ("mempool", "pool_import"), ("mempool", "ptr_import_first")):
            assert setup[(path, op, nbytes if path != "vmm" else -(-nbytes // 4096) * 4096)] == SETUP_REPEATS
    big = int(fake_gpu.FAKE_FREE_BYTES * 0.85) >> 20 << 20
    assert setup[("ipc", "ipc_open_suballoc", big)] == SETUP_REPEATS
    assert setup[("mempool", "pool_import_full", big)] == setup[("mempool", "ptr_import_full", big)] == SETUP_REPEATS
    assert not [r for r in rows if r["bytes"] == 1 << 20 and r["variant"] != "ipc_open_suballoc"]
    assert all(r["metric"] == "setup" for r in rows)


def test_handles_is_not_in_the_default_run():
    from gpuipc_bench.harness.plan import resolve_names

    assert "handles" not in resolve_names((), SCENARIOS) and "vmm" in resolve_names((), SCENARIOS)
    assert resolve_names(("handles",), SCENARIOS) == ["handles"]


def test_hostpool_protocol(monkeypatch, no_leaks):
    """staging's transfers through a host ring that a pool exported as a real fd."""
    outcome, rows = run(monkeypatch, "hostpool", sizes=SIZES)
    assert outcome.ok, outcome.error
    got = groups([r for r in rows if r["path"] == "hostpool" and r["metric"] == "bandwidth"], "variant", "measure")
    assert set(got) == {("host-pool", "stream"), ("host-pool", "handoff")}
    assert {r["ceiling"] for r in rows if r["variant"] == "host-pool"} == {"d2h@0+h2d@0", "d2h@0|h2d@0"}
    assert all(r["verified"] is not False for r in rows)
    setup = groups([r for r in rows if r["metric"] == "setup"], "variant")
    assert setup == {("host_pool_create",): 1, ("host_pool_import",): 1, ("host_ptr_import",): 1}


def test_the_pageable_ring_is_faulted_in_once_per_new_span_before_the_timed_interval():
    """staging's pageable hand-off: the pages of the slots a sample uses are faulted in before its
    timed interval, each page once (a first timed sample was otherwise charged with them), up to
    the ring's end, the bytes left as they were."""
    import mmap
    from types import SimpleNamespace

    from gpuipc_bench.gpu.memory import MADV_POPULATE_WRITE
    from scenarios.staging import StagingWorker

    page, calls = mmap.PAGESIZE, []

    class Region:
        def __len__(self):
            return 10 * page

        def madvise(self, option, start, length):
            calls.append((option, start, length))

    worker = SimpleNamespace(ctx=SimpleNamespace(shared=SimpleNamespace(pageable=Region())), pageable_touched=0)
    for span in (100, page, 3 * page + 1, 100 * page, 10 * page):
        StagingWorker.touch_pageable(worker, span)
    assert calls == [(MADV_POPULATE_WRITE, 0, page), (MADV_POPULATE_WRITE, page, 3 * page),
                     (MADV_POPULATE_WRITE, 4 * page, 6 * page)]
    real = mmap.mmap(-1, 4 * page, flags=mmap.MAP_SHARED)
    real[:4] = b"keep"
    worker = SimpleNamespace(ctx=SimpleNamespace(shared=SimpleNamespace(pageable=real)), pageable_touched=0)
    StagingWorker.touch_pageable(worker, 4 * page)
    assert worker.pageable_touched == 4 * page and real[:4] == b"keep"
    real.close()


@pytest.mark.parametrize("name", ["staging", "mmap"])
def test_a_large_transfers_warm_ups_fit_the_host_scratch_of_its_region(monkeypatch, no_leaks, name):
    """From 16 MiB a warm-up over PCIe moves 1 MiB (gpu.timing.host_warm_bytes) into a scratch that
    holds no more (host_scratch_bytes): one of the whole transfer would run past the region's end,
    and a byte it overwrote fails verification. (hostpool's fake pool lies in the fake GPU's arena,
    where an overrun corrupts nothing this run checks: not tested here.)"""
    from gpuipc_bench.gpu import timing

    # scaled down to the fake GPU's arena (the workers fork with these): from 64 KiB, 4 KiB warm-ups
    monkeypatch.setattr(timing, "LARGE_TRANSFER_BYTES", 64 << 10)
    monkeypatch.setattr(timing, "HOST_WARM_BYTES", 4 << 10)
    assert timing.host_scratch_bytes((4, 1 << 20)) == (4 << 10) + 256
    outcome, rows = run(monkeypatch, name, sizes=(4, 1 << 20))
    assert outcome.ok, outcome.error
    assert {r["bytes"] for r in rows if r["path"] == name and r["metric"] == "bandwidth"} == {4, 1 << 20}
