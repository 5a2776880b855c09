"""Text read from a results file is data, shown to people: control characters (an ANSI escape
sequence that clears the screen or sets the window title, a carriage return that overwrites a
line, a bell, a bidirectional override that reorders a line) are shown escaped, never sent to
the terminal."""

from __future__ import annotations

import re

# C0 controls but tab and newline (and a carriage return before a newline: a line's end), DEL,
# C1 controls, and the bidirectional embeddings, overrides and isolates
CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]|\r(?!\n)")
# The same, as the UTF-8 bytes of a file: a file without any is left untouched
CONTROL_BYTES = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\x8e\x8f\xaa-\xae]|\xe2\x81[\xa6-\xa9]")


def printable(text: str) -> str:
    """`text` with every control character shown as \\xHH or \\uHHHH ('\\x1b[2J' stays
    readable and clears nothing)."""
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                       else f"\\u{ord(m.group()):04x}", text)
