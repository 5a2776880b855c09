"""The CSV header of a run: the tool, the command, the sample counts, the machine and the paths' facts."""

from __future__ import annotations

import datetime
import shlex
import sys

from gpuipc_bench import __version__
from gpuipc_bench.config import RunConfig
from gpuipc_bench.harness.plan import registry


def run_header(config: RunConfig, machine) -> dict[str, str]:
    from gpuipc_bench.results import SCHEMA_VERSION

    meta = {
        "tool_version": __version__,
        "schema_version": str(SCHEMA_VERSION),
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "gpuipc-bench " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "scenarios": ",".join(config.scenarios),
        "min_samples": str(config.min_samples),
        "max_samples": str(config.max_samples),
        "warmup": str(config.warmup),
        "chunk_bytes": str(config.chunk_bytes),
        "timeout": f"{config.timeout:g}",
    }
    meta["preset"] = config.preset or "default"
    meta.update(resolved_sizes(config))
    meta["sample_order"] = config.sample_order  # the variants' order at each size (Sampler.interleave)
    if config.order_seed is not None:
        meta["order_seed"] = str(config.order_seed)
    if config.replicas > 1:
        meta["replicas"] = str(config.replicas)  # every run measured on this many process sets (replica column)
    if config.sharing:
        meta["sharing.modes"] = ",".join(config.sharing)  # each same-GPU pair scenario ran once per mode
    meta.update(machine.metadata())
    meta.update(path_facts())
    return meta


def resolved_sizes(config: RunConfig) -> dict[str, str]:
    """'sizes.<scenario>': the byte sizes each scenario of the run sweeps (--sizes or its default)."""
    scenarios = registry()
    return {f"sizes.{name}": ",".join(str(n) for n in scenarios[name].sizes(config))
            for name in config.scenarios if name in scenarios}


def path_facts() -> dict[str, str]:
    """The facts of every path the registry knows, for the CSV header (gpuipc_bench.paths)."""
    from gpuipc_bench.paths import CEILING, to_metadata

    return to_metadata([p for s in registry().values() for p in s.paths] + [CEILING])
