"""Per-scope statistics of aggregate launches (``aggregate=on``), as a table and as text.

The rows of ``tables.aggregate_frame`` (one per launch, CTA, unit and scope) add up per
(host scope, kernel, launch name, scope): counts, sums and histograms add, minima and maxima
are taken. The median and p90 come from the summed histogram: the bin that holds the rank,
and a linear guess inside it, kept within the scope's min and max. They are estimates at the
resolution of log2 bins (a duration of 1000 cycles is known to lie in [512, 1024)), not the
exact values a trace gives; the text says so.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from proton_ik.contract.layout import HISTOGRAM_LOWER, HISTOGRAM_UPPER
from proton_ik.viewer.summary.text_columns import formatted
from proton_ik.viewer.tables import HIST_COLUMNS

KEYS = ["host_scope", "kernel", "name", "scope"]
AGGREGATE_SCOPE_COLUMNS = (
    *KEYS, "line", "units", "count", "mean_ns", "min_ns", "max_ns", "median_ns", "p90_ns", "mean_cycles",
    "min_cycles", "max_cycles", "median_cycles", "p90_cycles", "total_ns",
)  # fmt: skip
ESTIMATE_NOTE = "median and p90 are estimates at the resolution of log2 histogram bins"


def histogram_quantile(bins: np.ndarray, q: float, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """The ``q`` quantile of each row's histogram (rows of ``HISTOGRAM_BINS`` counts), in cycles:
    found in the bin that holds rank ``q * count``, spread evenly over that bin, and kept within
    ``low`` and ``high`` (the row's min and max); NaN where a row counts nothing."""
    bins = np.asarray(bins, dtype=np.int64)
    count = bins.sum(axis=1)
    rank = q * count
    cumulative = np.cumsum(bins, axis=1)
    # The first bin whose cumulative count passes the rank (the last non-empty one for q = 1).
    b = np.minimum((cumulative <= rank[:, None]).sum(axis=1), bins.shape[1] - 1)
    rows = np.arange(len(bins))
    held = np.maximum(bins[rows, b], 1)
    fraction = np.clip((rank - (cumulative[rows, b] - bins[rows, b])) / held, 0.0, 1.0)
    guess = HISTOGRAM_LOWER[b] + fraction * (HISTOGRAM_UPPER[b] - HISTOGRAM_LOWER[b])
    guess = np.clip(guess, np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64))
    return np.where(count > 0, guess, np.nan)


def summarize_aggregates(table: pd.DataFrame, shift_cycles: int) -> pd.DataFrame:
    """One row per (host scope, kernel, launch name, scope) of an aggregate table. Cycles have the
    calibrated ``shift_cycles`` taken off each duration, as the table's ``*_cycles`` columns do;
    nanoseconds use the mean SM clock of the scope's durations."""
    counted = table[table["count"] > 0] if len(table) else table
    if not len(counted):
        return pd.DataFrame({name: pd.Series(dtype=object) for name in AGGREGATE_SCOPE_COLUMNS})
    frame = counted.assign(
        **{key: counted[key].astype(str) for key in KEYS},
        timed_count=np.where(counted["ns_per_cycle"].notna(), counted["count"], 0),
        weighted_rate=counted["ns_per_cycle"].fillna(0.0) * counted["count"],
    )
    grouped = frame.groupby(KEYS, sort=True)
    stats = grouped.agg(
        line=("line", "first"),
        units=("count", "size"),
        count=("count", "sum"),
        sum_cycles=("sum_cycles", "sum"),
        min_cycles=("min_cycles", "min"),
        max_cycles=("max_cycles", "max"),
        min_raw=("min_cycles_raw", "min"),
        max_raw=("max_cycles_raw", "max"),
        min_ns=("min_ns", "min"),
        max_ns=("max_ns", "max"),
        total_ns=("sum_ns", "sum"),
        timed_count=("timed_count", "sum"),
        weighted_rate=("weighted_rate", "sum"),
    )
    bins = grouped[list(HIST_COLUMNS)].sum().to_numpy(np.int64)
    rate = stats["weighted_rate"] / stats["timed_count"].where(stats["timed_count"] > 0)
    low, high = stats["min_raw"].to_numpy(np.float64), stats["max_raw"].to_numpy(np.float64)
    out = stats[["line", "units", "count"]].copy()
    out["mean_cycles"] = stats["sum_cycles"] / stats["count"]
    out["min_cycles"] = stats["min_cycles"]
    out["max_cycles"] = stats["max_cycles"]
    for label, q in (("median", 0.5), ("p90", 0.9)):
        raw = histogram_quantile(bins, q, low, high)
        out[f"{label}_cycles"] = np.maximum(raw - shift_cycles, 0.0)
    out["mean_ns"] = out["mean_cycles"] * rate
    out["min_ns"] = stats["min_ns"]
    out["max_ns"] = stats["max_ns"]
    out["median_ns"] = out["median_cycles"] * rate
    out["p90_ns"] = out["p90_cycles"] * rate
    out["total_ns"] = stats["total_ns"]
    return out.reset_index()[list(AGGREGATE_SCOPE_COLUMNS)]


def aggregate_lines(rows: pd.DataFrame) -> list[str]:
    """One kernel's aggregate scopes as a text table (launch names shown where they differ from
    the kernel's), under a line that says what the numbers are."""
    if not len(rows):
        return []
    named = (rows["name"] != rows["kernel"]).any()
    shown = pd.DataFrame(
        {
            **({"name": rows["name"]} if named else {}),
            "scope": rows["scope"],
            "line": rows["line"].astype("Int64").astype("string").fillna("-"),
            "count": rows["count"],
            "units": rows["units"],
            "mean ns": formatted(rows["mean_ns"], "{:,.0f}"),
            "min ns": formatted(rows["min_ns"], "{:,.0f}"),
            "max ns": formatted(rows["max_ns"], "{:,.0f}"),
            "~median ns": formatted(rows["median_ns"], "{:,.0f}"),
            "~p90 ns": formatted(rows["p90_ns"], "{:,.0f}"),
            "mean cyc": formatted(rows["mean_cycles"], "{:,.0f}"),
            "min cyc": formatted(rows["min_cycles"], "{:,.0f}"),
            "max cyc": formatted(rows["max_cycles"], "{:,.0f}"),
        }
    )
    header = (
        "aggregate statistics per scope, over all units (aggregate=on: no events, so trace files "
        f"show these launches' unit spans only; {ESTIMATE_NOTE}):"
    )
    return [header, *shown.to_string(index=False).splitlines()]
