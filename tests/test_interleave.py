"""The order of the variants sampled at one size (--sample-order): 'shuffled' (each
variant's samples back to back, the variants in a seeded order per size), 'interleaved' (each
group's warm-up, then rounds of one sample of every group still going, shuffled per round) or
'declared'; every worker takes the same samples in the same order (the others learn each group's
reps and stop from the timing worker's decision words only)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

from click.testing import CliRunner

from gpuipc_bench.engine.sampler import Counts, Sample, Sampler


def _ctx(words=None, seed=None, order="interleaved"):
    stored: list[int] = []
    feed = iter(words or [])
    return SimpleNamespace(row_fields={"scenario": "ipc", "workers": 2, "sharing": "time-sliced"}, clock=None,
                           phase=lambda *a, **k: None, spec=None, store=lambda name, word: stored.append(word),
                           wait=lambda *a, **k: None, load=lambda name: next(feed), stored=stored,
                           config=SimpleNamespace(order_seed=seed, sample_order=order))


def _run(sampler, timer=True, noisy=("push",), max_samples=12):
    """ce, push and sm at one size; push's samples never settle (it goes to the cap), the others do."""
    taken: list[tuple[str, bool, int]] = []
    noise = itertools.cycle((1.0, 1.3, 0.8, 1.2))
    groups = []
    for variant in ("ce", "push", "sm"):
        def take(trial, v=variant):
            taken.append((v, trial.warm, trial.seq))
            if not timer:
                return None
            return Sample(1e-5 * (next(noise) if v in noisy else 1.0), trial.reps)
        group = dict(path="ipc", variant=variant, measure="stream", metric="bandwidth", src="0", dst="0",
                     bytes=4096, ceiling="d2d@0")
        groups.append(sampler.run(group, take, timer=timer, reps=64))
    rows = list(sampler.interleave(groups, 4096))
    return taken, rows


def test_warm_ups_first_then_one_sample_of_each_group_in_turn():
    sampler = Sampler(_ctx(), Counts(warmup=1, min_samples=6, max_samples=12))
    taken, rows = _run(sampler)
    assert [(v, w) for v, w, _ in taken[:3]] == [("ce", True), ("push", True), ("sm", True)]
    timed = [v for v, w, _ in taken if not w]
    assert timed[:18] == ["ce", "push", "sm"] * 6  # rounds while every group goes on
    assert timed[18:] == ["push"] * 6  # the settled ones stopped at 6, the noisy one to the cap
    assert [r["iteration"] for r in rows if r["variant"] == "push"] == list(range(12))
    assert [r["seq"] for r in rows] == sorted(r["seq"] for r in rows)


def test_a_seed_shuffles_each_round_and_the_other_worker_follows():
    timer = Sampler(_ctx(seed=1234), Counts(warmup=1, min_samples=6, max_samples=12))
    timed, _ = _run(timer)
    rounds = [tuple(v for v, _, _ in timed[3 + 3 * k: 6 + 3 * k]) for k in range(6)]
    assert all(sorted(r) == ["ce", "push", "sm"] for r in rounds) and len(set(rounds)) > 1  # shuffled per round
    other = Sampler(_ctx(timer.ctx.stored, seed=1234), Counts(warmup=1, min_samples=6, max_samples=12))
    followed, rows = _run(other, timer=False)
    assert followed == timed and rows == []  # the same samples in the same order; rows come from the timer
    again = Sampler(_ctx(seed=1234), Counts(warmup=1, min_samples=6, max_samples=12))
    assert _run(again)[0] == timed  # the seed repeats the order


def _blocks(taken):
    return [v for v, _ in itertools.groupby(v for v, _, _ in taken)]


def test_shuffled_takes_each_variant_whole_in_a_seeded_order_per_size():
    orders = set()
    for seed in range(6):
        timer = Sampler(_ctx(seed=seed, order="shuffled"), Counts(warmup=1, min_samples=6, max_samples=12))
        taken, _ = _run(timer)
        blocks = _blocks(taken)
        assert sorted(blocks) == ["ce", "push", "sm"]  # each whole: warm-up and samples back to back
        orders.add(tuple(blocks))
        other = Sampler(_ctx(timer.ctx.stored, seed=seed, order="shuffled"), Counts(warmup=1, min_samples=6,
                                                                                     max_samples=12))
        assert _run(other, timer=False)[0] == taken
    assert len(orders) > 1  # the seed decides


def test_declared_keeps_the_scenario_s_order():
    taken, _ = _run(Sampler(_ctx(seed=5, order="declared"), Counts(warmup=1, min_samples=6, max_samples=12)))
    assert _blocks(taken) == ["ce", "push", "sm"]


def test_one_group_alone_runs_as_before():
    sampler = Sampler(_ctx(), Counts(warmup=1, min_samples=6, max_samples=12))
    group = dict(path="ipc", variant="ce", measure="stream", metric="bandwidth", src="0", dst="0", bytes=4096)
    rows = list(sampler.run(group, lambda trial: Sample(1e-5, trial.reps), timer=True, reps=64))
    assert len(rows) == 6 and sampler.samples == 6


def test_the_run_records_its_order_seed_and_takes_one(tmp_path):
    from gpuipc_bench.cli import cli
    from gpuipc_bench.results import read_results

    out = tmp_path / "r.csv"
    result = CliRunner().invoke(cli, ["run", "-s", "host", "--sizes", "64", "-n", "3", "--order-seed", "77",
                                      "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    meta = read_results(out)[1]
    assert meta["order_seed"] == "77" and meta["sample_order"] == "interleaved"
    result = CliRunner().invoke(cli, ["run", "-s", "host", "--sizes", "64", "-n", "3", "-o", str(out), "--force", "-q"])
    assert result.exit_code == 0 and read_results(out)[1]["order_seed"].isdigit()  # a new one, written down
    result = CliRunner().invoke(cli, ["run", "-s", "host", "--order-seed", "-1", "-o", str(out), "--force"])
    assert result.exit_code == 2 and "--order-seed" in result.output


def test_a_group_decided_slower_than_a_rival_stops_at_min_samples_an_undecided_one_goes_on():
    """sm: every sample twice ce's or more (noisy, it would go on to the cap; the halves of its samples
    agree: steady); push: as noisy, but around ce, so undecided against it: it goes on."""
    sampler = Sampler(_ctx(), Counts(warmup=1, min_samples=6, max_samples=12))
    noise = itertools.cycle((1.0, 1.3, 0.8, 1.2))
    steady_noise = itertools.cycle((1.0, 1.3, 0.8))  # sm's: the same median in each half of its first 6 samples
    scale = {"ce": 0.0, "push": 1.0, "sm": 2.0}
    groups = []
    for variant in ("ce", "push", "sm"):
        def take(trial, v=variant):
            factor = 1.0 if v == "ce" else scale[v] * next(steady_noise if v == "sm" else noise)
            return Sample(1e-5 * factor, trial.reps)
        groups.append(sampler.run(dict(path="ipc", variant=variant, measure="stream", metric="bandwidth", src="0",
                                       dst="0", bytes=4096), take, timer=True, reps=64))
    handoff = sampler.run(dict(path="ipc", variant="slow", measure="handoff", metric="bandwidth", src="0", dst="0",
                               bytes=4096), lambda trial: Sample(3e-5 * next(noise), trial.reps), timer=True, reps=64)
    rows = list(sampler.interleave(groups + [handoff], 4096))
    count = {v: sum(1 for r in rows if r["variant"] == v) for v in ("ce", "push", "sm", "slow")}
    assert count == {"ce": 6, "push": 12, "sm": 6, "slow": 12}  # another measure is no rival


def test_a_path_first_in_its_set_goes_before_the_others_of_its_set_seeded_or_not():
    """peer's full form (first_in_set): before the other paths of the pair's set, in the declared order and
    in every seeded one; the runs of other sets and modes keep their place."""
    from gpuipc_bench.harness.plan import shuffle_paths

    def scenario(name, first=False):
        return SimpleNamespace(name=name, persistent_workers=True, start_method="fork", first_in_set=first)

    ts, pair, same = SimpleNamespace(name="time-sliced"), ("pair",), ("same",)
    runs = ([(scenario(n), same, ts) for n in ("ipc", "vmm")] + [(scenario(n), pair, None) for n in ("vmm", "ipc")]
            + [(scenario("peer", True), pair, None)] + [(scenario("host"), ("cpu",), None)])
    for seed in (None, 0, 1, 2):
        names = [(r[0].name, r[1]) for r in shuffle_paths(runs, seed)]
        assert names[2] == ("peer", pair) and {n for n, _ in names[:2]} == {"ipc", "vmm"}
        assert {n for n, _ in names[3:5]} == {"ipc", "vmm"} and names[5] == ("host", ("cpu",))


def test_the_paths_of_one_process_set_run_in_a_seeded_order_the_others_keep_their_place():
    from gpuipc_bench.harness.plan import shuffle_paths

    def scenario(name, persistent=True, method="fork"):
        return SimpleNamespace(name=name, persistent_workers=persistent, start_method=method)

    ts, mps = SimpleNamespace(name="time-sliced"), SimpleNamespace(name="mps")
    pair, cpu = ("pair",), ("cpu",)
    paths = [scenario(n) for n in ("staging", "ipc", "vmm", "mempool", "mmap")]
    torch, host = scenario("torch", False, "forkserver"), scenario("host")
    runs = ([(s, pair, ts) for s in paths] + [(torch, pair, ts), (host, cpu, None)]
            + [(s, pair, mps) for s in paths] + [(torch, pair, mps)])
    assert shuffle_paths(runs, None) == runs
    orders = set()
    for seed in range(5):
        out = shuffle_paths(runs, seed)
        assert sorted(map(id, out)) == sorted(map(id, runs)) and shuffle_paths(runs, seed) == out
        names = [(r[0].name, getattr(r[2], "name", None)) for r in out]
        assert names[5:7] == [("torch", "time-sliced"), ("host", None)] and names[12] == ("torch", "mps")
        assert {n for n, _ in names[:5]} == {s.name for s in paths} and {m for _, m in names[7:12]} == {"mps"}
        orders.add(tuple(n for n, _ in names[:5]))
    assert len(orders) > 1


def test_a_path_that_must_run_last_in_its_set_stays_last_whatever_the_seed():
    from gpuipc_bench.harness.plan import shuffle_paths

    def scenario(name, last=False):
        return SimpleNamespace(name=name, persistent_workers=True, start_method="fork", last_in_set=last)

    mode, pair = SimpleNamespace(name="time-sliced"), ("pair",)
    runs = [(scenario(n, n == "hostpool"), pair, mode) for n in ("staging", "hostpool", "ipc", "vmm", "mempool")]
    firsts = set()
    for seed in range(8):
        names = [r[0].name for r in shuffle_paths(runs, seed)]
        assert names[-1] == "hostpool" and sorted(names) == sorted(r[0].name for r in runs)
        firsts.add(names[0])
    assert len(firsts) > 1



def test_the_paths_of_a_set_are_shuffled_from_the_seed_unless_declared(tmp_path, monkeypatch):
    """The run hands its --order-seed to the path shuffle under the default order and 'shuffled',
    and none under 'declared' (the shuffle itself: the test above)."""
    import gpuipc_bench.harness.session as run_module
    from gpuipc_bench.cli import cli

    seen = []
    real = run_module.shuffle_paths
    monkeypatch.setattr(run_module, "shuffle_paths", lambda runs, seed: seen.append(seed) or real(runs, seed))
    for order in ("interleaved", "shuffled", "declared"):
        result = CliRunner().invoke(cli, ["run", "-s", "host", "--sizes", "64", "-n", "3", "--order-seed", "5",
                                          "--sample-order", order, "-o", str(tmp_path / "r.csv"), "--force", "-q"])
        assert result.exit_code == 0, result.output
    assert seen == [5, 5, None]


def test_quick_leaves_out_the_scenarios_that_start_a_library_and_its_help_names_them():
    from gpuipc_bench.cli import cli
    from gpuipc_bench.harness.plan import registry, resolve_names

    scenarios = registry()
    left_out = [n for n, s in scenarios.items() if s.in_default_run and not s.in_quick_run]
    assert left_out == ["torch", "nvshmem", "sharing"]
    quick, default = resolve_names((), scenarios, "quick"), resolve_names((), scenarios)
    assert quick == [n for n in default if n not in left_out] and "ipc" in quick and "staging" in quick
    assert resolve_names(("torch",), scenarios, "quick") == ["torch"]  # named: kept
    text = " ".join(CliRunner().invoke(cli, ["run", "--help"], terminal_width=200).output.split())
    assert "leaves out torch, nvshmem and sharing" in text


def test_a_leader_clear_of_every_rival_stops_at_min_samples_though_noisy():
    """ce: noisy (its interval alone would take it to the cap), but every sample faster than every
    sample of push and sm: decided against both, it stops at 6 with push; sm, every sample over
    FAR_BEHIND times ce's median, stops at FAR_SAMPLES. Without a rival clear of it (push inside
    its range), it goes on."""
    def counts(push_scale):
        sampler = Sampler(_ctx(), Counts(warmup=1, min_samples=6, max_samples=12))
        # each group's own noise, the halves of its first 6 samples alike (steady: engine.sampler.drifting)
        noise = {v: itertools.cycle((1.0, 1.15, 0.9)) for v in ("ce", "push", "sm")}
        scale = {"ce": 1.0, "push": push_scale, "sm": 3.0}
        groups = [sampler.run(dict(path="ipc", variant=v, measure="stream", metric="bandwidth", src="0", dst="0",
                                   bytes=4096), lambda trial, v=v: Sample(1e-5 * scale[v] * next(noise[v]), trial.reps),
                              timer=True, reps=64) for v in ("ce", "push", "sm")]
        rows = list(sampler.interleave(groups, 4096))
        return {v: sum(1 for r in rows if r["variant"] == v) for v in ("ce", "push", "sm")}

    decided = counts(2.0)  # ce may take one sample more: in a round before its rivals had their 6
    assert decided["push"] == 6 and decided["sm"] == 3 and decided["ce"] in (6, 7)
    clear = counts(1.05)
    assert clear["ce"] == 12 and clear["push"] == 12 and clear["sm"] == 3
