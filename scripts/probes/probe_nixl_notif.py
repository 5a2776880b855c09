"""Probe: why a NIXL WRITE with its notification costs milliseconds on a small machine.

Two forked processes, each a NIXL agent (UCX backend, NIXL's progress thread on, its default);
the initiator WRITEs 4 KiB of host memory into the target's and the target polls for the
notification. Three ways for the initiator to wait for the target's answer (a timestamp
through a multiprocessing queue), each with the notification attached to the WRITE or sent
on its own (send_notif) once the WRITE is DONE:

  block       the initiator sleeps in queue.get(): a CPU is free for the progress threads
  spin        the initiator spins on the queue without calling NIXL
  spin+nixl   the initiator spins calling get_new_notifs (which progresses its UCX worker)

Prints, per case, the median of 40 transfers: the WRITE's DONE and the notification seen by
the target, in µs from the post. Usage: python scripts/probes/probe_nixl_notif.py [> results/...txt]
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import statistics
import sys
import time

import numpy as np

N = 40


def _api():
    for name in ("nixl_cu13", "nixl_cu12"):
        try:
            return __import__(f"{name}._api", fromlist=["nixl_agent"])
        except ImportError:
            continue
    sys.exit("needs NIXL: pip install --no-deps nixl-cu12")


def worker(role, q_out, q_in, wait: str, attach: bool, report):
    nixl = _api()
    agent = nixl.nixl_agent(role, nixl.nixl_agent_config(backends=["UCX"]))
    buf = np.zeros(4096, dtype=np.uint8)
    agent.register_memory([(buf.ctypes.data, buf.size, 0, "")], "DRAM")
    q_out.put(agent.get_agent_metadata())
    peer = agent.add_remote_agent(q_in.get())
    name = peer.decode() if isinstance(peer, bytes) else peer
    local = agent.get_xfer_descs([(buf.ctypes.data, buf.size, 0)], "DRAM")
    q_out.put(agent.get_serialized_descs(local))
    remote = agent.deserialize_descs(q_in.get())
    if role == "target":
        seen = 0
        while seen < N:
            for _ in agent.get_new_notifs().get(name, []):
                seen += 1
                q_out.put(time.perf_counter())
        time.sleep(0.3)
        return
    done, noted = [], []
    for i in range(N):
        note = b"n%d" % i
        handle = agent.initialize_xfer("WRITE", local, remote, peer, note if attach else b"")
        start = time.perf_counter()
        agent.transfer(handle)
        while agent.check_xfer_state(handle) != "DONE":
            pass
        done.append(time.perf_counter() - start)
        if not attach:
            agent.send_notif(peer, note)
        while True:
            try:
                seen_at = q_in.get() if wait == "block" else q_in.get_nowait()
                break
            except queue.Empty:
                if wait == "spin+nixl":
                    agent.get_new_notifs()
        noted.append(seen_at - start)
        handle.release()
    report.put((statistics.median(done) * 1e6, statistics.median(noted) * 1e6))
    time.sleep(0.3)


def main() -> None:
    mp.set_start_method("fork")
    os.environ.setdefault("NIXL_LOG_LEVEL", "WARN")
    print(f"# {os.cpu_count()} CPUs; 4 KiB WRITE host to host; median of {N}; µs from the post")
    print(f"{'initiator waits':<16} {'notification':<10} {'DONE':>10} {'seen':>10}")
    for wait in ("block", "spin", "spin+nixl"):
        for attach in (True, False):
            a2b, b2a, report = mp.Queue(), mp.Queue(), mp.Queue()
            target = mp.Process(target=worker, args=("target", b2a, a2b, wait, attach, report))
            initiator = mp.Process(target=worker, args=("initiator", a2b, b2a, wait, attach, report))
            target.start()
            initiator.start()
            done, seen = report.get(timeout=120)
            target.join(30)
            initiator.join(30)
            print(f"{wait:<16} {'attached' if attach else 'after':<10} {done:>10.1f} {seen:>10.1f}", flush=True)


if __name__ == "__main__":
    main()
