"""The parent's analysis modules, imported in a thread while the first scenario measures.

pandas and the analysis take ~0.25 s to import; the run first needs them for the resampling pass's
query and again at its end, with nothing measuring while they load. Imported while the first
scenario's workers measure (in other processes: the parent only passes their rows on), they cost
the run nothing.

A process forked while the thread holds an import lock would inherit it held, so every fork in the
parent waits for the thread first (os.register_at_fork): it has long ended by the run's next fork.

    preload.start()   # Session, as the first scenario begins
"""

from __future__ import annotations

import importlib
import os
import threading

MODULES = ("pandas", "gpuipc_bench.analysis.model", "gpuipc_bench.analysis.summary",
           "gpuipc_bench.analysis.verdict", "gpuipc_bench.harness.resample")

_thread: threading.Thread | None = None


def _import_all() -> None:
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the run imports it again where it needs it, and says why there
            return


def join() -> None:
    """Wait for the import thread (before a fork; nothing where none runs)."""
    thread = _thread
    if thread is not None and thread is not threading.current_thread():
        thread.join()


def start() -> None:
    """Import MODULES in a daemon thread, once per process."""
    global _thread
    if _thread is not None:
        return
    _thread = threading.Thread(target=_import_all, name="gpuipc-bench preload", daemon=True)
    os.register_at_fork(before=join)
    _thread.start()
