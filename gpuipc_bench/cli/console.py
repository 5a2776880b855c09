"""What the commands print to: stdout (results) and stderr (progress, notes), and the
words for the signal that ended a command."""

from __future__ import annotations

import signal

from rich.console import Console


def stdout_console() -> Console:
    return Console(highlight=False, soft_wrap=False)


def stderr_console() -> Console:
    return Console(stderr=True, highlight=False)


def signal_name(signum: int) -> str:
    return {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated", signal.SIGHUP: "hung up"}.get(
        signum, f"signal {signum}")
