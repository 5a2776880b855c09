"""gpuipc-bench: which way of moving data between processes on one GPU node is fastest."""

import os as _os

__version__ = "0.1.0"

# In a source checkout the scenario modules sit in the top-level scenarios/
# folder; a wheel installs them as gpuipc_bench/scenarios (see pyproject's
# package-dir). Let `import gpuipc_bench.scenarios` find the checkout's folder
# when the package is imported straight from the checkout (PYTHONPATH=.).
_checkout = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if not _os.path.isdir(_os.path.join(_os.path.dirname(__file__), "scenarios")) and _os.path.isfile(
    _os.path.join(_checkout, "scenarios", "__init__.py")
):
    __path__.append(_checkout)  # type: ignore[name-defined]  # noqa: F821
