"""The fleet page's figures (FLEET_RENDERERS): `gpuipc-bench check` on the GPU machines, from its CSVs,
its fleet tables (the `.md` files it wrote) and the time and exit code results/README.md lists."""

from __future__ import annotations

import re
from collections.abc import Callable

from readme_lib import RESULTS, FigureError, Runs, num, source

CHECKS = (("h100-check", "one H100"), ("h200x2-check", "two H200s over NV18"))


def listed_check(name: str) -> tuple[float, int]:
    """The seconds and exit code results/README.md lists for a check run: `(13.0 s, exit 0)`."""
    for row in (RESULTS / "README.md").read_text().splitlines():
        if row.startswith("| ") and f"`{name}`" in row.split(" | ")[0]:
            found = re.search(r"\((\d+(?:\.\d+)?) s, exit (\d+)", row)
            if found:
                return float(found.group(1)), int(found.group(2))
    raise FigureError(f"results/README.md lists no time and exit code for {name}")


def nixl_read(runs: Runs, name: str) -> str:
    frame = runs[name].frame
    part = frame[(frame["path"] == "nixl") & (frame["variant"] == "read") & (frame["metric"] == "bandwidth")]
    part = part[part["bytes"] == part["bytes"].max()]
    if part.empty:
        raise FigureError(f"{name}: no NIXL READ rows")
    said = ", ".join(dict.fromkeys(t for t in part["transport"] if t))
    return f"{num(float(part['bandwidth_gbps'].median()))} GB/s over {said}"


def check_runs(runs: Runs) -> str:
    parts = []
    for stem, machine in CHECKS:
        seconds, code = listed_check(f"{stem}.csv")
        meta = runs[f"{stem}.csv"].meta
        parts.append(f"On {machine} `gpuipc-bench check` took {num(seconds, 1)} s and exited {code} "
                     f"(`results/{stem}.csv`, status `{meta.get('status', '?')}`; NIXL's READ of 256 MiB: "
                     f"{nixl_read(runs, f'{stem}.csv')}). Its fleet table (`--table`, `results/{stem}.md`):\n\n"
                     + runs.text(f"{stem}.md").strip())
    names = [f"{stem}.{ext}" for stem, _ in CHECKS for ext in ("csv", "md")]
    return "\n\n".join(parts) + "\n\n" + source(*names, note="; the time and exit code as `results/README.md` "
                                                "lists them")


FLEET_RENDERERS: dict[str, Callable[[Runs], str]] = {"check-runs": check_runs}
