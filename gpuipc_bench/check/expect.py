"""Expectations: what each figure should be on each model of machine, learned from healthy runs.

A model is what decides a figure: the GPU name and its PCIe link (generation and width, the
maximum the card trains to) for a figure of one GPU; the same plus the link between them
('NV18', 'PIX', ...) for a pair; the CPU model for the host path. A host is one machine of
a reference (its GPUs' UUIDs, else its host name). Each figure of a model keeps:

    low, high   the range of the hosts' medians (low == high with one host)
    hosts       how many hosts it comes from: with 2 or more the range is a band that fails,
                with one it is a single-host reference that only warns (hosts of one model
                differ: 55.0 and 47.6 GB/s host-to-device on two H100 hosts)
    of_ceiling  the figure as a fraction of its own ceiling in the same run (a path's figure)
    sources     the files (and nodes); `older` names those of schema 2 (the previous method)

The file also lists, per GPU name and count ('NVIDIA H100 80GB HBM3 x2'), the paths that ran
there (a path that cannot work here fails only where the model says it works), and a default
tolerance. `check --learn FILE CSV...` writes one; `--expect FILE` reads one; without it the
references shipped with the tool (learned from results/) apply.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any, Iterable

from gpuipc_bench.check.figures import Figure, figures_of, outside
from gpuipc_bench.errors import UsageError

FORMAT = "gpuipc-bench expectations"
VERSION = 1
TOLERANCE = 0.10
MIN_SCHEMA = 2  # schema 1 files measured with the first method (L2-hot copies): not fit
REFERENCES = Path(__file__).with_name("references.json")


@dataclasses.dataclass(frozen=True)
class Expectation:
    model: str
    figure: str
    unit: str
    low: float
    high: float
    hosts: int
    of_ceiling: float | None = None
    sources: tuple[str, ...] = ()
    older: tuple[str, ...] = ()  # sources measured with the previous method (schema 2)

    @property
    def band(self) -> bool:
        return self.hosts >= 2

    def text(self) -> str:
        from gpuipc_bench.check.figures import format_value

        span = format_value(self.low, self.unit) if self.low == self.high else \
            f"{format_value(self.low, self.unit).split()[0]}-{format_value(self.high, self.unit)}"
        kind = f"band of {self.hosts} hosts" if self.band else "one host"
        return f"{span} ({kind}{'; older method' if self.older else ''})"


@dataclasses.dataclass
class Expectations:
    entries: dict[tuple[str, str], Expectation]
    paths: dict[str, list[str]]
    tolerance: float = TOLERANCE
    source: str = ""

    def get(self, model: str, figure: str) -> Expectation | None:
        return self.entries.get((model, figure))

    def path_works(self, shape: str, path: str) -> bool:
        return path in self.paths.get(shape, ())

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "tolerance": self.tolerance,
                "expectations": [_entry_json(e) for e in sorted(self.entries.values(),
                                                                 key=lambda e: (e.model, e.figure))],
                "paths": {k: sorted(v) for k, v in sorted(self.paths.items())}}


def _entry_json(e: Expectation) -> dict[str, Any]:
    out = dataclasses.asdict(e)
    out["sources"], out["older"] = list(e.sources), list(e.older)
    return out


# ---------------------------------------------------------------- models


def _pcie(facts: dict[str, str], gpu: str) -> str:
    text = facts.get(f"gpu.{gpu}.pcie", "")
    return text.split("(max", 1)[1].rstrip(") ").strip() if "(max" in text else text.strip()


def gpu_model(facts: dict[str, str], gpu: str) -> str:
    return f"{facts.get(f'gpu.{gpu}.name', '?')}, PCIe {_pcie(facts, gpu) or '?'}"


def model_of(facts: dict[str, str], gpus: str) -> str:
    """The model a figure of these GPUs is judged by ('host', '0' or '0>1')."""
    if gpus == "host":
        return f"CPU {facts.get('cpu', '?')}"
    if ">" in gpus:
        a, b = gpus.split(">", 1)
        link = facts.get(f"link.{min(a, b)}-{max(a, b)}", "?")
        ends = gpu_model(facts, a) if gpu_model(facts, a) == gpu_model(facts, b) else \
            f"{gpu_model(facts, a)} + {gpu_model(facts, b)}"
        return f"{ends}, link {link}"
    return gpu_model(facts, gpus)


def shape_of(facts: dict[str, str]) -> str:
    """The GPU name and count of a node ('NVIDIA H100 80GB HBM3 x2'), '' without a GPU."""
    count = int(facts.get("gpu_count", "0") or 0)
    return f"{facts.get('gpu.0.name', '?')} x{count}" if count else ""


def _host_id(facts: dict[str, str], source: str) -> str:
    """A machine: its GPUs' UUIDs, else its host name (two runs of one node are one host)."""
    uuids = sorted(v for k, v in facts.items() if k.startswith("gpu.") and k.endswith(".uuid") and v)
    return ",".join(uuids) or facts.get("host", "") or source


# ---------------------------------------------------------------- learning


def node_views(frame, meta: dict[str, str], label: str) -> Iterable[tuple[str, Any, dict[str, str]]]:
    """(source label, rows, facts) per node of a results file: a fleet CSV of `check` holds
    every node's facts as 'node.<name>.<key>'; any other file is one node."""
    nodes = [n for n in meta.get("check.nodes", "").split(",") if n]
    if not nodes:
        yield label, frame, meta
        return
    for node in nodes:
        prefix = f"node.{node}."
        facts = {k[len(prefix):]: v for k, v in meta.items() if k.startswith(prefix)}
        yield f"{label}:{node}", frame[frame["node"] == node], facts


def status_list(status: str, label: str) -> set[str]:
    """The names a run's status lists after `label` ('completed: a,b; failed nodes: c' -> {'c'})."""
    found = set()
    for part in status.split(";"):
        part = part.strip()
        if part.startswith(label):
            found |= {n.strip() for n in part[len(label):].split(",") if n.strip()}
    return found


def unhealthy(meta: dict[str, str]) -> tuple[str, set[str]]:
    """What makes a run unfit to learn from as a whole ('' if nothing), and its failed nodes: a
    partial or interrupted run, a run that lists failed or missing nodes."""
    status = meta.get("status", "")
    failed = status_list(status, "failed nodes:")
    failed |= {n for n in meta.get("check.missing", "").split(",") if n}
    why = []
    if meta.get("partial") == "true" or not status.startswith("complete"):
        why.append(f"a partial run (status: {status or '?'})")
    if failed:
        why.append(f"failed nodes {','.join(sorted(failed))}")
    return " with ".join(why), failed


def learn(files: list[Path], tolerance: float = TOLERANCE, partial: bool = False) -> Expectations:
    """Expectations from healthy runs' CSVs (refs. or a fleet run of `check`). A run that is
    partial or lists failed nodes is refused, unless `partial`: then its nodes that passed are
    learned from. Of three hosts or more, a host whose median is an outlier (figures.outside) is
    left out of the band."""
    from gpuipc_bench.results import read_results

    per_host: dict[tuple[str, str], dict[str, list[tuple[Figure, str, int]]]] = {}
    paths: dict[str, set[str]] = {}
    for path in files:
        frame, meta = read_results(path)
        schema = int(meta.get("schema_version", "0") or 0)
        if schema < MIN_SCHEMA:
            raise UsageError(f"--learn {path}: schema {schema} (the first method's, L2-hot copies) is not fit "
                             f"for expectations; use files of schema {MIN_SCHEMA} or later")
        why, failed = unhealthy(meta) if meta.get("check.nodes") else ("", set())
        if why and not partial:
            raise UsageError(f"--learn {path}: {why}; learn from healthy runs, or give --learn-partial to learn "
                             "from its nodes that passed")
        for label, rows, facts in node_views(frame, meta, Path(path).name):
            if label.rpartition(":")[2] in failed:
                continue
            host = _host_id(facts, label)
            for figure in figures_of(rows):
                key = (model_of(facts, figure.gpus), figure.name)
                per_host.setdefault(key, {}).setdefault(host, []).append((figure, label, schema))
            shape = shape_of(facts)
            if shape:
                paths.setdefault(shape, set()).update(_paths_that_ran(facts))
    if not per_host:
        raise UsageError("--learn: the files hold none of the check's figures (h2d, d2d, host-memcpy, ...)")
    entries = {key: _expectation(key, hosts) for key, hosts in per_host.items()}
    return Expectations(entries, {k: sorted(v) for k, v in paths.items()}, tolerance,
                        ", ".join(str(f) for f in files))


def _paths_that_ran(facts: dict[str, str]) -> set[str]:
    done = status_list(facts.get("status", ""), "completed:")
    for part in facts.get("check.paths_passed", "").split(","):
        if part.strip():
            done.add(part.strip())
    if "mps" in facts.get("sharing.modes", "").split(",") and "sharing" in done:
        done.add("mps")
    return done


def _expectation(key: tuple[str, str], hosts: dict[str, list[tuple[Figure, str, int]]]) -> Expectation:
    medians, ratios, sources, older = [], [], [], []
    of_host = {h: statistics.median(f.value for f, _, _ in figures) for h, figures in hosts.items()}
    if len(hosts) >= 3:  # an outlier host (a noisy one) does not widen the band
        hosts = {h: figures for h, figures in hosts.items() if not outside(of_host[h], list(of_host.values()))}
    for figures in hosts.values():
        medians.append(statistics.median(f.value for f, _, _ in figures))
        ratios += [f.value / f.ceiling for f, _, _ in figures if f.ceiling]
        for _, label, schema in figures:
            if label not in sources:
                sources.append(label)
            if schema < 3 and label not in older:
                older.append(label)
    unit = next(iter(hosts.values()))[0][0].unit
    return Expectation(key[0], key[1], unit, round(min(medians), 4), round(max(medians), 4), len(hosts),
                       round(statistics.median(ratios), 4) if ratios else None, tuple(sources), tuple(older))


# ---------------------------------------------------------------- files


def save(expectations: Expectations, path: Path) -> None:
    Path(path).write_text(json.dumps(expectations.to_json(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def load(path: Path | None = None) -> Expectations:
    """An expectations file (UsageError, one line, for anything wrong with it); None: the shipped references."""
    where = Path(path) if path is not None else REFERENCES
    option = f"--expect {where}" if path is not None else f"the shipped references {where}"
    try:
        data = json.loads(where.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{option}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{option}: cannot be read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{option}: not JSON ({exc.msg} at line {exc.lineno})") from None
    return parse(data, option)


def parse(data: Any, option: str = "expectations") -> Expectations:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UsageError(f"{option}: not an expectations file (its 'format' must be {FORMAT!r}; "
                         "`gpuipc-bench check --learn` writes one)")
    if data.get("version") != VERSION:
        raise UsageError(f"{option}: version {data.get('version')!r}, this tool reads version {VERSION}")
    entries = {}
    for k, item in enumerate(data.get("expectations", [])):
        try:
            e = Expectation(str(item["model"]), str(item["figure"]), str(item["unit"]), float(item["low"]),
                            float(item["high"]), int(item["hosts"]),
                            None if item.get("of_ceiling") is None else float(item["of_ceiling"]),
                            tuple(item.get("sources", ())), tuple(item.get("older", ())))
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{option}: expectation {k + 1} is malformed ({type(exc).__name__}: {exc})") from None
        if not (0 < e.low <= e.high) or e.hosts < 1:
            raise UsageError(f"{option}: expectation {k + 1} ({e.figure}) needs 0 < low <= high and hosts >= 1")
        entries[(e.model, e.figure)] = e
    paths = data.get("paths", {})
    if not isinstance(paths, dict) or not all(isinstance(v, list) for v in paths.values()):
        raise UsageError(f"{option}: 'paths' must map a GPU name and count to a list of paths")
    tolerance = data.get("tolerance", TOLERANCE)
    if not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 1:
        raise UsageError(f"{option}: tolerance must be a fraction from 0 to 1 (got {tolerance!r})")
    return Expectations(entries, {str(k): [str(p) for p in v] for k, v in paths.items()}, float(tolerance),
                        option)
