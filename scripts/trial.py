#!/usr/bin/env python3
"""A newcomer's trial: README.md's two commands, then `run --quick`, `report` and `check`, at 80 columns.

    python scripts/trial.py --dir DIR [--installed] [--tests "PYTEST ARGS"] [--readme README.md]

The two commands are read from README.md's first fenced block (it must stand on the first
screen), so the trial breaks when the README changes what a newcomer types. Each command runs
with COLUMNS=80 in DIR (its results land in DIR/results/); the trial fails, naming the command
and the line, on any line of standard output or error over 80 columns, any traceback, or an
exit status the command should not give (check may exit 1: a failed check is its answer). It
writes DIR/trial.txt, the transcript: every command, its exit status and seconds, and all it
printed.

--installed: the package is installed already (the test, a GPU machine without network): the
README's install steps (venv, activate, pip install) are listed, not run. Without it they run
as written, in the checkout. --tests: the second command's `python -m pytest` runs with these
arguments; without it, it is listed, not run (the whole suite takes CI's 15 minutes).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WIDTH = 80
FIRST_SCREEN = 24  # lines: the two commands must be on the README's first screen
TIMEOUT = 600  # seconds a command may take; the default run on one H100 takes about 40


class TrialError(Exception):
    """The README no longer has the two commands the trial runs."""


@dataclass
class Readme:
    """The README's two commands, each split at `&&` into its steps (argument lists)."""
    install_and_run: list[list[str]]
    install_and_test: list[list[str]]


def read_commands(readme: Path) -> Readme:
    lines = readme.read_text(encoding="utf-8").splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().startswith("```")), None)
    if start is None or start >= FIRST_SCREEN:
        raise TrialError(f"{readme}: no fenced block of commands in its first {FIRST_SCREEN} lines")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].strip().startswith("```")), len(lines))
    commands = [line.strip() for line in lines[start + 1:end] if line.strip()]
    if len(commands) != 2:
        raise TrialError(f"{readme}: its first block has {len(commands)} commands, not the two "
                         "(install and run; install and test)")
    steps = [[shlex.split(step) for step in command.split("&&")] for command in commands]
    if not any(is_tool(step) and step[1:2] == ["run"] for step in steps[0]):
        raise TrialError(f"{readme}: its first command does not run `gpuipc-bench run`: {commands[0]}")
    if not any(is_pytest(step) for step in steps[1]):
        raise TrialError(f"{readme}: its second command does not run `python -m pytest`: {commands[1]}")
    return Readme(*steps)


def is_tool(step: list[str]) -> bool:
    return step[:1] == ["gpuipc-bench"]


def is_pytest(step: list[str]) -> bool:
    return len(step) >= 3 and step[0].startswith("python") and step[1:3] == ["-m", "pytest"]


def is_install(step: list[str]) -> bool:
    return not (is_tool(step) or is_pytest(step))


@dataclass
class Outcome:
    command: str
    code: int | None  # None: not run, or killed at the time limit
    seconds: float = 0.0
    stdout: str = ""
    stderr: str = ""
    note: str = ""
    faults: list[str] = field(default_factory=list)


def faults_in(command: str, stream: str, text: str, width: int = WIDTH) -> list[str]:
    """Each line over `width` columns and each traceback, named by command, stream and line."""
    faults = []
    for number, line in enumerate(text.splitlines(), 1):
        if len(line) > width:
            faults.append(f"{command}: {stream} line {number} is {len(line)} columns: {line!r}")
        if "Traceback" in line:
            faults.append(f"{command}: {stream} line {number} is a traceback: {line!r}")
    return faults


def run_step(argv: list[str], cwd: Path, env: dict[str, str], expected: tuple[int, ...],
             check_width: bool = True, shown: list[str] | None = None) -> Outcome:
    """Run one command; `shown`: the command as the README writes it (argv may name its full path)."""
    command = shlex.join(shown or argv)
    start = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        out = Outcome(command, None, time.perf_counter() - start, text_of(exc.stdout), text_of(exc.stderr))
        out.faults.append(f"{command}: still running after {TIMEOUT} s")
        return out
    out = Outcome(command, proc.returncode, time.perf_counter() - start, proc.stdout, proc.stderr)
    if proc.returncode not in expected:
        out.faults.append(f"{command}: exit {proc.returncode}, expected {' or '.join(map(str, expected))}")
    for stream, text in (("stdout", out.stdout), ("stderr", out.stderr)):
        out.faults += faults_in(command, stream, text, WIDTH if check_width else sys.maxsize)
    return out


def text_of(data: bytes | str | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


def written_csv(outcome: Outcome) -> str | None:
    """The results file a run names in its last line: `wrote results/NAME.csv (N rows)`."""
    found = re.findall(r"^wrote (\S+\.csv) \(", outcome.stderr + outcome.stdout, flags=re.M)
    return found[-1] if found else None


def installed_argv(step: list[str], env: dict[str, str]) -> list[str]:
    """The installed command; PATH may not name the venv's bin folder (`.venv/bin/python scripts/trial.py`)."""
    found = shutil.which(step[0], path=env["PATH"]) or str(Path(sys.executable).parent / step[0])
    return [found, *step[1:]]


def trial(readme: Readme, work: Path, installed: bool, tests: list[str] | None) -> list[Outcome]:
    env = {**os.environ, "COLUMNS": str(WIDTH), "PYTHONUNBUFFERED": "1"}
    env.pop("LINES", None)
    outcomes: list[Outcome] = []

    def install(steps: list[list[str]]) -> None:
        commands = [shlex.join(step) for step in steps if is_install(step)]
        if installed:
            outcomes.extend(Outcome(c, None, note="not run: --installed (the package is installed)")
                            for c in commands)
        elif commands:  # one shell, as the README runs them: `. .venv/bin/activate` holds for the rest
            outcomes.append(run_step(["bash", "-c", " && ".join(commands)], REPO, env, (0,), check_width=False))
            venv_bin = REPO / ".venv" / "bin"
            env["PATH"] = f"{venv_bin}{os.pathsep}{env['PATH']}"
            env["VIRTUAL_ENV"] = str(venv_bin.parent)

    def tool(step: list[str], expected: tuple[int, ...] = (0,)) -> Outcome:
        return run_step(installed_argv(step, env), work, env, expected, shown=step)

    install(readme.install_and_run)
    for step in readme.install_and_run:
        if is_tool(step):
            outcomes.append(tool(step))
    main_csv = written_csv(outcomes[-1])
    outcomes.append(tool(["gpuipc-bench", "run", "--quick"]))
    if main_csv is None:
        outcomes.append(Outcome("gpuipc-bench report", None, faults=[
            "gpuipc-bench run: no `wrote results/NAME.csv (N rows)` line to report on"]))
    else:
        outcomes.append(tool(["gpuipc-bench", "report", main_csv]))
    outcomes.append(tool(["gpuipc-bench", "check"], (0, 1)))
    if outcomes[-1].code == 1:
        outcomes[-1].note = "exit 1: a check failed on this node (its answer; its lines say which)"

    install(readme.install_and_test)
    for step in readme.install_and_test:
        if is_pytest(step) and tests is None:
            outcomes.append(Outcome(shlex.join(step), None,
                                    note="not run: the whole suite is CI's (.ci/run); --tests runs a part"))
        elif is_pytest(step):  # pytest's own lines (test ids, its summary) are not the tool's: width unchecked
            python = sys.executable if installed else str(REPO / ".venv" / "bin" / "python")
            argv = [python, *step[1:], *(tests or [])]
            outcomes.append(run_step(argv, REPO, env, (0,), check_width=False, shown=[*step, *(tests or [])]))
    return outcomes


def transcript(outcomes: list[Outcome], work: Path) -> str:
    faults = [fault for outcome in outcomes for fault in outcome.faults]
    parts = ["gpuipc-bench trial: README.md's two commands, then run --quick, report, check;",
             f"COLUMNS={WIDTH}, in {work}",
             ""]
    for outcome in outcomes:
        parts.append(f"$ {outcome.command}")
        if outcome.code is not None:
            parts.append(f"# exit {outcome.code} in {outcome.seconds:.1f} s")
        if outcome.note:
            parts.append(f"# {outcome.note}")
        for stream, text in (("stdout", outcome.stdout), ("stderr", outcome.stderr)):
            if text:
                parts += [f"# --- {stream}", text.rstrip("\n")]
        parts.append("")
    if faults:
        parts += [f"FAIL: {len(faults)} fault(s)", *faults]
    else:
        parts.append(f"PASS: no line over {WIDTH} columns, no traceback, every exit as expected")
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, type=Path, help="where the commands run and trial.txt goes")
    parser.add_argument("--installed", action="store_true", help="list the README's install steps, not run them")
    parser.add_argument("--tests", default=None, help="arguments for the second command's pytest (default: not run)")
    parser.add_argument("--readme", type=Path, default=REPO / "README.md")
    args = parser.parse_args(argv)
    try:
        readme = read_commands(args.readme)
    except TrialError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    args.dir.mkdir(parents=True, exist_ok=True)
    work = args.dir.resolve()
    outcomes = trial(readme, work, args.installed, None if args.tests is None else shlex.split(args.tests))
    text = transcript(outcomes, work)
    (work / "trial.txt").write_text(text, encoding="utf-8")
    print(text.splitlines()[-1] if not any(o.faults for o in outcomes) else text[text.index("FAIL:"):], end="")
    print(f"\ntranscript: {work / 'trial.txt'}")
    return 1 if any(o.faults for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
