"""The events of a check in the forms fleet tools take: JSON lines, JUnit XML, Prometheus text.

    json        one JSON object a line, one per check: status, node, kind, figure, gpus, measured,
                expected, unit, reason; lane and wrong_lane where the rows carry lanes
    junit       a testsuite per node, a testcase per check; failures as <failure>, skipped paths as
                <skipped>, warnings as a passing case with the warning in <system-out>
    prometheus  the text format of a node exporter's textfile collector: the figures, their
                expectations, each check's status (1 for the status it has), the check's time
    health      one line per node, `{node} | Healthy` or `{node} | DRAIN: <reason>` (the first
                failure, naming its figure), as Azure's node health checks print
    npd         node-problem-detector's custom plugin: one message of at most 80 characters
"""

from __future__ import annotations

import json
import math
from xml.etree import ElementTree as ET

from gpuipc_bench.check.judge import FAIL, SKIP, WARN, Event

STATUSES = ("pass", "warn", "fail", "skip", "measured")


def to_json_lines(events: list[Event]) -> str:
    return "".join(json.dumps(e.as_dict(), ensure_ascii=False, allow_nan=False,
                              default=str) + "\n" for e in _finite(events))


def _finite(events: list[Event]) -> list[Event]:
    for e in events:
        if e.measured is not None and not math.isfinite(e.measured):
            e.measured = None
    return events


def to_junit(events: list[Event]) -> str:
    suites = ET.Element("testsuites", name="gpuipc-bench check")
    by_node: dict[str, list[Event]] = {}
    for e in events:
        by_node.setdefault(e.node, []).append(e)
    for node, items in by_node.items():
        suite = ET.SubElement(suites, "testsuite", name=node, tests=str(len(items)),
                              failures=str(sum(e.status == FAIL for e in items)),
                              skipped=str(sum(e.status == SKIP for e in items)), errors="0")
        for e in items:
            name = e.figure + (f" GPU {e.gpus}" if e.gpus and e.gpus != "host" else "")
            case = ET.SubElement(suite, "testcase", classname=f"{node}.{e.kind}", name=name)
            text = _line(e)
            if e.status == FAIL:
                ET.SubElement(case, "failure", message=text[:500]).text = text
            elif e.status == SKIP:
                ET.SubElement(case, "skipped", message=text[:500])
            elif text:
                ET.SubElement(case, "system-out").text = ("warning: " if e.status == WARN else "") + text
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _line(e: Event) -> str:
    from gpuipc_bench.check.figures import format_value

    parts = []
    if e.measured is not None:
        parts.append(f"measured {format_value(e.measured, e.unit)}")
    if e.expected:
        parts.append(f"expected {e.expected}")
    if e.reason:
        parts.append(e.reason)
    return "; ".join(parts)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_label(str(v))}"' for k, v in labels.items()) + "}"


def to_prometheus(events: list[Event], now: float | None = None) -> str:
    import time

    lines = [
        "# HELP gpuipc_check_timestamp_seconds When this check ended (Unix time): a stale file is an old check.",
        "# TYPE gpuipc_check_timestamp_seconds gauge",
        f"gpuipc_check_timestamp_seconds {time.time() if now is None else now:.3f}",
        "# HELP gpuipc_check_status Outcome of each check of gpuipc-bench check (1 for its status).",
        "# TYPE gpuipc_check_status gauge",
    ]
    for e in events:
        for status in STATUSES:
            labels = _labels(node=e.node, kind=e.kind, check=e.figure, gpus=e.gpus, status=status)
            lines.append(f"gpuipc_check_status{labels} {1 if e.status == status else 0}")
    figures = [e for e in events if e.kind == "figure" and e.measured is not None and math.isfinite(e.measured)]
    lines += ["# HELP gpuipc_check_figure A headline figure as measured (unit in the label: GB/s or us).",
              "# TYPE gpuipc_check_figure gauge"]
    for e in figures:
        lines.append(f"gpuipc_check_figure{_labels(node=e.node, figure=e.figure, gpus=e.gpus, unit=_unit(e.unit))} "
                     f"{e.measured!r}")
    lines += ["# HELP gpuipc_check_expected The edge of the expectation a figure is held to.",
              "# TYPE gpuipc_check_expected gauge"]
    for e in figures:
        if e.expected_value is not None:
            labels = _labels(node=e.node, figure=e.figure, gpus=e.gpus, unit=_unit(e.unit))
            lines.append(f"gpuipc_check_expected{labels} {e.expected_value!r}")
    lines += ["# HELP gpuipc_check_failures Checks that failed, per node.", "# TYPE gpuipc_check_failures gauge"]
    for node in dict.fromkeys(e.node for e in events):
        failed = sum(e.status == FAIL for e in events if e.node == node)
        lines.append(f"gpuipc_check_failures{_labels(node=node)} {failed}")
    return "\n".join(lines) + "\n"


def _unit(unit: str) -> str:
    return unit.replace("µ", "u")


def to_markdown(events: list[Event]) -> str:
    from gpuipc_bench.check.figures import format_value

    laned = any(e.lane for e in events)  # a lane column where the rows carry lanes
    lines = ["| status | node | check | GPUs | measured |" + (" lane |" if laned else "") + " expected | why |",
             "|---|---|---|---|---|" + ("---|" if laned else "") + "---|---|"]
    for e in events:
        measured = format_value(e.measured, e.unit) if e.measured is not None else ""
        cells = [e.status, e.node, f"{e.kind} {e.figure}", e.gpus, measured, *([e.lane] if laned else []),
                 e.expected, e.reason]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def render_terminal(events: list[Event], console) -> None:
    """One line per check (status, what, GPUs, measured, expected), its reason wrapped below it at the
    terminal's width: at 80 columns a table's last column would be a dozen characters wide."""
    import textwrap

    from rich.markup import escape

    from gpuipc_bench.check.figures import format_value

    colour = {"pass": "green", "fail": "bold red", "warn": "yellow", "skip": "dim", "measured": "cyan"}
    order = {"fail": 0, "warn": 1, "pass": 2, "measured": 3, "skip": 4}
    nodes = sorted({e.node for e in events})
    console.print("[bold]gpuipc-bench check[/]" + (f" · node {escape(nodes[0])}" if len(nodes) == 1 else
                                                   f" · {len(nodes)} nodes"), soft_wrap=True)
    width = max(40, (console.width or 80) - 1)
    for e in sorted(events, key=lambda e: (order.get(e.status, 4), e.node)):
        what = f"{e.kind} {e.figure}" + (" host" if e.gpus == "host" else f" GPU {e.gpus}" if e.gpus else "")
        if len(nodes) > 1:
            what = f"{e.node}: {what}"
        measured = format_value(e.measured, e.unit) if e.measured is not None else ""
        measured += f", lane {e.lane}" if e.lane else ""
        status = f"[{colour.get(e.status, '')}]{e.status:<8}[/]"
        console.print(f"{status}  {escape(what):<28} {escape(measured)}".rstrip(), soft_wrap=True, highlight=False)
        detail = [f"expected {e.expected}"] if e.expected and e.expected not in e.reason else []
        for text in detail + [e.reason.strip()]:
            for line in textwrap.wrap(text, width - 10):
                console.print(" " * 10 + escape(line), soft_wrap=True, highlight=False)


def failure_reason(events: list[Event], width: int = 80) -> str:
    """The first failure in words that name its check, cut to `width` ('' when nothing failed)."""
    from gpuipc_bench.check.figures import format_value

    failed = [e for e in events if e.status == FAIL]
    if not failed:
        return ""
    e = failed[0]
    text = f"{e.kind} {e.figure}" + (" host" if e.gpus == "host" else f" GPU {e.gpus}" if e.gpus else "")
    if e.wrong_lane:  # what went wrong says more than the figure
        text += f": {e.wrong_lane}"
    elif e.measured is not None:
        text += f" {format_value(e.measured, e.unit)}"
        if e.expected:
            text += f", expected {e.expected}"
    elif e.reason:
        text += f": {e.reason}"
    if len(failed) > 1:
        text += f" (+{len(failed) - 1} more)"
    return text if len(text) <= width else text[:width - 3] + "..."


def to_health(events: list[Event], nodes: list[str]) -> str:
    """`{node} | Healthy` or `{node} | DRAIN: <reason>` for each node, each line 80 columns at most."""
    lines = []
    for node in nodes:
        reason = failure_reason([e for e in events if e.node == node], 80 - len(node) - len(" | DRAIN: "))
        lines.append(f"{node} | DRAIN: {reason}" if reason else f"{node} | Healthy")
    return "\n".join(lines) + "\n"


def to_npd(events: list[Event], nodes: list[str]) -> str:
    """node-problem-detector's custom plugin message: one line of at most 80 characters."""
    reason = failure_reason(events, 80 - len("gpuipc-bench: "))
    if reason:
        return f"gpuipc-bench: {reason}\n"
    return ("gpuipc-bench: healthy" + (f" ({len(nodes)} nodes)" if len(nodes) > 1 else ""))[:80] + "\n"


def write_atomically(path, text: str) -> None:
    """`text` into `path` through a temporary file in the same folder and a rename: a reader (a
    node exporter's textfile collector) sees the old file or the new one, never half of one."""
    import os
    import tempfile
    from pathlib import Path

    target = Path(os.path.realpath(path))
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
