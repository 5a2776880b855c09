"""No number in the pages' prose that no committed file backs: the numeric-token check.

Every figure of README.md and docs/**/*.md enters through a figure block rendered from results/
(readme_figures.py). This module finds the numbers a page's *prose* states by hand and fails on each
one that is none of:

  - a value rendered on the same page: its digits appear as a number in one of the page's figure
    blocks (`1,489` and `1489` are one value; `43%` and `±43%` are `43`);
  - a size: a power of two (or 0) followed by ` B`, ` KiB`, ` MiB`, ` GiB`, ` bytes` or `-byte`, alone or
    as a list or range (`4 B–4 MiB`, `16 and 256 B`): what a run was asked to measure (or a layout's
    unit), not what it measured;
  - an index: of a GPU, an NVSHMEM PE, an MPI rank or a worker (`GPU 0`, `GPUs 0 and 1`, `0 → 1`, `rank 0`);
  - one of ALLOWED, the short list below: versions of named software, the CSV schema's version, exit
    codes, the width the output keeps to, and the confidence of the tool's intervals.

What is not prose: figure blocks, fenced code blocks, inline code (`...`), HTML comments, link targets
and image paths. A number glued to letters is part of a name (`H100`, `NV18`, `cuda12`, `x4`, `4KiB`)
and not a number. A figure the prose needs goes into a figure block (a sentence renderer is a few
lines in one of the readme_*.py modules, registered in readme_tables.RENDERERS) and may then be
quoted in the prose of its page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from readme_lib import BLOCK

# The short allowlist, each entry a pattern over the prose around the number and why it is not a figure.
# The number it allows is the one inside the group named `n`.
ALLOWED: list[tuple[str, str]] = [
    (r"\b(?:Python|CUDA|NIXL|UCX|Open MPI|NVSHMEM|libnvshmem|nvshmem4py|PyTorch|torch|CuPy|cuda-bindings|driver"
     r"|nvbandwidth v?|nccl-tests|NCCL) (?P<n>\d+(?:\.\d+)*)", "a version of a named piece of software"),
    (r"schema(?:-| )(?P<n>[123])\b", "the CSV format's version (`schema_version` in every header)"),
    (r"\b[Ee]xit(?:s| codes?| status)?(?: with)? (?P<n>\d{1,3}(?:(?:, | or | and )\d{1,3})*)\b",
     "exit codes, an interface"),
    (r"(?P<n>80) (?:columns|characters|lines)", "the width the output keeps to; the limit on a CLI function"),
    (r"(?P<n>95)% interval", "the confidence of every interval the tool reports (robust.median_ci)"),
]

NUMBER = re.compile(r"(?<![\w.#])\d+(?:[.,]\d+)*(?![\w])")
NAME = re.compile(r"\b[A-Za-z_][\w]*(?:[-.][\w]+)*")  # a name with digits in it is not a number
SIZE_UNIT = re.compile(r"(?:\s*(?:,|and|or|to|–|-|\.\.)\s*\d+)*(?:\s+(?:B|KiB|MiB|GiB|bytes?)\b|-bytes?\b)")
INDEX_BEFORE = re.compile(r"(?:\b(?:GPUs?|PEs?|ranks?|workers?)|\b(?:GPU|PE|rank|worker)s? \d+ (?:and|or|to)|→|->)\s*$")
INDEX_AFTER = re.compile(r"^\s*(?:→|->)")
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
COMMENT = re.compile(r"<!--.*?-->", re.S)
LINK_TARGET = re.compile(r"\]\([^)]*\)|<https?://[^>]*>")


@dataclass(frozen=True)
class Stray:
    """A number in the prose that no rendered value or allowlist entry backs."""

    line: int
    token: str
    context: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.token!r} in “{self.context}”"


def _blank(match: re.Match) -> str:
    """The match replaced by spaces, its newlines kept (line numbers stay right)."""
    return re.sub(r"[^\n]", " ", match.group(0))


def prose(text: str) -> str:
    """The page with everything that is not prose blanked out (figure blocks, code, comments, links)."""
    for pattern in (BLOCK, FENCE, COMMENT, INLINE_CODE, LINK_TARGET):
        text = pattern.sub(_blank, text)
    return text


def value(token: str) -> str:
    """A number's value as text: thousands separators dropped, `1,489` == `1489`."""
    return token.replace(",", "")


def rendered_values(text: str) -> set[str]:
    """Every number that the page's figure blocks render."""
    found: set[str] = set()
    for block in BLOCK.finditer(text):
        body = NAME.sub(lambda m: " " * len(m.group(0)), block["body"])
        found.update(value(m.group(0)) for m in NUMBER.finditer(body))
    return found


def _is_size(token: str, after: str) -> bool:
    if not SIZE_UNIT.match(after):
        return False
    n = value(token)
    return n.isdigit() and (int(n) == 0 or int(n) & (int(n) - 1) == 0)


def _allowed_spans(text: str) -> list[tuple[int, int]]:
    """Where ALLOWED's `n` groups lie in the prose: a number inside one of these is allowed."""
    spans = []
    for pattern, _why in ALLOWED:
        for m in re.finditer(pattern, text):
            spans.extend(m.span(g) for g in m.groupdict() if m.group(g) is not None)
    return spans


def strays(text: str) -> list[Stray]:
    """The numbers of the page's prose that match no rendered value, no size, no index, no allowlist entry."""
    rendered = rendered_values(text)
    plain = prose(text)
    named = NAME.sub(lambda m: " " * len(m.group(0)), plain)
    allowed = _allowed_spans(plain)
    found = []
    for m in NUMBER.finditer(named):
        token, start, end = m.group(0), m.start(), m.end()
        if value(token) in rendered or any(lo <= start and end <= hi for lo, hi in allowed):
            continue
        if _is_size(token, plain[end:end + 40]):
            continue
        before = plain[max(0, start - 12):start]
        if INDEX_BEFORE.search(before) or INDEX_AFTER.match(plain[end:end + 4]):
            continue
        line = plain.count("\n", 0, start) + 1
        row = text.splitlines()[line - 1]
        found.append(Stray(line, token, row.strip()[:100]))
    return found
