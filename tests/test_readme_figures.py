"""The pages' figures are the reference runs' figures: `python -m pytest` fails on drift
(scripts/readme/readme_figures.py renders every figure block of README.md and docs/**/*.md from results/)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts" / "readme"
sys.path.append(str(SCRIPTS))  # appended: nothing here may shadow an installed module

import readme_figures as figures  # noqa: E402
import readme_lib as lib  # noqa: E402
from readme_tables import RENDERERS  # noqa: E402


def test_every_page_matches_results():
    used = set()
    for page in lib.pages():
        text = page.read_text()
        assert figures.render(text, RENDERERS) == text, (
            f"{page.name} differs from results/: run `python scripts/readme/readme_figures.py --check`")
        used.update(m["name"] for m in lib.BLOCK.finditer(text))
    assert used == set(RENDERERS), "a renderer has no block on any page, or a block no renderer"


def test_the_pages_are_the_readme_and_docs():
    names = [p.relative_to(lib.ROOT).as_posix() for p in lib.pages()]
    assert names[0] == "README.md"
    assert "docs/results.md" in names and "docs/methods/measuring.md" in names
    assert all(n == "README.md" or n.startswith("docs/") for n in names)


def test_the_readme_is_short_and_links_every_page():
    text = lib.README.read_text()
    assert len(text.splitlines()) <= 300
    for page in lib.pages()[1:]:
        rel = page.relative_to(lib.ROOT).as_posix()
        if page.parent == lib.DOCS:  # every top-level page is linked; docs/methods/ through its index
            assert f"]({rel})" in text, f"README.md does not link {rel}"


def test_every_relative_link_resolves():
    import re

    broken = []
    for page in lib.pages():
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            path = target.split("#", 1)[0]
            if path and "://" not in path and not (page.parent / path).exists():
                broken.append(f"{page.relative_to(lib.ROOT)}: {target}")
    assert broken == []


def test_check_fails_and_shows_a_diff_on_drift(tmp_path, capsys):
    text = lib.README.read_text()
    block = "<!-- figures:runtime begin -->\n"
    assert block in text
    drifted = tmp_path / "README.md"
    drifted.write_text(text.replace(block, block + "the default run takes about 80 s\n", 1))
    assert figures.main(["--check", "--page", str(drifted)]) == 1
    assert "-the default run takes about 80 s" in capsys.readouterr().out


def test_check_fails_on_a_stray_number_in_the_prose(tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text("A figure typed by hand: 47.6 GB/s.\n")
    assert figures.main(["--check", "--page", str(page)]) == 1
    assert "'47.6'" in capsys.readouterr().err


def test_a_block_name_once_per_page_and_on_several_pages():
    page = "<!-- figures:range-covers begin -->\n<!-- figures:range-covers end -->\n"
    assert "75.0%" in figures.render(page, RENDERERS)  # the same block may sit on several pages
    with pytest.raises(lib.FigureError, match="twice"):
        figures.render(page + page, RENDERERS)


def test_unknown_block_is_an_error():
    with pytest.raises(lib.FigureError, match="no renderer"):
        figures.render("<!-- figures:nope begin -->\n<!-- figures:nope end -->\n", RENDERERS)


def test_number_format():
    assert lib.with_interval(1485.3, 1478.2, 1490.0) == "1,485 [1,478–1,490]"
    assert lib.with_interval(26.43, 26.2, 26.5, ranged=True) == "26.4 [26.2–26.5]†"
    assert lib.num(0.8617) == "0.862"


def test_the_speed_figures_name_their_gpus_from_the_headers():
    import readme_speed as speed

    assert speed.model_name("NVIDIA H100 80GB HBM3") == "H100"
    assert speed.model_name("NVIDIA H200") == "H200"
    assert speed.model_name("NVIDIA A100-SXM4-80GB") == "A100"
    assert speed.gpus(lib.SHARED, *speed.SPEED, speed.SPEED_QUICK) == "one H200"
    assert speed.gpus(lib.SHARED, *speed.H100_SPEED) == "one H100"
    assert speed.gpus(lib.SHARED, speed.X4) == "four H200s"
    with pytest.raises(lib.FigureError, match="not the same GPUs"):
        speed.gpus(lib.SHARED, speed.SPEED[0], speed.H100_SPEED[0])


def test_the_pairs_figures_name_the_re_swept_pairs_and_the_plain_two_gpu_run():
    import readme_speed as speed

    x4 = speed.pairs_x4(lib.SHARED)
    resweep = sorted(k.split(".", 2)[2] for k in lib.SHARED[speed.X4].meta if k.startswith("pairs.resweep."))
    assert resweep and f"{speed.count(len(resweep))} pair" in x4 and "leaves the whole-pair re-sweeps out" in x4
    assert x4.count("swept whole (outside its class)") == len(resweep)
    x2 = speed.plain_x2(lib.SHARED)
    assert f"{speed.listed_wall(speed.X2_PLAIN)[0]:.1f} s by `/usr/bin/time`" in x2
    assert f"`results/{speed.X2_PLAIN_NVBANDWIDTH}`" in x2 and "two H200s (NV18)" in x2
