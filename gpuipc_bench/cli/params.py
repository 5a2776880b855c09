"""The command line's parameter types: numbers within bounds, byte sizes, GPUs, GPU pairs.
Each rejects bad input with a message naming the option."""

from __future__ import annotations

import re

import click

from gpuipc_bench.config import BOUNDS, bound_problem
from gpuipc_bench.errors import UsageError
from gpuipc_bench.sizes import parse_sizes


class Bounded(click.ParamType):
    """A number within config.BOUNDS[bound]: one message for too small, too large, NaN or
    not a number. A new bounded option is a line in BOUNDS and `type=Bounded("name")`."""

    def __init__(self, bound: str, kind: type = int):
        self.bound, self.kind = bound, kind
        low, high, _ = BOUNDS[bound]
        self.name = f"{low:g}..{high:g}"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = value
        else:
            try:
                number = self.kind(str(value).strip())
            except (ValueError, OverflowError):
                self.fail(f"{value!r} is not a {'whole number' if self.kind is int else 'number'}", param, ctx)
        problem = bound_problem(self.bound, number)
        if problem:
            self.fail(problem, param, ctx)
        return number


class SizesType(click.ParamType):
    name = "SIZES"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            return parse_sizes(value)
        except UsageError as e:
            self.fail(str(e), param, ctx)


# A GPU or MIG instance by UUID: GPU-<uuid>, MIG-<uuid>, or the older MIG-GPU-<uuid>/<gi>/<ci>.
UUID_RE = re.compile(r"^(GPU|MIG)-[0-9A-Za-z/-]+$")



class DevicesType(click.ParamType):
    name = "DEVICES"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        items = [item.strip() for item in str(value).split(",")]
        if all(UUID_RE.match(item) for item in items):
            if len(set(items)) != len(items):
                self.fail(f"'{value}' names a device twice", param, ctx)
            return tuple(items)
        try:
            devices = tuple(int(item) for item in items)
        except ValueError:
            self.fail(f"'{value}' is not a comma-separated list of GPU indices (e.g. 0 or 0,1) "
                      "or of GPU/MIG UUIDs (see gpuipc-bench info)", param, ctx)
        if any(d < 0 for d in devices):
            self.fail(f"'{value}': GPU indices start at 0", param, ctx)
        if len(set(devices)) != len(devices):
            self.fail(f"'{value}' names a GPU twice", param, ctx)
        return devices


class PairsType(click.ParamType):
    """--pairs: 'all', or ordered GPU pairs 'A-B' separated by commas ('0-1,1-0,0-2')."""

    name = "PAIRS"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple) or value == "all":
            return value
        pairs = []
        for item in str(value).split(","):
            a, sep, b = item.strip().partition("-")
            if not sep or not a.isdigit() or not b.isdigit():
                self.fail(f"'{item.strip()}' is not a pair of GPU indices like 0-1 (or give 'all')", param, ctx)
            if a == b:
                self.fail(f"'{item.strip()}' names one GPU twice: a pair is two GPUs", param, ctx)
            pairs.append((int(a), int(b)))
        if len(set(pairs)) != len(pairs):
            self.fail(f"'{value}' names a pair twice", param, ctx)
        return tuple(pairs)

