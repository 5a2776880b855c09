"""The run's analysed summary for a figure drawn without one at hand (analysis.model)."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd


def analysed_summary(df: pd.DataFrame, meta: Mapping[str, str]) -> pd.DataFrame:
    """The run's summary, from its one analysis (for a caller that has none at hand)."""
    from gpuipc_bench.analysis.model import analyse

    return analyse(df, meta).summary
