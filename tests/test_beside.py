"""The two sharing modes side by side on two GPUs (harness.beside, issue 34): where the plan puts
them, how the session runs them (the proof, the lanes at once, the shared parts in turn), what
the worker sets of one lane leave alone, and how the analysis reads a run that made them."""

import contextlib
import threading
import time
from types import SimpleNamespace

import pytest

from fakes import SAME_GPU, Named, Sets, fake_machine, h100_node, plan_of, run_session
from gpuipc_bench.engine.scenario import WorkerSpec
from gpuipc_bench.harness import beside as besides
from gpuipc_bench.harness import plan as planning
from gpuipc_bench.harness.beside import Beside, Lanes, Shared, lanes_of, on_mode_gpu
from gpuipc_bench.harness.launcher import Outcome
from gpuipc_bench.harness.pool import WorkerSets, set_key
from gpuipc_bench.harness.rounds import estimate_with_rounds
from gpuipc_bench.modes.mps import Mps
from gpuipc_bench.results import new_row, read_results


@pytest.fixture
def node(monkeypatch):
    """make_plan on a fake node of N NVLinked H100s, both modes able to run: plan_for(gpus, **options)."""
    monkeypatch.setattr(planning, "stop_stale_daemons", lambda: [])
    monkeypatch.setattr(Mps, "unavailable", lambda self: None)
    monkeypatch.setattr("gpuipc_bench.modes.daemon.serves_this_process", lambda environ=None: False)
    for name in ("torch", "nvshmem"):
        monkeypatch.setattr(type(planning.registry()[name]), "waive_reason", lambda self, machine: None)

    def plan_for(gpus, machine=None, **options):
        monkeypatch.setattr("gpuipc_bench.machine.probe.probe", lambda **k: machine or h100_node(gpus))
        return planning.make_plan(planning.PlanOptions(**options))

    return plan_for


def devices(specs) -> set:
    return {spec.device for spec in specs}


def test_a_plain_run_on_two_gpus_puts_its_second_mode_s_same_gpu_runs_on_the_other_gpu(node):
    plan = node(2)
    assert plan.beside is not None and (plan.beside.first_gpu, plan.beside.second_gpu) == (0, 1)
    assert plan.beside.second.name == "mps" and plan.beside.second.gpu == 1
    runs = planning.plan_runs(plan.runs, plan.modes)
    same = [(s.name, m.name, devices(w)) for s, w, m in runs if m is not None]
    assert same and all(d == {0} for _, mode, d in same if mode == "time-sliced")
    assert all(d == {1} for _, mode, d in same if mode == "mps")
    assert {name for name, mode, _ in same if mode == "mps"} == {name for name, mode, _ in same
                                                                   if mode == "time-sliced"}
    across = [devices(w) for s, w, m in runs if len(devices(w)) > 1]
    assert across and all(d == {0, 1} for d in across)  # the pair's runs stay where they were
    assert plan.beside.second.visible.startswith("GPU-")  # the MPS daemon sees that GPU alone
    meta = plan.beside.metadata()
    assert meta == {"sharing.gpu.time-sliced": "0", "sharing.gpu.mps": "1"}


@pytest.mark.parametrize("options,gpus,why", [
    ({"sharing": "time-sliced,mps"}, 2, "--sharing given"), ({"replicas": 2}, 2, "--replicas"),
    ({"pairs": "all"}, 2, "--pairs all"), ({"devices": (0, 1)}, 2, "--devices"), ({}, 1, "one GPU")])
def test_the_modes_stay_on_one_gpu_one_after_the_other_where_the_run_asks_for_it(node, options, gpus, why):
    plan = node(gpus, **options)
    assert plan.beside is None, why
    assert all(devices(w) <= {0} for s, w, m in planning.plan_runs(plan.runs, plan.modes) if m is not None
               and len(devices(w)) == 1), why


def test_two_gpus_of_different_models_keep_the_modes_on_one_gpu(node):
    machine = h100_node(2)
    gpus = list(machine.gpus)
    gpus[1] = type(gpus[1])(**{**gpus[1].__dict__, "name": "NVIDIA H200"})
    other = type(machine)(**{**machine.__dict__, "gpus": tuple(gpus)})
    assert node(2, machine=other).beside is None


def test_a_move_leaves_pairs_cpu_runs_and_modes_without_a_gpu_as_they_are():
    mode = SimpleNamespace(gpu=1, gpu_cpus=(4, 5))
    moved = on_mode_gpu(SAME_GPU, mode)
    assert devices(moved) == {1} and all(spec.cpus == (4, 5) for spec in moved)
    pair = [WorkerSpec(0, "producer", 0), WorkerSpec(1, "consumer", 1)]
    cpu = [WorkerSpec(0, "producer", None), WorkerSpec(1, "consumer", None)]
    assert on_mode_gpu(pair, mode) == pair and on_mode_gpu(cpu, mode) == cpu
    assert on_mode_gpu(SAME_GPU, SimpleNamespace(gpu=None)) == SAME_GPU


def test_the_lanes_take_each_mode_s_same_gpu_runs_proof_runs_first(node):
    plan = node(2)
    queue = lanes_of(planning.plan_runs(plan.runs, plan.modes), plan.beside)
    item = next(q for q in queue if isinstance(q, Lanes))
    assert [r[0].name for r in item.first_proof] == [r[0].name for r in item.second_proof] == ["ipc", "latency"]
    assert all(r[2] is plan.beside.first and devices(r[1]) == {0} for r in item.first_proof + item.first_rest)
    assert all(r[2] is plan.beside.second and devices(r[1]) == {1} for r in item.second_proof + item.second_rest)
    own = [not besides.shares_processes(r[0]) for r in item.second_rest]
    assert own == sorted(own, reverse=True)  # the second lane's scenarios of their own processes first
    rest = [q for q in queue if not isinstance(q, Lanes)]
    assert all(r[2] is None for r in rest)  # the host paths and the pair's runs, after the lanes
    assert queue.index(item) == 0
    runs = planning.plan_runs(plan.runs, plan.modes)
    serial = estimate_with_rounds(runs, plan.config, plan.modes, planning.second_mode_stream_sizes, 2, None)
    lanes = besides.estimate_with_lanes(runs, plan.config, plan.modes, planning.second_mode_stream_sizes, 2, None,
                                        plan.beside)
    assert serial - 12 < lanes < serial - 6, (serial, lanes)  # the second mode's ~11 s but the proof's


# --------------------------------------------------------------------------- the session


class Mode:
    def __init__(self, name: str, gpu=None):
        self.name, self.scenarios, self.gpu, self.gpu_cpus, self.visible = name, (), gpu, (), ""

    def start(self):
        pass

    def facts(self):
        return {}

    def env(self):
        return {}

    def leave(self):
        return []

    def stop(self):
        return []


def figure_row(scenario, specs, sharing, seconds, nbytes=4096):
    return new_row(scenario=scenario.name, path=scenario.name, variant="ce", measure="handoff", metric="bandwidth",
                   src=str(specs[0].device), dst=str(specs[-1].device), bytes=nbytes, iteration=0, batch=1,
                   seconds=seconds, verified=True, workers=2, sharing=sharing)


class Timed(Sets):
    """Each run sleeps a while and says when it ran; its rows: six samples of one figure, `slower`
    times slower in the proof's together pass (a headline copy of ipc or latency: only_sizes set)."""

    def __init__(self, slower: float = 1.0, nap: float = 0.05):
        super().__init__()
        self.slower, self.nap = slower, nap
        self.spans: list[tuple] = []  # (scenario, mode, gpu, start, end, together pass)
        self.scopes: list[frozenset] = []
        self.lock = threading.Lock()

    @contextlib.contextmanager
    def scoped(self, gpus):
        with self.lock:
            self.scopes.append(frozenset(gpus))
        yield

    def close(self):
        pass

    def run(self, scenario, config, specs, mode_name=None, env=None, on_row=None, **kwargs):
        together = getattr(scenario, "only_sizes", None) is not None and scenario.name in ("ipc", "latency")
        start = time.monotonic()
        time.sleep(self.nap)
        for _ in range(6):
            on_row(figure_row(scenario, specs, mode_name, 1e-5 * (self.slower if together else 1.0)))
        with self.lock:
            self.spans.append((scenario.name, mode_name, specs[0].device, start, time.monotonic(), together))
        return Outcome(scenario.name, rows=6)


def beside_plan(paths=("ipc", "latency", "vmm", "staging", "torch")):
    first, second = Mode("time-sliced"), Mode("mps", gpu=1)
    runs = []
    for name in paths:
        scenario = Named(name, sharing_modes=True)
        scenario.persistent_workers, scenario.start_method = name != "torch", "fork"
        scenario.through_host = name == "staging"
        scenario.sizes = lambda config, s=scenario: getattr(s, "only_sizes", None) or (4, 4096)
        runs.append((scenario, SAME_GPU))
    plan = plan_of(*runs, modes=[first, second], machine=fake_machine((80 << 30, 80 << 30)))
    plan.beside = Beside(0, 1, first, second)
    return plan


def overlap(a, b) -> bool:
    return a[3] < b[4] and b[3] < a[4]


def test_the_proof_measures_each_mode_alone_then_both_and_the_rest_runs_at_once(tmp_path):
    plan, sets = beside_plan(), Timed(nap=0.1)
    outcome, heard, out = run_session(tmp_path, plan, sets)
    assert not outcome.failures
    spans = sets.spans
    alone = [(s[0], s[1], s[2]) for s in spans[:4]]
    assert alone == [("ipc", "time-sliced", 0), ("latency", "time-sliced", 0), ("ipc", "mps", 1),
                     ("latency", "mps", 1)]
    proof = [s for s in spans if s[5]]
    assert len(proof) == 4 and any(overlap(a, b) for a in proof for b in proof if a[1] != b[1])
    rest = [s for s in spans[4:] if not s[5]]
    first = [s for s in rest if s[1] == "time-sliced"]
    second = [s for s in rest if s[1] == "mps"]
    assert {s[2] for s in first} == {0} and {s[2] for s in second} == {1}
    assert any(overlap(a, b) for a in first for b in second)  # the two modes at once
    meta = read_results(out)[1]
    assert meta["beside.together"].startswith("yes") and "none slower together" in meta["beside.proof"]
    assert meta["sharing.gpu.mps"] == "1" and meta["sharing.gpu.time-sliced"] == "0"
    frame = read_results(out)[0]
    assert len(frame) == 6 * (len(spans) - len(proof))  # the together pass's rows are the proof's alone
    assert any("mps on GPU 1" in e[1] and "at once" in e[1] for e in heard.events if e[0] == "note")
    assert {frozenset({0}), frozenset({1})} <= set(sets.scopes)
    started = [e[1] for e in heard.events if e[0] == "started"]
    assert started[:4] == ["ipc GPU 0 time-sliced", "latency GPU 0 time-sliced", "ipc GPU 1 mps", "latency GPU 1 mps"]


def test_a_figure_slower_together_keeps_the_modes_one_after_the_other(tmp_path):
    plan, sets = beside_plan(), Timed(slower=1.2)
    outcome, _, out = run_session(tmp_path, plan, sets)
    assert not outcome.failures
    rest = [s for s in sets.spans[4:] if not s[5]]
    assert not any(overlap(a, b) for a in rest for b in rest if a is not b)
    assert [s[1] for s in rest] == sorted((s[1] for s in rest), key=lambda m: m != "time-sliced")
    meta = read_results(out)[1]
    assert meta["beside.together"] == "no: one mode after the other" and "slower together" in meta["beside.proof"]


def test_two_paths_through_host_memory_never_run_at_once():
    shared, spans, lock = Shared(), [], threading.Lock()
    host = SimpleNamespace(through_host=True)
    device = SimpleNamespace(through_host=False)

    def work(scenario, specs, tag):
        with shared.held(scenario, specs, True):
            start = time.monotonic()
            time.sleep(0.05)
            with lock:
                spans.append((tag, start, time.monotonic()))

    many = [WorkerSpec(i, "consumer", 0) for i in range(4)]
    threads = [threading.Thread(target=work, args=args) for args in
               ((host, SAME_GPU, "host"), (host, SAME_GPU, "host"), (device, many, "cpus"), (device, many, "cpus"),
                (device, SAME_GPU, "free"), (device, SAME_GPU, "free"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    def meet(tag):
        found = [s for s in spans if s[0] == tag]
        return found[0][1] < found[1][2] and found[1][1] < found[0][2]

    assert not meet("host") and not meet("cpus") and meet("free")
    with shared.held(host, SAME_GPU, False), shared.held(host, SAME_GPU, False):
        pass  # one lane alone: nothing taken


# --------------------------------------------------------------------------- one lane's sets


class FakeWorker:
    def __init__(self, device):
        self.spec = WorkerSpec(0, "producer", device)
        self.process = SimpleNamespace(pid=1000 + (device or 0), is_alive=lambda: True, join=lambda t=None: None)
        self.told: list = []


def pool_with_sets_on(*gpus) -> WorkerSets:
    sets = WorkerSets(persistent=True)
    for gpu in gpus:
        specs = [WorkerSpec(0, "producer", gpu), WorkerSpec(1, "consumer", gpu)]
        key = set_key(specs, "mps" if gpu else "time-sliced", {})
        for index, spec in enumerate(specs):
            worker = FakeWorker(gpu)
            worker.spec = spec
            sets.members[(key, index)] = (worker, SimpleNamespace(send=worker.told.append, close=lambda: None))
        sets.sets[key] = SimpleNamespace()
    return sets


def gpus_of(sets) -> set:
    return {place[2] for key, _ in sets.members for place in key[2]}


def test_a_lane_leaves_and_ends_only_the_sets_on_its_own_gpu():
    sets = pool_with_sets_on(0, 1)
    with sets.scoped({1}):
        sets.leave_all()  # a scenario of its own processes on GPU 1
    assert gpus_of(sets) == {0} and len(sets.retired) == 1
    sets = pool_with_sets_on(0, 1)
    with sets.scoped({0}):
        sets.end_mode_other_than("time-sliced")  # the GPU 1 set is MPS's: not this lane's to end
    assert gpus_of(sets) == {0, 1}
    sets.end_mode_other_than("time-sliced")  # outside a lane: every other mode's set goes
    assert gpus_of(sets) == {0}


# --------------------------------------------------------------------------- the analysis


def test_a_run_whose_second_mode_ran_on_the_other_gpu_answers_as_if_on_one():
    """A committed one-H200 run with its MPS rows moved to GPU 1 (and `sharing.gpu.*` in its header):
    every decision the same but for its link, and the MPS sections still cut to the sizes where
    they change the time-sliced choice."""
    from conftest import ROOT
    from gpuipc_bench.analysis import analyse
    from gpuipc_bench.results.reading import read_results as read

    frame, meta = read(ROOT / "results" / "h200-once-1.csv.gz")
    before = analyse(frame, meta)
    moved = frame.copy()
    mps = moved["sharing"] == "mps"
    for column in ("src", "dst"):
        moved.loc[mps & (moved[column].astype(str) == "0"), column] = "1"
    moved.loc[mps, "ceiling"] = moved.loc[mps, "ceiling"].astype(str).str.replace("@0", "@1", regex=False)
    ceiling = mps & (moved["path"] == "ceiling")
    moved.loc[ceiling, "variant"] = moved.loc[ceiling, "variant"].astype(str).str.replace("@0", "@1", regex=False)
    after = analyse(moved, {**meta, "sharing.gpu.time-sliced": "0", "sharing.gpu.mps": "1"})

    def decided(analysis, gpu):
        return sorted((d.sharing, d.measure, d.bytes, d.outcome, d.choice) for d in analysis.answer.decisions
                      if d.sharing != "mps" or d.src == gpu)

    assert decided(before, "0") == decided(after, "1")

    def shown(analysis):
        return [(s.sharing, s.measure, s.primary, tuple(b.sizes for b in s.bands)) for s in analysis.answer.sections]

    assert shown(before) == shown(after)
    assert all(s.links == (("1", "1"),) for s in after.answer.sections if s.sharing == "mps")
    assert not any(s.primary for s in after.answer.sections if s.sharing == "mps")
    unmarked = analyse(moved, meta)  # without the header's keys: GPU 1's MPS figures stand on their own
    assert any(s.primary for s in unmarked.answer.sections if s.sharing == "mps")



# --------------------------------------------------------------------------- on two GPUs


@pytest.mark.gpu2
def test_a_plain_run_on_two_gpus_measures_time_sliced_on_one_and_mps_on_the_other(tmp_path, no_leaks, monkeypatch):
    """The real thing on a pair of one model: the proof made and said, each mode's same-GPU rows on
    its own GPU, the pair's rows across both, nothing left behind (no worker, segment or MPS daemon)."""
    import subprocess

    from conftest import invoke
    from gpuipc_bench.modes import daemon

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv(daemon.PIPE_ENV, raising=False)
    out = tmp_path / "r.csv"
    code, text = invoke("run", "-s", "ipc,latency,staging,host", "--sizes", "4K,64M", "--out", str(out))
    assert code == 0, text
    frame, meta = read_results(out)
    if meta.get("gpu.0.name") != meta.get("gpu.1.name") or "sharing.gpu.mps" not in meta:
        pytest.skip("the node's first two GPUs are not one model: its modes stay on one GPU")
    assert meta["sharing.gpu.time-sliced"] == "0" and meta["sharing.gpu.mps"] == "1"
    assert meta["beside.together"] in ("yes: the two modes at once", "no: one mode after the other")
    assert "figures alone and together" in meta["beside.proof"]
    same = frame[frame["src"].astype(str) == frame["dst"].astype(str)]
    on = {mode: set(same.loc[same["sharing"] == mode, "src"].astype(str)) for mode in ("time-sliced", "mps")}
    assert on == {"time-sliced": {"0"}, "mps": {"1"}}
    assert {("0", "1")} <= set(zip(frame["src"].astype(str), frame["dst"].astype(str)))
    assert "serving GPU 1 alone" in meta["sharing.mps"]
    left = subprocess.run(["pgrep", "-f", "nvidia-cuda-mps"], capture_output=True, text=True).stdout.split()
    ours = f"{daemon.PIPE_ENV}=".encode()

    def private(pid: str) -> bool:  # a daemon (or server) with one of this tool's private pipe folders
        try:
            environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            return False
        return any(v.startswith(ours) and daemon.PREFIX.encode() in v for v in environ)

    assert not [pid for pid in left if private(pid)], "an MPS daemon of the run is left"
