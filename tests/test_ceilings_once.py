"""Ceilings once per process: a worker that already measured a ceiling at a size, in
this sharing mode, measures it no more; the scenario names the one whose rows hold it, and the
analysis reads it there. On CPUs: the cache with a stub worker, the lookup on a real run's rows."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpuipc_bench.engine import pair
from gpuipc_bench.analysis import summarize
from gpuipc_bench.analysis.summary import ceiling_sources
from gpuipc_bench.results import read_results

ROOT_RESULTS = Path(__file__).resolve().parents[1] / "results"
RUN = ROOT_RESULTS / "h100-default-modes.csv"


def _worker(scenario: str, sharing: str, notes: list, first: str | None = None):
    worker = object.__new__(pair.PairWorker)
    worker.scenario = SimpleNamespace(name=scenario)
    worker.ctx = SimpleNamespace(row_fields={"sharing": sharing}, note=lambda key, text: notes.append((key, text)),
                                 config=SimpleNamespace(host_ceilings_from=first))
    worker.ceilings_from = {}
    worker.host_ceilings_noted = False
    measured = []

    def measure(key, nbytes):
        measured.append((key, nbytes))
        yield {"variant": key, "bytes": nbytes}

    worker._measure_ceiling = measure
    return worker, measured


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    monkeypatch.setattr(pair, "_MEASURED", {})


def test_a_ceiling_is_measured_once_per_process_size_and_mode():
    notes: list = []
    first, measured1 = _worker("staging", "time-sliced", notes)
    assert len(list(first.ceiling_rows("d2h@0", 4096))) == 1
    second, measured2 = _worker("hostpool", "time-sliced", notes)
    assert list(second.ceiling_rows("d2h@0", 4096)) == [] and measured2 == []
    assert notes == [("ceilings_from.time-sliced", "staging")]
    assert list(second.ceiling_rows("d2h@0", 1 << 20)) != []  # another size: measured
    assert list(second.ceiling_rows("h2d@0", 4096)) != []  # another ceiling: measured
    list(second.ceiling_rows("d2h@0", 4096))
    assert len(notes) == 1  # the note once per source
    third, measured3 = _worker("mmap", "mps", notes)
    assert list(third.ceiling_rows("d2h@0", 4096)) != []  # another sharing mode: measured


def test_the_analysis_reads_a_reused_ceiling_where_it_was_measured():
    frame, meta = read_results(RUN)
    ts = frame["sharing"] == "time-sliced"
    reused = frame[~((frame["scenario"] == "vmm") & (frame["path"] == "ceiling") & ts)]
    without = summarize(reused, meta=meta)
    with_note = summarize(reused, meta={**meta, "note.vmm.ceilings_from.time-sliced": "ipc"})
    full = summarize(frame, meta=meta)

    def ceiling(summary, scenario):
        row = summary[(summary["scenario"] == scenario) & (summary["variant"] == "ce") & (summary["sharing"] ==
                      "time-sliced") & (summary["measure"] == "stream") & (summary["bytes"] == 256 << 20)]
        return float(row["ceiling_gbps"].iloc[0]), float(row["ceiling_peak_gbps"].iloc[0])

    assert all(map(math.isnan, ceiling(without, "vmm")))  # no rows, no note: no ceiling
    assert ceiling(with_note, "vmm") == ceiling(full, "ipc")  # ipc's measurement of d2d@0
    assert ceiling(with_note, "ipc") == ceiling(full, "ipc")


def test_the_header_lines_name_the_sources():
    meta = {"note.vmm.ceilings_from.time-sliced": "staging,ipc", "note.vmm.other": "x", "gpu.0.name": "H100"}
    assert ceiling_sources(meta) == {("vmm", "time-sliced"): ("staging", "ipc")}


def test_a_further_mode_takes_the_first_modes_host_link_ceilings_from_4_mib():
    """Under MPS after a time-sliced run of the scenario (RunConfig.host_ceilings_from): h2d and d2h, by
    the copy engine or a kernel, measured below 4 MiB only (where the mode moves them: up to 15% on an
    H200), a note naming the mode; the device's own ceilings measured at every size."""
    notes: list = []
    worker, measured = _worker("mmap", "mps", notes, first="time-sliced")
    for key in ("d2h@0", "h2d-sm@0", "d2d@0"):
        for nbytes in (1 << 20, 4 << 20, 256 << 20):
            list(worker.ceiling_rows(key, nbytes))
    assert measured == [("d2h@0", 1 << 20), ("h2d-sm@0", 1 << 20), ("d2d@0", 1 << 20), ("d2d@0", 4 << 20),
                        ("d2d@0", 256 << 20)]
    assert notes == [("host_ceilings_from.mps", f"time-sliced from {pair.HOST_CEILINGS_SHARED_FROM}")]


def test_the_analysis_reads_a_further_modes_host_link_ceiling_in_the_first_mode():
    frame, meta = read_results(ROOT_RESULTS / "h200-states-1.csv")
    big = frame["bytes"] >= pair.HOST_CEILINGS_SHARED_FROM
    host = frame["variant"].astype(str).str.match(r"^(h2d|d2h)")
    dropped = frame[~((frame["path"] == "ceiling") & (frame["sharing"] == "mps") & big & host)]
    note = {f"note.{sc}.host_ceilings_from.mps": f"time-sliced from {pair.HOST_CEILINGS_SHARED_FROM}"
            for sc in ("mmap", "staging", "hostpool")}
    sources = ceiling_sources({**meta, **note})
    assert sources.modes[("mmap", "mps")] == ("time-sliced", 4 << 20)
    without, borrowed, full = (summarize(dropped, meta=meta), summarize(dropped, meta={**meta, **note}),
                               summarize(frame, meta=meta))

    def ceiling(summary, sharing, nbytes, variant="dma"):
        row = summary[(summary["scenario"] == "mmap") & (summary["variant"] == variant)
                      & (summary["sharing"] == sharing) & (summary["measure"] == "stream")
                      & (summary["bytes"] == nbytes)]
        return float(row["ceiling_gbps"].iloc[0])

    assert math.isnan(ceiling(without, "mps", 256 << 20))
    assert ceiling(borrowed, "mps", 256 << 20) == ceiling(full, "time-sliced", 256 << 20)
    assert ceiling(borrowed, "mps", 256 << 20, "zero-copy") == ceiling(full, "time-sliced", 256 << 20, "zero-copy")
    assert ceiling(borrowed, "mps", 1 << 20) == ceiling(full, "mps", 1 << 20)  # below 4 MiB: its own mode's


def test_the_latency_ceiling_is_measured_once_per_process_size_and_mode_apart_from_the_bandwidth_one():
    """ipc, vmm and mempool run in one process set: the one copy + synchronize of d2d@0 at a size is
    timed by the first of them (its rows) and named by the others; its bandwidth ceiling is another
    entry (measured on its own terms)."""
    from gpuipc_bench.scenarios.ipc import IpcWorker

    notes: list = []
    runs = []

    def worker(scenario: str, sharing: str = "time-sliced"):
        found = object.__new__(IpcWorker)
        found.scenario = SimpleNamespace(name=scenario)
        found.ctx = SimpleNamespace(row_fields={"sharing": sharing}, note=lambda key, text: notes.append((key, text)),
                                    config=SimpleNamespace(host_ceilings_from=None))
        found.ceilings_from = {}
        found.meter = lambda: SimpleNamespace(latency=lambda *a: 1e-5)

        def run(group, take, **kw):
            runs.append((scenario, group["variant"], group["bytes"]))
            yield {"variant": group["variant"]}

        found.sampler = SimpleNamespace(run=run)
        return found

    assert len(list(worker("ipc").latency_ceiling("d2d@0", 4))) == 1
    assert list(worker("vmm").latency_ceiling("d2d@0", 4)) == []
    assert notes == [("ceilings_from.time-sliced", "ipc")]
    assert len(list(worker("mempool").latency_ceiling("d2d@0", 4096))) == 1  # another size
    assert len(list(worker("vmm", "mps").latency_ceiling("d2d@0", 4))) == 1  # another mode
    assert runs == [("ipc", "d2d@0", 4), ("mempool", "d2d@0", 4096), ("vmm", "d2d@0", 4)]
    assert pair._MEASURED[("d2d@0 latency", 4, "time-sliced")] == "ipc"
    assert ("d2d@0", 4, "time-sliced") not in pair._MEASURED  # the bandwidth ceiling: not taken as measured
