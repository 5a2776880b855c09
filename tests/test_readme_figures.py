"""The README's figures are the reference runs' figures: `python -m pytest` fails on drift
(scripts/readme/readme_figures.py renders every figure block from results/)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts" / "readme"
sys.path.append(str(SCRIPTS))  # appended: nothing here may shadow an installed module

import readme_figures as figures  # noqa: E402
import readme_lib as lib  # noqa: E402
from readme_tables import RENDERERS  # noqa: E402


@pytest.fixture(scope="module")
def rendered() -> str:
    """The committed README with every figure block rendered from results/ (once: it analyses runs)."""
    return figures.render(lib.README.read_text(), RENDERERS)


def blocks_emptied(text: str) -> str:
    """The text that render() keeps: everything but the figure blocks' bodies (which it replaces)."""
    return lib.BLOCK.sub(lambda m: f"<!-- figures:{m['name']} begin -->\n<!-- figures:{m['name']} end -->", text)


def test_readme_figures_match_results(rendered):
    text = lib.README.read_text()
    assert rendered == text, "README.md differs from results/: run `python scripts/readme/readme_figures.py --check`"
    names = {m["name"] for m in lib.BLOCK.finditer(text)}
    assert names == set(RENDERERS), "a renderer has no block in the README, or a block no renderer"


def test_check_fails_and_shows_a_diff_on_drift(tmp_path, capsys, monkeypatch, rendered):
    text = lib.README.read_text()
    block = "<!-- figures:runtime begin -->\n"
    assert block in text
    drifted = tmp_path / "README.md"
    drifted.write_text(text.replace(block, block + "the default run takes about 80 s\n", 1))
    real = figures.render

    def render_once(text, renderers, runs=None):  # a README that differs only inside blocks renders as the committed
        if renderers is RENDERERS and runs is None and blocks_emptied(text) == blocks_emptied(lib.README.read_text()):
            return rendered
        return real(text, renderers, runs)

    monkeypatch.setattr(figures, "render", render_once)
    assert figures.main(["--check", "--readme", str(drifted)]) == 1
    assert "-the default run takes about 80 s" in capsys.readouterr().out


def test_unknown_block_is_an_error():
    with pytest.raises(lib.FigureError, match="no renderer"):
        figures.render("<!-- figures:nope begin -->\n<!-- figures:nope end -->\n", RENDERERS)


def test_number_format():
    assert lib.with_interval(1485.3, 1478.2, 1490.0) == "1,485 [1,478–1,490]"
    assert lib.with_interval(26.43, 26.2, 26.5, ranged=True) == "26.4 [26.2–26.5]†"
    assert lib.num(0.8617) == "0.862"
