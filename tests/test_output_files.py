"""What a run, a check and a report leave on disk: default names that never collide, a full disk
(faked: ENOSPC from the writer) ending the run at once with the rows set aside in <name>.partial,
no empty plot on a full disk, standard output on /dev/full, and --out never the workers' log."""

from __future__ import annotations

import datetime
import errno
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import ROOT, assert_refused, invoke
from gpuipc_bench.results import read_results
from gpuipc_bench.results import writing

FAST = ["--sizes", "64,4K", "--iterations", "3", "--warmup", "1"]
SAME_SECOND = datetime.datetime(2026, 11, 28, 1, 53, 17, tzinfo=datetime.timezone.utc)


def enospc() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_claim_free_name_takes_the_next_free_name(tmp_path):
    first = writing.claim_free_name(tmp_path / "run.csv")
    second = writing.claim_free_name(tmp_path / "run.csv")
    third = writing.claim_free_name(tmp_path / "run.csv")
    assert [first.name, second.name, third.name] == ["run.csv", "run-2.csv", "run-3.csv"]
    assert all(p.is_file() for p in (first, second, third))


def test_claim_free_name_under_concurrency_gives_each_its_own(tmp_path):
    taken: list[Path] = []
    start = threading.Barrier(8)

    def claim():
        start.wait()
        taken.append(writing.claim_free_name(tmp_path / "same.csv"))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(taken)) == 8


def test_two_runs_in_the_same_second_leave_two_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(writing, "utc_now", lambda: SAME_SECOND)
    outputs = [invoke("run", "-s", "host", *FAST) for _ in range(2)]
    assert [code for code, _ in outputs] == [0, 0], outputs
    files = sorted((tmp_path / "results").glob("*.csv"))
    assert [f.name.replace(os.uname().nodename, "HOST") for f in files] == \
        ["20261128T015317Z-HOST-2.csv", "20261128T015317Z-HOST.csv"]
    for f in files:  # each is a whole run, named in its own 'wrote' line
        frame, meta = read_results(f)
        assert len(frame) > 0 and meta["status"].startswith("completed")
        assert any(f"wrote {Path('results') / f.name}" in text for _, text in outputs)


def test_two_checks_in_the_same_second_leave_two_files(tmp_path, monkeypatch):
    from gpuipc_bench.hooks import plant

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(writing, "utc_now", lambda: SAME_SECOND)
    # the barrier alone: the files' names are the subject (the host path and NIXL took most of a check)
    monkeypatch.setenv(plant.PLANT_ENV, "without:host;without:nixl-host-read")
    codes = [invoke("check", "--format", "json")[0] for _ in range(2)]
    assert all(code in (0, 1) for code in codes)
    files = sorted((tmp_path / "results").glob("check-*.csv"))
    assert len(files) == 2 and files[0].name.endswith("-2.csv")


def test_an_explicit_out_that_exists_is_refused_without_force(tmp_path):
    out = tmp_path / "r.csv"
    out.write_text("mine\n")
    assert_refused(*invoke("run", "-s", "host", "--out", str(out), *FAST), "--out", "exists", "--force")
    assert out.read_text() == "mine\n"


def test_a_name_two_runs_give_at_once_is_written_by_the_first_and_the_second_refused(tmp_path, monkeypatch):
    """The review's D1 for a name given with --out: the file appears between the options' check and
    the run's start (another run took it): refused in one line, the other run's file left whole."""
    from gpuipc_bench.harness import plan as planning

    out = tmp_path / "same.csv"
    planned = planning.make_plan

    def other_run_meanwhile(*args, **kwargs):
        out.write_text("the other run's\n")
        return planned(*args, **kwargs)

    monkeypatch.setattr(planning, "make_plan", other_run_meanwhile)
    code, text = invoke("run", "-s", "host", "--out", str(out), *FAST)
    assert code != 0 and "another run created this file" in text and "--out" in text and "Traceback" not in text
    assert out.read_text() == "the other run's\n"
    out.unlink()
    code, text = invoke("run", "-s", "host", "--out", str(out), "--force", *FAST)  # --force: it may overwrite
    assert code == 0, text


def test_out_ending_in_log_is_refused(tmp_path, no_work):
    assert_refused(*invoke("run", "-s", "host", "--out", str(tmp_path / "x.log"), *FAST), "--out", "x.log", ".csv")


class FullDisk:
    """The results file's writes: the first `room` bytes go through, then ENOSPC, as on a full disk
    (rewrites of the whole file fail too once it is full)."""

    def __init__(self, monkeypatch, room: int):
        self.room = room
        self.full = False
        real_open, real_write = writing.open_append, writing.write_results

        disk = self

        class Appender:
            def __init__(self, fh):
                self.fh = fh

            def write(self, text):
                if disk.full or len(text) > disk.room:
                    disk.full = True
                    self.fh.write(text[: disk.room])  # the row cut where the disk filled
                    self.fh.flush()
                    disk.room = 0
                    raise enospc()
                disk.room -= len(text)
                return self.fh.write(text)

            def flush(self):
                self.fh.flush()

            def close(self):
                self.fh.close()

        def write_results(path, df, metadata):
            if disk.full:
                raise enospc()
            return real_write(path, df, metadata)

        monkeypatch.setattr(writing, "open_append", lambda path: Appender(real_open(path)))
        monkeypatch.setattr(writing, "write_results", write_results)


def test_a_full_disk_ends_the_run_at_once_with_one_error_line(tmp_path, monkeypatch, no_leaks):
    FullDisk(monkeypatch, room=300)
    out = tmp_path / "x.csv"
    code, text = invoke("run", "-s", "host", "--out", str(out), "--timeout", "600", *FAST)
    assert code == 1, text
    errors = [line for line in text.splitlines() if line.startswith("Error:")]
    assert errors == [f"Error: --out {out}: no space left on device; the rows written before it: {out}.partial"]
    assert "Traceback" not in text
    assert not out.exists()
    cut = Path(f"{out}.partial").read_text()
    assert "# status: running" in cut and not cut.endswith("\n")  # cut mid-row, and set aside
    assert [p.name for p in tmp_path.iterdir()] == ["x.csv.partial"]  # no temp file, no worker log


def test_a_full_disk_before_any_row_leaves_nothing(tmp_path, monkeypatch, no_leaks):
    disk = FullDisk(monkeypatch, room=0)
    disk.full = True
    monkeypatch.chdir(tmp_path)
    code, text = invoke("run", "-s", "host", *FAST)
    assert code == 1 and "no space left on device" in text and "Traceback" not in text, text
    assert list((tmp_path / "results").iterdir()) == []  # the claimed name is given back


def test_report_plot_onto_a_full_disk_leaves_no_empty_png(tmp_path, monkeypatch):
    from PIL import Image

    real_save = Image.Image.save

    def full_save(self, fp, *args, **kwargs):
        if not isinstance(fp, (str, Path)):  # into memory: room enough
            return real_save(self, fp, *args, **kwargs)
        Path(fp).write_bytes(b"")  # created, then the disk is full
        raise enospc()

    monkeypatch.setattr(Image.Image, "save", full_save)
    dest = tmp_path / "plots"
    code, text = invoke("report", str(ROOT / "results" / "h100-both-modes-default.csv"), "--plot", f"{dest}/")
    assert code == 2 and "No space left on device" in text and "Traceback" not in text, text
    assert list(dest.iterdir()) == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_standard_output_on_dev_full_is_one_line_on_stderr():
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "gpuipc_bench.cli", "report",
                               str(ROOT / "results" / "h100-both-modes-default.csv"), "--summary"],
                              stdout=full, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 1
    assert done.stderr.splitlines() == ["Error: cannot write the standard output: no space left on device"]
