"""The janitor (gpuipc_bench/ipc/janitor.py): a process that cleans up after a parent killed
with SIGKILL (the torch scenario's /dev/shm files and semaphores), and does nothing when the
parent cleans up itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, TAG, assert_none_left
from gpuipc_bench.ipc.janitor import Janitor

TORCH_PARENT = r'''
import os, sys, time, multiprocessing
from scenarios.torch_share import TorchShared, queue_semaphores
from gpuipc_bench.ipc.process import die_with_parent

def worker(shared, rank, ready):
    die_with_parent()
    shared.pids[rank] = os.getpid()
    open(f"/dev/shm/torch_{os.getpid()}_7_0", "w").close()  # what torch's reference counts leave
    shared.queue.put(ready)
    time.sleep(600)

if __name__ == "__main__":
    shared = TorchShared(2)
    workers = [multiprocessing.get_context("spawn").Process(target=worker, args=(shared, r, r)) for r in (0, 1)]
    for w in workers:
        w.start()
    assert sorted(shared.queue.get(timeout=60) for _ in workers) == [0, 1]
    print(" ".join(map(str, [shared.janitor.pid, *shared.pids])), *queue_semaphores(shared.queue), flush=True)
    time.sleep(600)
'''


def test_sigkill_of_the_parent_leaves_no_torch_files_and_no_semaphores(tmp_path):
    """The torch scenario's parent objects (TorchShared) with workers spawned as the launcher does
    (PR_SET_PDEATHSIG), on CPU: the files stand for torch's /dev/shm/torch_<pid>_* reference
    counts. What needs a GPU to confirm: that real torch leaves no other name behind."""
    tag = f"torch-janitor-{os.getpid()}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), TAG: tag}
    stderr = tmp_path / "stderr.txt"
    script = tmp_path / "parent.py"  # a file: spawned children import their parent's main module
    script.write_text(TORCH_PARENT)
    with open(stderr, "w") as err:
        parent = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                  stderr=err, text=True, start_new_session=True)
        line = parent.stdout.readline().split()
        assert line, stderr.read_text()
        janitor, *pids = (int(x) for x in line[:3])
        semaphores = line[3:]
        assert len(semaphores) == 3 and all(Path(f"/dev/shm/torch_{pid}_7_0").exists() for pid in pids)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        assert_none_left(tag, within=15)  # the workers, the janitor and the resource tracker
    assert not [p for p in Path("/dev/shm").iterdir() if any(p.name.startswith(f"torch_{pid}_") for pid in pids)]
    assert not [name for name in semaphores if Path("/dev/shm", "sem." + name.lstrip("/")).exists()]
    assert "leaked" not in stderr.read_text(), stderr.read_text()
    assert janitor not in pids


def test_the_janitor_does_nothing_when_the_parent_cleans_up(tmp_path):
    marker = tmp_path / "cleaned"
    janitor = Janitor(lambda: marker.touch())
    janitor.close()
    janitor.close()
    assert not marker.exists()
    with pytest.raises(ChildProcessError):
        os.waitpid(janitor.pid, os.WNOHANG)
