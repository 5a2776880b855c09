"""Path facts: what analysis, reports and plots need to know about a path, declared once.

Each scenario declares the paths its rows carry (`Scenario.paths`); the registry in
`scenarios/__init__.py` collects them, and a run writes them into its CSV header, one
line per path in the order they are shown:

    # path.ipc: role=transfer; colour=#1f77b4; setup=ipc_open_cold; references=

so a report of the file keeps its meaning without importing scenario code (a schema-1
file, which has no such lines, falls back to BUILTIN below).

role:
  transfer   bytes move between two processes: a verdict candidate
  baseline   a transfer path that the break-even compares the others against (staging)
  reference  not an exchange between two processes (N processes each copying its own
             memory, a CPU-only baseline, the barrier): shown in its own tables, never ranked
  ceiling    what the hardware does in one process
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping

ROLES = ("transfer", "baseline", "reference", "ceiling")
META_PREFIX = "path."


@dataclasses.dataclass(frozen=True)
class PathInfo:
    name: str
    role: str = "transfer"
    colour: str = "#7f7f7f"
    # Setup-row variants this path pays before its first transfer (counted in the break-even).
    setup: tuple[str, ...] = ()
    # Variants of the path that are single-process references, not exchanges between two
    # processes (peer 'p2p-off'): never verdict candidates, and they pay no setup.
    references: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, not {self.role!r}")
        if not self.name or any(c in self.name for c in ";=:\n "):
            raise ValueError(f"bad path name {self.name!r}")

    @property
    def ranked(self) -> bool:
        """Whether its rows may be verdict candidates (its `references` variants aside)."""
        return self.role in ("transfer", "baseline")

    def to_meta(self) -> str:
        return (f"role={self.role}; colour={self.colour}; setup={','.join(self.setup)}; "
                f"references={','.join(self.references)}")

    @classmethod
    def from_meta(cls, name: str, text: str) -> "PathInfo":
        fields: dict[str, str] = {}
        for part in text.split(";"):
            key, sep, value = part.strip().partition("=")
            if sep:
                fields[key.strip()] = value.strip()
        role = fields.get("role", "transfer")
        if role not in ROLES:
            role = "reference"  # an unknown role from a newer tool: shown, never ranked
        return cls(name=name, role=role, colour=fields.get("colour") or "#7f7f7f",
                   setup=_names(fields.get("setup", "")), references=_names(fields.get("references", "")))


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


CEILING = PathInfo("ceiling", role="ceiling", colour="#000000")

# The facts schema-1 files were written under (they carry none in their header).
BUILTIN: tuple[PathInfo, ...] = (
    PathInfo("staging", role="baseline", colour="#d62728"),
    PathInfo("ipc", colour="#1f77b4", setup=("ipc_open_cold",)),
    PathInfo("mmap", colour="#2ca02c", setup=("host_register",)),
    PathInfo("peer", colour="#9467bd", setup=("ipc_open_cold", "peer_enable"), references=("p2p-off",)),
    PathInfo("sharing", role="reference", colour="#8c564b"),
    PathInfo("host", role="reference", colour="#e377c2"),
    PathInfo("barrier", role="reference", colour="#17becf"),
    CEILING,
)


def to_metadata(paths: Iterable[PathInfo]) -> dict[str, str]:
    """The header lines of these paths, in order ('path.<name>' -> facts)."""
    return {f"{META_PREFIX}{p.name}": p.to_meta() for p in paths}


def from_metadata(meta: Mapping[str, str]) -> dict[str, PathInfo]:
    """Path facts of a results file, in header order; BUILTIN where the file has none (schema 1).
    The ceiling path is always known."""
    found = {key[len(META_PREFIX):]: PathInfo.from_meta(key[len(META_PREFIX):], value)
             for key, value in meta.items() if key.startswith(META_PREFIX)}
    if not found:
        found = {p.name: p for p in BUILTIN}
    found.setdefault(CEILING.name, CEILING)
    return found


def path_order(paths: Mapping[str, PathInfo], present: Iterable[str]) -> list[str]:
    """`present` paths in declared order, unknown ones after (alphabetically)."""
    rank = {name: i for i, name in enumerate(paths)}
    return sorted(set(present), key=lambda p: (rank.get(p, len(rank)), p))
