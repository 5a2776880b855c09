"""No number in the prose of README.md and docs/**/*.md that no committed file backs
(scripts/readme/readme_numbers.py): a number outside the figure blocks, code and links must be a value
a figure block of its page renders, a message size, an index, or on the short allowlist."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts" / "readme"
sys.path.append(str(SCRIPTS))  # appended: nothing here may shadow an installed module

import readme_lib as lib  # noqa: E402
import readme_numbers as numbers  # noqa: E402

BLOCK = "<!-- figures:x begin -->\n| a | b |\n| --- | ---: |\n| ipc/ce | 1,489 [1,479–1,503] GB/s, ±43% |\n" \
        "<!-- figures:x end -->\n"


def strays(prose: str, block: str = BLOCK) -> list[str]:
    return [s.token for s in numbers.strays(block + prose)]


@pytest.mark.parametrize("page", lib.pages(), ids=lambda p: p.relative_to(lib.ROOT).as_posix())
def test_no_stray_number_on_any_page(page):
    found = numbers.strays(page.read_text())
    assert not found, "\n".join(str(s) for s in found)


def test_a_number_the_page_renders_may_be_quoted():
    assert strays("ipc/ce streams 1,489 GB/s (1489 without the comma), ±43% wide.\n") == []


def test_a_number_typed_by_hand_is_a_stray():
    assert strays("The default run took 40.4 s, its interval ±60%.\n") == ["40.4", "60"]


def test_the_block_of_another_page_does_not_count():
    assert strays("ipc/ce streams 1,489 GB/s.\n", block="") == ["1,489"]


def test_what_is_not_prose_is_not_checked():
    prose = ("```text\ntook 40.4 s\n```\n"
             "Run `gpuipc-bench run --max-samples 12`; see [the run](results/h100-1.csv) and "
             "<!-- 17 -->.\n")
    assert strays(prose) == []


def test_names_sizes_and_indices_are_not_figures():
    prose = ("An H100 over NV18 with cuda12, x4 steps from 4KiB: 4 B, 16 and 256 B, 4 B–4 MiB, 1 GiB, "
             "an 8-byte word, 64 bytes; GPU 0 → GPU 1, GPUs 0 and 1, 0 → 1, rank 0, PE 1.\n")
    assert strays(prose) == []


def test_a_size_that_is_no_power_of_two_is_a_figure():
    assert strays("272 MiB of rings.\n") == ["272"]


def test_the_allowlist():
    prose = ("Python 3.10, CUDA 13, NIXL 1.5.1, driver 580.159.04, schema 3, exit 130, 143 or 129, "
             "exit code 2, 80 columns, the 95% interval.\n")
    assert strays(prose) == []
    assert strays("It exits within 3 s.\n") == ["3"]


def test_every_allowlist_entry_says_why():
    assert all(why for _pattern, why in numbers.ALLOWED)
    assert len(numbers.ALLOWED) <= 6, "keep the allowlist short: render the figure instead"
