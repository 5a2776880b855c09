"""Byte sizes and size sweeps: '4KiB', '256MiB', '1G', '4..1GiB', '4K..1G:x4', '4K,64K,1M'.

Binary units by default (K, M, G, KiB, MiB, GiB are powers of 1024), because GPU
buffers and pages are; SI units only when spelled kB, MB, GB (powers of 1000).
"""

from __future__ import annotations

import re

from gpuipc_bench.errors import UsageError

_UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "kib": 1 << 10, "ki": 1 << 10,
    "m": 1 << 20, "mib": 1 << 20, "mi": 1 << 20,
    "g": 1 << 30, "gib": 1 << 30, "gi": 1 << 30,
    "t": 1 << 40, "tib": 1 << 40, "ti": 1 << 40,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")

# Refuse absurd sizes early: no single node has a 1 PiB buffer.
MAX_SIZE = 1 << 50


def parse_size(text: str) -> int:
    """'256MiB' -> 268435456. Raises UsageError on anything that is not a positive whole byte count."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise UsageError(f"'{text}' is not a byte size (examples: 4096, 4KiB, 256M, 1GiB)")
    number, unit = m.group(1), m.group(2).lower()
    if unit not in _UNITS:
        raise UsageError(f"'{text}': unknown unit '{m.group(2)}' (use B, KiB, MiB, GiB, or kB, MB, GB)")
    value = float(number) * _UNITS[unit]
    if value != int(value):
        raise UsageError(f"'{text}' is not a whole number of bytes")
    value = int(value)
    if value <= 0:
        raise UsageError(f"'{text}': a size must be at least 1 byte")
    if value > MAX_SIZE:
        raise UsageError(f"'{text}' is larger than any buffer this tool can allocate")
    return value


def parse_sizes(text: str) -> tuple[int, ...]:
    """A sweep: 'A..B' (doubling), 'A..B:xN' (times N), or a comma list; items may mix both."""
    if not str(text).strip():
        raise UsageError("no sizes given (examples: 4KiB..1GiB, 4..1G:x4, 4K,1M)")
    sizes: list[int] = []
    for item in str(text).split(","):
        item = item.strip()
        if not item:
            raise UsageError(f"'{text}': empty item in the size list")
        if ".." in item:
            sizes.extend(_parse_range(item))
        else:
            sizes.append(parse_size(item))
    return tuple(sorted(set(sizes)))


def _parse_range(item: str) -> list[int]:
    span, _, step_text = item.partition(":")
    lo_text, _, hi_text = span.partition("..")
    lo, hi = parse_size(lo_text), parse_size(hi_text)
    if hi < lo:
        raise UsageError(f"'{item}': the range is reversed ({lo_text.strip()} > {hi_text.strip()})")
    factor = 2
    if step_text:
        m = re.match(r"^\s*x\s*(\d+)\s*$", step_text)
        if not m or int(m.group(1)) < 2:
            raise UsageError(f"'{item}': the step must be xN with N >= 2 (e.g. 4..1G:x4)")
        factor = int(m.group(1))
    out, size = [], lo
    while size <= hi:
        out.append(size)
        size *= factor
    return out


def format_size(nbytes: int) -> str:
    """268435456 -> '256 MiB'; exact binary units where they fit, bytes otherwise."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    if nbytes >= 1 << 10:
        for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if nbytes >= scale:
                return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def describe_sizes(sizes: tuple[int, ...]) -> str:
    """A sweep in words, for help texts: '4 B..256 MiB in steps of x4', a list '4 KiB, 1 MiB', or
    both: '4 B, 256 B, 4 KiB..256 MiB in steps of x4'."""
    sizes = tuple(sorted(sizes))
    for start in range(len(sizes) - 3):  # the longest tail of one ratio, of 4 sizes at least
        tail = sizes[start:]
        ratios = {b / a for a, b in zip(tail, tail[1:])}
        if len(ratios) == 1:
            head = "".join(f"{format_size(s)}, " for s in sizes[:start])
            return f"{head}{format_size(tail[0])}..{format_size(tail[-1])} in steps of x{ratios.pop():g}"
    return ", ".join(format_size(s) for s in sizes)

