"""The L2 flag: source and destination rings together against the L2 (only the device side
for a copy to or from the host), per sample from the transfers it really timed, aggregated
per figure; old files recomputed from their rows where the header gives the L2 size."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from gpuipc_bench.analysis import summarize
from gpuipc_bench.gpu.memory import L2Check, Ring, l2_resident_ring
from gpuipc_bench.results import new_row, read_results, typed_frame
from gpuipc_bench.engine.sampler import Counts, Sample, Sampler

MIB = 1 << 20
L2 = 50 * MIB  # an H100's
RESULTS = Path(__file__).parent.parent / "results"


def test_both_rings_must_fit_together():
    # 64 MiB in one slot: 128 MiB of rings on a 50 MiB L2 (one ring against 2 x L2 would say "L2": 64 MiB < 100 MiB)
    assert not Ring.for_size(64 * MIB, 1).l2_resident(L2)
    assert Ring.for_size(16 * MIB, 1).l2_resident(L2)  # 32 MiB together
    assert not Ring.for_size(16 * MIB, 2).l2_resident(L2)  # 64 MiB together
    # 256 KiB x 256 slots = 64 MiB a ring: not resident (though one ring is under 2 x L2)
    assert not Ring.for_size(256 << 10, 256).l2_resident(L2)


def test_the_stride_counts_not_only_the_bytes():
    # 4 B in 256-byte-aligned slots: the ring spans slots x 256 B
    assert l2_resident_ring(4, 1024, 1024 * 256 * 2) and not l2_resident_ring(4, 1024, 1024 * 256 * 2 - 1)


def test_a_copy_to_or_from_the_host_counts_the_device_ring_only():
    assert not l2_resident_ring(32 * MIB, 1, L2, sides=2)
    assert l2_resident_ring(32 * MIB, 1, L2, sides=1)


def test_an_unknown_l2_size_flags_nothing():
    assert not l2_resident_ring(4, 1, 0)


def test_each_sample_is_flagged_from_its_own_batch():
    check = L2Check(MIB, L2, sides=2)  # 2 MiB per transfer of rings
    ctx = SimpleNamespace(row_fields={"scenario": "ipc", "workers": 2, "sharing": "time-sliced"})
    sampler = Sampler(ctx, Counts())
    group = dict(path="ipc", variant="ce", measure="stream", src="0", dst="0", bytes=MIB, ceiling="d2d@0",
                 l2_resident=check)
    before = sampler.row(group, Sample(1e-5, 64), 0)  # 64 transfers: 128 MiB of rings
    after = sampler.row(group, Sample(1e-5, 16), 1)  # calibrated down to 16: 32 MiB
    assert before["l2_resident"] is False and after["l2_resident"] is True
    assert L2Check(MIB, L2, slots=1)(1000)  # a one-slot ring whatever the batch


def rows(nbytes: int, batch: int, flags, scenario="ipc", src="0", dst="0"):
    return [new_row(scenario=scenario, path="ipc", variant="ce", measure="stream", src=src, dst=dst, bytes=nbytes,
                    iteration=i, batch=batch, seconds=1e-3, verified=True, workers=2, sharing="time-sliced",
                    ceiling="", l2_resident=flag) for i, flag in enumerate(flags)]


def test_a_figure_is_flagged_when_most_of_its_samples_are_and_the_flag_is_no_grouping_key():
    df = typed_frame(pd.DataFrame.from_records(rows(MIB, 4, [True, True, False]) + rows(2 * MIB, 4, [False] * 3)))
    summary = summarize(df, meta={"schema_version": "3"}).set_index("bytes")
    assert len(summary) == 2  # one figure per size, whatever its samples' flags
    assert bool(summary.loc[MIB, "l2_resident"]) and not bool(summary.loc[2 * MIB, "l2_resident"])


def test_an_old_file_is_recomputed_from_its_rows_where_the_header_gives_the_l2():
    old = rows(64 * MIB, 1, [True] * 3) + rows(4, 256, [False] * 3)  # the old rule's flags, wrong both ways
    df = typed_frame(pd.DataFrame.from_records(old))
    meta = {"schema_version": "2", "gpu.0.l2_bytes": str(L2)}
    summary = summarize(df, meta=meta).set_index("bytes")
    assert not bool(summary.loc[64 * MIB, "l2_resident"]) and bool(summary.loc[4, "l2_resident"])
    kept = summarize(df, meta={"schema_version": "2"}).set_index("bytes")  # no L2 size: as written
    assert bool(kept.loc[64 * MIB, "l2_resident"])


@pytest.mark.skipif(not (RESULTS / "h100-default.csv").exists(), reason="reference runs not in this checkout")
@pytest.mark.parametrize("name", ["h100-default.csv", "h200-default.csv", "h100-nvshmem.csv"])
def test_no_figure_of_64_mib_or_more_is_l2_resident_on_a_reference_gpu(name):
    df, meta = read_results(RESULTS / name)
    l2 = int(meta["gpu.0.l2_bytes"])
    summary = summarize(df, meta=meta)
    big = summary[(summary["bytes"] >= 64 * MIB) & (summary["metric"] == "bandwidth")]
    assert l2 <= 64 * MIB and len(big) and not big["l2_resident"].fillna(False).astype(bool).any()
