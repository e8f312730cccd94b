"""Numbers as the summaries print them: one format for a column, "-" where a value is missing."""

from __future__ import annotations

import pandas as pd


def formatted(values: pd.Series, spec: str) -> pd.Series:
    """``values`` formatted by ``spec`` (``"{:,.0f}"``), "-" for NA."""
    return values.map(lambda value: "-" if pd.isna(value) else spec.format(value))
