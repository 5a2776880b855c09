"""scripts/agreement.py: repeated runs' agreement and the runner-up check, on crafted JSON."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "agreement.py"


def _module():
    spec = importlib.util.spec_from_file_location("agreement", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["agreement"] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def decision(nbytes, choice="ipc/ce", cls="IPC mapping, copy engine", outcome="faster", ratio=1.10,
             lo=1.08, hi=1.12, nxt="IPC mapping, kernel copy"):
    return {"src": "0", "dst": "0", "sharing": "mps", "measure": "stream", "bytes": nbytes, "class": cls,
            "choice": choice, "outcome": outcome, "next": nxt, "ratio": ratio, "ratio_lo": lo, "ratio_hi": hi,
            "delta": 0.02, "replicas": 1}


def write(tmp_path, name, found):
    path = tmp_path / name
    path.write_text(json.dumps({"runs": [{"decisions": found}]}))
    return str(path)


def test_runs_that_agree_pass_and_a_ratio_outside_the_reference_fails(tmp_path, capsys):
    agreement = _module()
    sizes = [4096 * 4 ** k for k in range(20)]
    a = write(tmp_path, "a.json", [decision(n) for n in sizes])
    b = write(tmp_path, "b.json", [decision(n, ratio=1.11) for n in sizes])
    reference = write(tmp_path, "ref.json", [decision(n, lo=1.09, hi=1.11) for n in sizes])
    assert agreement.main([a, b, "--reference", reference]) == 0
    out = capsys.readouterr().out
    assert "class agrees in 20/20, API in 20/20 (100%)" in out and "inside 20, outside 0" in out
    # the runner-up says 1.46x where the 20-sample run says 1.02-1.04: outside, exit 1
    c = write(tmp_path, "c.json", [decision(n, ratio=1.46 if n == sizes[3] else 1.10) for n in sizes])
    assert agreement.main([a, c, "--reference", reference]) == 1
    assert "1.460x, reference [1.069, 1.132]" in capsys.readouterr().out


def test_a_class_change_or_too_many_open_decisions_fail(tmp_path, capsys):
    agreement = _module()
    sizes = [4096 * 4 ** k for k in range(20)]
    a = write(tmp_path, "a.json", [decision(n) for n in sizes])
    moved = write(tmp_path, "m.json", [decision(n, cls="peer copy engine", choice="peer/ce") if n == sizes[0]
                                        else decision(n) for n in sizes])
    assert agreement.main([a, moved]) == 1
    assert "class agrees in 19/20" in capsys.readouterr().out
    # one API of 20 differs (95%): passes; three undecided of 20 (15%): fails
    api = write(tmp_path, "api.json", [decision(n, choice="vmm/ce") if n == sizes[0] else decision(n) for n in sizes])
    assert agreement.main([a, api]) == 0
    opened = write(tmp_path, "o.json", [decision(n, outcome="undecided") if n in sizes[:3] else decision(n)
                                         for n in sizes])
    assert agreement.main([opened]) == 1
    assert "3 open at the class level (15%)" in capsys.readouterr().out


def test_a_decision_whose_next_class_differs_is_checked_against_the_reference_s_samples_of_its_two_apis(
        tmp_path, capsys):
    """The reference's own next class is another: its CSV gives the ratio of the run's two APIs there
    (ipc/sm over ipc/ce: 1.10, tight), widened by that comparison's delta (one process set: 2%)."""
    from fakes import figure, write_run

    agreement = _module()
    size = 4096
    csv = write_run(tmp_path, "ref.csv", [figure("ipc", "ce", 1e-5, sizes=(size,), n=20),
                                          figure("ipc", "sm", 1.1e-5, sizes=(size,), n=20)])
    run = {**decision(size, ratio=1.11), "sharing": "time-sliced", "next_members": ["ipc/sm"]}
    far = {**run, "ratio": 1.30}
    ref = {**decision(size, nxt="nvshmem/put", lo=1.5, hi=1.6), "sharing": "time-sliced"}
    reference = write(tmp_path, "ref.json", [ref])
    near, away = write(tmp_path, "near.json", [run]), write(tmp_path, "far.json", [far])
    assert agreement.main([near, "--reference", reference, "--reference-csv", str(csv)]) == 0
    assert "next class differs 1 (the same two APIs in the reference: inside 1, outside 0)" in capsys.readouterr().out
    assert agreement.main([away, "--reference", reference, "--reference-csv", str(csv)]) == 1
    out = capsys.readouterr().out
    assert "inside 0, outside 1" in out and "the reference's ipc/sm against ipc/ce [1.07" in out
    # without the CSV it is counted apart, as before
    assert agreement.main([away, "--reference", reference]) == 0
    assert "next class differs 1;" in capsys.readouterr().out


def test_the_run_s_own_delta_widens_the_reference_s_interval_and_the_strict_count_is_told(tmp_path, capsys):
    """The run measured a 9% offset between the process sets behind its comparison (its delta): its
    runner-up 1.10x claims no more than that, and is inside the reference's [1.19, 1.21] widened by
    9%; by the reference's 2% alone it is outside, which the line says too."""
    agreement = _module()
    reference = write(tmp_path, "ref.json", [decision(4096, ratio=1.2, lo=1.19, hi=1.21)])
    tight = write(tmp_path, "tight.json", [decision(4096, ratio=1.10)])
    wide = write(tmp_path, "wide.json", [{**decision(4096, ratio=1.10), "delta": 0.09}])
    assert agreement.main([tight, "--reference", reference]) == 1
    assert "1.100x, reference [1.167, 1.234]" in capsys.readouterr().out
    assert agreement.main([wide, "--reference", reference]) == 0
    assert "inside 1, outside 0, next class differs 0; outside by the reference's delta alone 1" in \
        capsys.readouterr().out
