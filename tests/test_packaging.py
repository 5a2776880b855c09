"""The scenario modules import the same way from a checkout and from a built wheel."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PROBE = "import gpuipc_bench.scenarios as s; print(s.__file__); print(','.join(s.SCENARIOS))"


def _python(code: str, cwd: Path, pythonpath: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": pythonpath}
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_checkout_on_pythonpath(tmp_path):
    where, names = _python(PROBE, tmp_path, str(REPO))
    assert Path(where).parent == REPO / "scenarios"
    assert "host" in names.split(",")


def test_built_wheel(tmp_path):
    wheels = tmp_path / "wheels"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(REPO)],
                           capture_output=True, text=True, timeout=600)
    if build.returncode != 0 and "Could not" in build.stderr:
        pytest.skip(f"cannot build a wheel here: {build.stderr.strip().splitlines()[-1]}")
    assert build.returncode == 0, build.stderr
    (wheel,) = wheels.glob("gpuipc_bench-*.whl")
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, timeout=300)
    # Dependencies (click, pandas, ...) come from this interpreter's site-packages; the package from the wheel.
    deps = [p for p in sys.path if p.endswith("site-packages")]
    where, names = _python(PROBE, tmp_path, os.pathsep.join([str(target), *deps]))
    assert Path(where).parent == target / "gpuipc_bench" / "scenarios"
    assert "host" in names.split(",")
    # every package of the checkout is in the wheel (pyproject.toml lists them one by one)
    packages = {p.parent.relative_to(REPO) for p in (REPO / "gpuipc_bench").rglob("__init__.py")}
    missing = sorted(str(p) for p in packages if not (target / p / "__init__.py").exists())
    assert not missing, f"packages missing from the wheel (pyproject.toml's packages list): {missing}"
