"""What a sharing mode provides (see gpuipc_bench.modes)."""

from __future__ import annotations


class Mode:
    name = ""
    summary = ""
    scenarios: tuple[str, ...] = ()  # the scenarios this mode measures; (): every one that takes modes

    def unavailable(self) -> str | None:
        return None

    def start(self) -> None:
        """Before the first worker of this mode; may raise BenchError with the reason."""

    def env(self) -> dict[str, str]:
        return {}

    def facts(self) -> dict[str, str]:
        return {}

    def leave(self) -> list[str]:
        """The run moves on to another mode (this one's scenarios are done); what it did, for the notes."""
        return []

    def stop(self) -> list[str]:
        """After the last worker; never raises. What it had to do, for the notes."""
        return []
