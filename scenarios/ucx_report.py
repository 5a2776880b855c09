"""What UCX says it chose: its protocol tables (UCX_PROTO_INFO=y) and its error lines, read from
its log, never guessed.

UCX prints one table per endpoint configuration and operation as it first selects protocols
for them, each line behind its log prefix ('[1795649262.5] [host:26573:0]   '):

    | initiator intra-node cfg#1                                        |
    | remote memory write by ucp_put* from host memory to host          |
    +--------+-------------+--------------------------------------------+
    | Range  | Description |              Config                        |
    +--------+-------------+--------------------------------------------+
    | 0..inf | zero-copy   | cma/memory                                 |

The scope line names the endpoint ('self' is an agent's loopback to itself, not the peer);
the title names the operation and the memory on each side: the initiator's own memory after
'from' (a put) or 'into' (a get), as '<type> memory' where UCX knows no device for it and
'<type>/<device>' where it does ('from cuda/GPU0 to cuda', ucp_proto_select_param_str);
each row a size range (bytes, inclusive; 'inf') and the transport/device that carries it.
"""

from __future__ import annotations

import dataclasses
import re

_PREFIX = re.compile(r"^\[[\d.]+\]\s+\[[^\]]*\]\s*")
_ROW = re.compile(r"^\|\s*(\d+)(?:\.\.(\d+|inf))?\s*\|\s*([^|]*?)\s*\|\s*([^|]*?)\s*\|$")
_ERROR = re.compile(r"\bUCX\s+ERROR\s+(.*)$")
# the memory types in a title: the initiator's ('from host memory', 'into cuda/GPU0', 'from iov[4]
# host memory'), then the peer's ('to host', 'from cuda/dev[2]': a put's 'to', a get's second 'from')
_LOCAL = re.compile(r"\b(?:from|into) (?:\w+(?:\[\d+\])? )??(\w+)(?: memory\b|/)")
_REMOTE = re.compile(r"\b(?:from|into) (?:\w+(?:\[\d+\])? )??\w+(?: memory|/\S+) (?:to|from) (\w+)")
OPERATIONS = {"write": "remote memory write by ucp_put", "read": "remote memory read by ucp_get"}


@dataclasses.dataclass(frozen=True)
class ProtoTable:
    scope: str  # 'initiator intra-node cfg#1'
    title: str  # 'remote memory write by ucp_put* from host memory to host'
    ranges: tuple[tuple[int, float, str, str], ...]  # (first byte count, last or inf, description, config)

    def config_for(self, nbytes: int) -> str:
        for first, last, description, config in self.ranges:
            if first <= nbytes <= last:
                return f"{description} {config}"
        return ""


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def tables(log: str) -> list[ProtoTable]:
    """Every protocol table in `log`, in order (lines of other processes' logs may interleave
    only between tables: each process writes its own file)."""
    lines = [_PREFIX.sub("", line).rstrip() for line in log.splitlines()]
    found = []
    i = 0
    while i < len(lines):
        head = lines[i]
        # a table opens with a border, then two one-cell lines (scope, title)
        if head.startswith("+-") and i + 2 < len(lines) and len(_cells(lines[i + 1])) == 1 \
                and len(_cells(lines[i + 2])) == 1 and lines[i + 1].startswith("|"):
            scope, title = _cells(lines[i + 1])[0], _cells(lines[i + 2])[0]
            ranges = []
            j = i + 6  # past the border, the column names and the border under them
            while j < len(lines) and lines[j].startswith("|"):
                match = _ROW.match(lines[j])
                if match:
                    first, last, description, config = match.groups()
                    end = float("inf") if last == "inf" else float(last if last is not None else first)
                    ranges.append((int(first), end, description, config))
                j += 1
            found.append(ProtoTable(scope, title, tuple(ranges)))
            i = j
        else:
            i += 1
    return found


def chosen(log: str, operation: str, nbytes: int, memory: str = "", remote: str = "") -> str:
    """What UCX used for `operation` ('write' or 'read') of nbytes towards the peer: the
    protocol and transport/device ('zero-copy cma/memory'), one per distinct endpoint
    configuration, joined by ', '; 'not reported' where no table covers it. `memory`
    ('host', 'cuda') keeps the tables whose title names it as the initiator's, `remote` those
    naming it as the peer's (one endpoint has a table per pair: host to host over cma, host to
    cuda by software emulation)."""
    wanted = OPERATIONS[operation]
    out = []
    for table in tables(log):
        if not table.title.startswith(wanted) or " self " in f" {table.scope} ":
            continue
        if memory and local_memory(table.title) != memory:
            continue
        if remote and remote_memory(table.title) != remote:
            continue
        config = table.config_for(nbytes)
        if config:
            out.append(config)
    return ", ".join(dict.fromkeys(out)) or "not reported"


def local_memory(title: str) -> str:
    """The initiator's memory type a table's title names ('host', 'cuda'), or ''."""
    match = _LOCAL.search(title)
    return match.group(1) if match else ""


def remote_memory(title: str) -> str:
    """The peer's memory type a table's title names ('host', 'cuda'), or ''."""
    match = _REMOTE.search(title)
    return match.group(1) if match else ""


def transport_of(config: str) -> str:
    """The transport names of a chosen() text: 'zero-copy cma/memory' -> 'cma'."""
    names = []
    for part in config.split(","):
        words = part.split()
        if words and "/" in words[-1]:
            names.append(words[-1].split("/")[0])
    return ",".join(dict.fromkeys(names))


def first_error(log: str) -> str:
    """UCX's first error line, without its log prefix and source location ('' if none)."""
    for line in log.splitlines():
        match = _ERROR.search(line)
        if match:
            return " ".join(match.group(1).split())
    return ""
