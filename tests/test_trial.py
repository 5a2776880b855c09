"""The newcomer's trial (scripts/trial.py): README.md's two commands, `run --quick`, `report` and
`check` at COLUMNS=80, no line over 80 columns and no traceback. The same script runs on a GPU
machine (scripts/device/trial.sh); here the package is installed already, so the README's
install steps are listed, not run (--installed), and its `python -m pytest` is CI's own run."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.append(str(ROOT / "scripts"))  # appended: nothing here may shadow an installed module
import trial  # noqa: E402

TRIAL = ROOT / "scripts" / "trial.py"


def test_the_trial_passes_here(tmp_path, machine):
    proc = subprocess.run([sys.executable, str(TRIAL), "--installed", "--dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=240)
    text = (tmp_path / "trial.txt").read_text()
    assert proc.returncode == 0, text[text.find("FAIL:"):]
    assert text.rstrip().endswith("PASS: no line over 80 columns, no traceback, every exit as expected")
    for command in ("gpuipc-bench run", "gpuipc-bench run --quick", "gpuipc-bench check"):
        assert f"\n$ {command}\n# exit 0 in " in text, command
    assert "\n$ gpuipc-bench report results/" in text  # the main job's own file
    assert "\n$ pip install -e '.[cuda12]'\n# not run: --installed" in text
    assert "\n$ python -m pytest -n 2 --dist loadfile\n# not run:" in text
    if machine.gpu_count == 0:  # the main job's longest line: every GPU scenario skipped, and why
        assert "skipped staging, ipc" in text
    assert sorted(p.name.startswith("check-") for p in (tmp_path / "results").iterdir()) == [False, False, True]


def test_a_wide_line_or_a_traceback_fails_the_trial_naming_command_and_line(tmp_path):
    code = "import sys; print('ok'); print('x' * 81); print('Traceback (most recent call last):', file=sys.stderr)"
    out = trial.run_step([sys.executable, "-c", code], tmp_path, {"PATH": ""}, (0,), shown=["tool", "go"])
    assert out.faults == [f"tool go: stdout line 2 is 81 columns: {'x' * 81!r}",
                          "tool go: stderr line 1 is a traceback: 'Traceback (most recent call last):'"]
    assert "FAIL: 2 fault(s)\ntool go: stdout line 2" in trial.transcript([out], tmp_path)
    exited = trial.run_step([sys.executable, "-c", "raise SystemExit(3)"], tmp_path, {"PATH": ""}, (0, 1),
                            shown=["tool"])
    assert exited.faults == ["tool: exit 3, expected 0 or 1"]


def test_the_trial_reads_the_readmes_first_block():
    readme = trial.read_commands(ROOT / "README.md")
    assert ["gpuipc-bench", "run"] in readme.install_and_run
    assert any(step[1:3] == ["-m", "pytest"] for step in readme.install_and_test)


@pytest.mark.parametrize("text, words", [
    ("# x\n\n```bash\npip install -e . && gpuipc-bench list\npython -m pytest\n```\n",
     "does not run `gpuipc-bench run`"),
    ("# x\n\n```bash\npip install -e . && gpuipc-bench run\npip install -e .\n```\n",
     "does not run `python -m pytest`"),
    ("# x\n\n```bash\ngpuipc-bench run\n```\n", "has 1 commands, not the two"),
    ("# x\n" + "words\n" * 30 + "```bash\ngpuipc-bench run\npython -m pytest\n```\n",
     "no fenced block of commands in its first 24 lines"),
])
def test_a_readme_without_the_two_commands_stops_the_trial(tmp_path, capsys, text, words):
    readme = tmp_path / "README.md"
    readme.write_text(text)
    assert trial.main(["--readme", str(readme), "--dir", str(tmp_path / "t"), "--installed"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and words in err and err.count("\n") == 1, err
    assert not (tmp_path / "t").exists()
