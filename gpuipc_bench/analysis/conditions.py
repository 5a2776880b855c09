"""The vocabulary every part of the analysis shares: what identifies a figure (a condition),
links and their order, labels, ceiling keys. No statistics and no pandas beyond reading a
value; every other module of the package may import this one, and it imports none of them.
"""

from __future__ import annotations

import collections
import math
import operator
from typing import Any

import numpy as np
import pandas as pd

# Everything that identifies a condition: two rows that differ in any of these are two figures.
# (Whether a sample's buffers could stay in L2 is a property of the sample, aggregated per
# condition: summary.py.)
CONDITION_KEYS: tuple[str, ...] = (
    "scenario", "path", "variant", "measure", "metric", "src", "dst", "bytes", "workers", "sharing", "ceiling",
)

ABOVE_CEILING = 1.05  # a figure this far above its ceiling is a cache effect or a timing error

# A scenario of that name measures only ceilings: its rows bound every scenario's figures
# that name them when the scenario measured none itself.
CEILING_SCENARIO = "ceiling"
# Who measured a ceiling, when a scenario measures it in both processes.
ROLE_SUFFIXES = ("/producer", "/consumer")


def with_mps_shares(df: pd.DataFrame) -> pd.DataFrame:
    """The frame with each row's sharing mode as a condition keys it, its MPS share included: a
    row of 'mps' whose mps_thread_pct is below 100 says 'mps:25' (the --sharing value that measured
    it), and beside a busy neighbour 'mps:25+copy'. The CSV keeps the share in its own column, and
    'mps' rows at every share would otherwise be one figure. The frame itself where no row has a
    share (every committed run without one reads as it did)."""
    if "mps_thread_pct" not in df.columns or "sharing" not in df.columns:
        return df
    pct = pd.to_numeric(df["mps_thread_pct"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    below = np.less(pct, 100, where=~np.isnan(pct), out=np.zeros(len(pct), dtype=bool))
    if not below.any():
        return df
    sharing = df["sharing"].astype(str).to_numpy(dtype=object)
    keyed = False
    for i in np.flatnonzero(below):
        mode, plus, neighbour = sharing[i].partition("+")
        if mode == "mps":  # not yet keyed ('mps:25' is)
            sharing[i] = f"mps:{int(pct[i])}{plus}{neighbour}"
            keyed = True
    return df.assign(sharing=sharing) if keyed else df


def key_value(value):
    """A frame's value as a plain, hashable Python value (None for missing)."""
    if type(value) is str or type(value) is int:  # most of them: already plain (a bool is no int here)
        return value
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


_ROW_TYPES: dict[tuple, Any] = {}  # namedtuple types by their fields


def records(frame: pd.DataFrame) -> list:
    """frame.itertuples(index=False) as a list: the same rows of the same values (each column
    iterated as a Series), without itertuples' cost of a column selection and a new namedtuple
    type per call (a report reads the summary's rows a few hundred times)."""
    fields = tuple(frame.columns)
    if not frame.columns.is_unique:
        return list(frame.itertuples(index=False))
    row_type: Any = _ROW_TYPES.get(fields)
    if row_type is None:
        row_type = _ROW_TYPES[fields] = collections.namedtuple("Pandas", fields, rename=True)
    return list(map(row_type._make, zip(*(column_values(frame[c]) for c in fields))))


def column_values(column: pd.Series):
    """A column's values as iterating it gives them, fetched at once rather than one by one (the
    bulk of records' cost): a numpy column's as tolist gives them (iterating takes item() of
    each), a string column's from one object array (the same objects)."""
    if isinstance(column.dtype, np.dtype):
        return column.to_numpy().tolist()
    return column.to_numpy(dtype=object) if isinstance(column.dtype, pd.StringDtype) else column


def condition(row) -> tuple:
    """The CONDITION_KEYS values of a summary row (a namedtuple or a Series), as a dict key."""
    if hasattr(row, "get"):
        return tuple(key_value(row.get(k)) for k in CONDITION_KEYS)
    return tuple(map(key_value, _condition_of(row)))


_condition_of = operator.attrgetter(*CONDITION_KEYS)


def conditions_of(frame: pd.DataFrame) -> list[tuple]:
    """condition() of each row of a frame, its CONDITION_KEYS columns read at once."""
    return [tuple(map(key_value, values)) for values in zip(*(column_values(frame[k]) for k in CONDITION_KEYS))]


def is_gpu(device: str) -> bool:
    return str(device).isdigit()


def link_rank(src: str, dst: str) -> tuple:
    """Sort key of a link: GPU -> GPU first, then host -> GPU, GPU -> host, host -> host."""
    kind = (not is_gpu(src)) * 1 + (not is_gpu(dst)) * 2
    return (kind, int(src) if is_gpu(src) else -1, int(dst) if is_gpu(dst) else -1, str(src), str(dst))


def label(path: str, variant: str) -> str:
    return f"{path}/{variant}"


def ceiling_base(key: str) -> str:
    """A ceiling key without who measured it: 'd2d@0/producer' -> 'd2d@0'."""
    key = str(key or "")
    for suffix in ROLE_SUFFIXES:
        if key.endswith(suffix):
            return key[: -len(suffix)]
    return key


def one_hop(key: str) -> bool:
    """Whether a ceiling key names one copy (not two hops 'a+b' or 'a|b')."""
    return bool(key) and "+" not in key and "|" not in key
