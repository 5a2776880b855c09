"""One error hierarchy. The CLI prints any BenchError as one line and exits with its code."""

from __future__ import annotations

import signal


class BenchError(Exception):
    """An error the user should read as a sentence, not a traceback."""

    exit_code = 1


class UsageError(BenchError):
    """Bad input, refused before any work starts."""

    exit_code = 2


class ResultsFormatError(UsageError):
    """A file given to `report` is not a gpuipc-bench CSV we can read."""


class NewerSchemaError(ResultsFormatError):
    """A gpuipc-bench results file written by a newer version (a newer schema): ours, so not exit 2."""

    exit_code = 1


class NoGpuError(BenchError):
    """CUDA is not usable here; the message carries the CUDA error's name."""


class BarrierTimeout(BenchError):
    """A wait (at the barrier, or for a hand-off) saw no progress from the workers it waited
    for during `timeout` seconds. `where` is worded for users: "the barrier", "the producer's
    'filled' signal"."""

    def __init__(self, missing: list[int], timeout: float, where: str = "the barrier"):
        self.missing = list(missing)
        self.timeout = timeout
        self.where = where
        names = ", ".join(f"worker {r}" for r in self.missing) or "the other workers"
        super().__init__(f"{names} made no progress for {timeout:g} s (awaited at {where})")


class BarrierAborted(BenchError):
    """The run was aborted (another worker failed, or the parent gave up) while waiting."""


class VerificationError(BenchError):
    """The bytes that arrived are not the bytes that were sent."""

    def __init__(self, path: str, variant: str, nbytes: int, offset: int, expected: int, got: int,
                 slot: int | None = None):
        self.path, self.variant, self.nbytes, self.offset, self.slot = path, variant, nbytes, offset, slot
        where = f"in ring slot {slot}, " if slot is not None else ""
        super().__init__(
            f"verification failed on path {path}/{variant} at size {nbytes} B: "
            f"first bad byte {where}at offset {offset} (expected 0x{expected:02x}, got 0x{got:02x})"
        )


class WorkerFailed(BenchError):
    """A worker raised, died or hung. `detail` names the worker and what it was doing."""

    def __init__(self, detail: str, traceback_text: str = "", cause_name: str = ""):
        self.detail = detail
        self.traceback_text = traceback_text
        self.cause_name = cause_name
        super().__init__(detail)


class Interrupted(BaseException):
    """A signal (SIGINT, SIGTERM, SIGHUP) ends the run. Raised in the parent where it is, so
    that every `finally` cleans up; the launcher adds the scenario and the size in flight.
    A BaseException, like KeyboardInterrupt: no `except Exception` may swallow it."""

    def __init__(self, signum: int, scenario: str = "", at: str = ""):
        self.signum = int(signum)
        self.scenario = scenario
        self.at = at
        super().__init__(signum, scenario, at)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def signal_name(signum: int) -> str:
    """The words for the signal that ended a command: 'interrupted', 'terminated', 'hung up'."""
    words: dict[int, str] = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated", signal.SIGHUP: "hung up"}
    return words.get(signum, f"signal {signum}")
