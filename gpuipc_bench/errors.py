"""One error hierarchy. The CLI prints any BenchError as one line and exits with its code."""

from __future__ import annotations


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
    """Some workers did not arrive at the barrier before the deadline."""

    def __init__(self, missing: list[int], timeout: float, where: str = "barrier"):
        self.missing = list(missing)
        self.timeout = timeout
        names = ", ".join(f"worker {r}" for r in self.missing) or "no one"
        super().__init__(f"{names} did not arrive at the {where} within {timeout:g} s")


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
