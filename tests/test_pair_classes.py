"""One answer per link class of GPU pairs, on crafted runs: pairs that agree share one line
with their spread; a pair that chooses otherwise beyond delta is named; NV18 and PCIe pairs
are two classes; the summary's line budgets at 80 columns hold as pairs multiply; the JSON
decisions say where the answer put them."""

from __future__ import annotations

import json
import random

from click.testing import CliRunner
from fakes import KIB, META, MIB, figure, frame, write_run

from gpuipc_bench.analysis import analyse
from gpuipc_bench.cli import cli
from gpuipc_bench.report.answer import summary_lines

NV18 = {**META, "link.0-1": "NV18", "link.0-2": "NV18", "link.1-2": "NV18"}
SIZES = (4, 64, KIB, 16 * KIB, 256 * KIB, 4 * MIB, 64 * MIB, 256 * MIB)


def link_time(gbps: float, floor: float = 2e-6):
    return lambda s: floor + s / (gbps * 1e9)


def pair(src, dst, ce=1.0, sm=1.1, sizes=(4 * KIB, 256 * MIB), measure="stream", jitter=1.0):
    """peer/ce and peer/sm across one pair: sm `sm` times ce's time (ce at 390 GB/s)."""
    ce_t, sm_t = link_time(390 / (ce * jitter)), link_time(390 / (sm * jitter))
    return [figure("peer", "ce", ce_t, sizes=sizes, src=src, dst=dst, ceiling="", sharing="exclusive",
                   measure=measure),
            figure("peer", "sm", sm_t, sizes=sizes, src=src, dst=dst, ceiling="", sharing="exclusive",
                   measure=measure)]


def text_of(groups, meta=NV18, width=80) -> str:
    analysis = analyse(frame([r for g in groups for r in g]), meta)
    return "\n".join(t for t, _ in summary_lines(analysis, "run.csv", width))


def test_two_pairs_that_agree_are_one_line_with_their_spread():
    groups = pair("0", "1") + pair("1", "0", jitter=1.01)
    answer = analyse(frame([r for g in groups for r in g]), NV18).answer
    (section,) = answer.sections
    assert section.link_class == "NV18" and section.links == (("0", "1"), ("1", "0")) and section.cross_gpu
    (band,) = section.bands
    assert band.pick == "peer/ce" and not band.differ and {d.link for d in band.decisions} == set(section.links)
    text = text_of(groups)
    words = " ".join(text.split())
    assert "2 GPU pairs over NV18 (0→1, 1→0) exclusive · stream" in words
    assert "peer copy engine: 387 GB/s at 256 MiB (385–389 over 2 pairs) → peer/ce" in words
    assert "differs" not in words
    assert "GPU 0 → GPU 1" not in text and "GPU 1 → GPU 0" not in text


def test_a_pair_that_chooses_otherwise_beyond_delta_is_named():
    groups = pair("0", "1") + pair("1", "0") + pair("0", "2", ce=1.2)  # on 0 -> 2 the kernel copy wins
    answer = analyse(frame([r for g in groups for r in g]), NV18).answer
    (section,) = answer.sections
    (band,) = section.bands
    assert band.pick == "peer/ce" and [(d.link, d.bytes) for d in band.differ] == [(("0", "2"), 256 * MIB)]
    assert {d.link for d in band.decisions if d.bytes == 256 * MIB} == {("0", "1"), ("1", "0")}
    words = " ".join(text_of(groups).split())
    assert "389 GB/s at 256 MiB (388–389 over 2 pairs)" in words
    assert "GPU 0 → 2 differs at 256 MiB: peer/sm 354 GB/s (peer/ce 1.09× there)" in words


def test_a_pair_within_delta_is_not_named():
    groups = pair("0", "1") + pair("1", "0") + pair("0", "2", ce=1.0, sm=1.01)  # 1% apart: within delta
    words = " ".join(text_of(groups).split())
    assert "differs" not in words and "over 3 pairs" in words


def test_nvlink_and_pcie_pairs_are_two_classes_same_gpu_first():
    meta = {**META, "link.0-1": "NV18", "link.0-2": "PHB", "link.1-2": "PHB"}
    groups = pair("0", "1") + pair("1", "0") + pair("0", "2", ce=3.0, sm=3.3) + pair("2", "0", ce=3.0, sm=3.3)
    groups += [figure("ipc", "ce", link_time(1400), sizes=(4 * KIB, 256 * MIB), ceiling=""),
               figure("ipc", "sm", link_time(1200), sizes=(4 * KIB, 256 * MIB), ceiling="")]
    answer = analyse(frame([r for g in groups for r in g]), meta).answer
    assert [(s.link_class, s.links) for s in answer.sections] == [
        ("", (("0", "0"),)), ("NV18", (("0", "1"), ("1", "0"))), ("PHB", (("0", "2"), ("2", "0")))]
    text = text_of(groups, meta)
    assert text.index("GPU 0 → GPU 0 · same GPU") < text.index("2 GPU pairs over NV18") \
        < text.index("2 GPU pairs over PHB")


def varied_run(gpus: int, seed: int = 3, same_gpu: bool = False):
    """Every ordered pair of `gpus` GPUs, both measures, eight sizes, four paths whose order
    changes with the size (a kernel copy ahead below 64 KiB, the copy engine above), each
    pair's figures off by up to 1% at random; one pair whose copy engine is 30% slower at 4
    MiB. same_gpu: GPU 0's own answer in two sharing modes too."""
    rng = random.Random(seed)
    groups = []
    links = [(str(a), str(b)) for a in range(gpus) for b in range(gpus) if a != b]
    for src, dst in links:
        for measure in ("handoff", "stream"):
            add = 15e-6 if measure == "handoff" else 0.0
            for path, variant, gbps, floor in (("peer", "ce", 390, 2.2e-6), ("ipc", "ce", 388, 2.2e-6),
                                               ("peer", "sm", 340, 1.5e-6), ("ipc", "sm", 300, 1.6e-6)):
                j = 1 + rng.uniform(-0.01, 0.01)
                slow = 1.3 if (src, dst, variant) == ("1", "0", "ce") else 1.0

                def t(s, gbps=gbps, floor=floor, j=j, slow=slow, add=add):
                    return (add + floor + s / (gbps * 1e9)) * j * (slow if s == 4 * MIB else 1.0)

                groups.append(figure(path, variant, t, sizes=SIZES, src=src, dst=dst, ceiling="",
                                     sharing="exclusive", measure=measure))
    if same_gpu:
        for sharing, hand in (("time-sliced", 270e-6), ("mps", 11e-6)):
            for measure in ("handoff", "stream"):
                add = hand if measure == "handoff" else 0.0
                groups += [figure("ipc", "ce", lambda s, a=add: a + 2e-6 + s / 1400e9, sizes=SIZES, ceiling="",
                                  sharing=sharing, measure=measure),
                           figure("ipc", "sm", lambda s, a=add: a + 1.5e-6 + s / 1200e9, sizes=SIZES, ceiling="",
                                  sharing=sharing, measure=measure)]
    return groups


def test_twelve_pairs_of_one_class_fit_40_lines():
    meta = {**META, **{f"link.{a}-{b}": "NV18" for a in range(4) for b in range(a + 1, 4)}}
    text = text_of(varied_run(4), meta)
    lines = text.splitlines()
    assert len(lines) <= 40, text
    assert max(len(line) for line in lines) <= 80
    assert "12 GPU pairs over NV18 · exclusive · hand-off" in text
    assert "GPU 1 → 0 differs at 4 MiB" in " ".join(text.split())


def test_a_plain_run_on_a_multi_gpu_node_fits_50_lines():
    text = text_of(varied_run(2, same_gpu=True))
    lines = text.splitlines()
    assert len(lines) <= 50, text
    assert max(len(line) for line in lines) <= 80
    assert text.index("GPU 0 → GPU 0 · same GPU") < text.index("2 GPU pairs over NV18")


def test_json_decisions_carry_their_link_class_and_pairs(tmp_path):
    groups = pair("0", "1") + pair("1", "0") + pair("0", "2", ce=1.2)
    path = write_run(tmp_path, "pairs.csv", groups, meta=NV18)
    result = CliRunner().invoke(cli, ["report", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    (run,) = json.loads(result.output)["runs"]
    by_link = {(d["src"], d["dst"], d["bytes"]): d for d in run["decisions"]}
    d = by_link[("0", "2", 256 * MIB)]
    assert d["link_class"] == "NV18" and d["pairs"] == [["0", "1"], ["0", "2"], ["1", "0"]]
    assert d["choice"] == "peer/sm" and d["class_choice"] == "peer/ce" and d["differs"] is True
    assert by_link[("1", "0", 256 * MIB)]["differs"] is False and {"outcome", "class", "members", "next"} <= set(d)
