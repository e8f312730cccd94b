"""Latency statistics of events (``pl.start_event`` to ``pl.end_event``), as a table and as text.

One row per (kernel, event): how many started and ended (``count``, each ending warp's end
counted once), the mean, median, p90 and p99 of their durations in nanoseconds and cycles, and
how many records found no partner (``no_end``: starts never ended, ``no_start``: ends never
started). Unmatched records are never dropped: an event whose every start was lost still has
its row.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from proton_ik.viewer.pairing import MATCHED, NO_END, NO_START, STATUSES
from proton_ik.viewer.summary.text_columns import formatted

EVENT_STAT_COLUMNS = (
    "kernel", "event", "line", "count", "mean_ns", "median_ns", "p90_ns", "p99_ns", "mean_cycles", "median_cycles",
    "p90_cycles", "p99_cycles", "no_end", "no_start",
)  # fmt: skip


def summarize_events(async_events: pd.DataFrame) -> pd.DataFrame:
    """The statistics of ``Trace.async_events`` (``EVENT_STAT_COLUMNS``), by kernel and event."""
    if not len(async_events):
        return pd.DataFrame(columns=list(EVENT_STAT_COLUMNS))
    frame = async_events.assign(
        kernel=async_events["kernel"].astype(str), event=async_events["event"].astype(str)
    )
    status = frame["status"].astype(str)
    keys = ["kernel", "event"]
    matched = frame[status == STATUSES[MATCHED]]
    ns = matched["dur_ns"].astype("float64")
    cycles = matched["dur_cycles"].astype("float64")
    grouped = pd.DataFrame(
        {"kernel": matched["kernel"], "event": matched["event"], "ns": ns, "cycles": cycles}
    )
    by = grouped.groupby(keys, sort=True)
    stats = by.agg(count=("ns", "size"), mean_ns=("ns", "mean"), median_ns=("ns", "median"))
    stats["mean_cycles"] = by["cycles"].mean()
    stats["median_cycles"] = by["cycles"].median()
    for q in (90, 99):
        stats[f"p{q}_ns"] = by["ns"].quantile(q / 100)
        stats[f"p{q}_cycles"] = by["cycles"].quantile(q / 100)
    every = frame.groupby(keys, sort=True)
    lost = pd.DataFrame(
        {
            "line": every["line"].first(),
            "no_end": (status == STATUSES[NO_END]).groupby([frame["kernel"], frame["event"]]).sum(),
            "no_start": (status == STATUSES[NO_START]).groupby([frame["kernel"], frame["event"]]).sum(),
        }
    )
    table = lost.join(stats, how="left").reset_index()
    table["count"] = table["count"].fillna(0).astype(np.int64)
    for column in ("no_end", "no_start"):
        table[column] = table[column].astype(np.int64)
    table["line"] = table["line"].astype("Int64")
    return table[list(EVENT_STAT_COLUMNS)]


def event_lines(stats: pd.DataFrame, kernel: str) -> list[str]:
    """The rows of one kernel as a text table under a heading that names it; none if it has no
    events."""
    rows = stats[stats["kernel"] == kernel] if len(stats) else stats
    if not len(rows):
        return []
    shown = pd.DataFrame(
        {
            "event": rows["event"],
            "line": rows["line"].astype("string").fillna("-"),
            "count": rows["count"],
            **{
                f"{stat} {unit}": formatted(rows[f"{stat}_{column}"], "{:,.0f}")
                for unit, column in (("ns", "ns"), ("cyc", "cycles"))
                for stat in ("mean", "median", "p90", "p99")
            },
            "no end": rows["no_end"],
            "no start": rows["no_start"],
        }
    )
    heading = f"{kernel}: events, from their start to their end in any warp of the CTA"
    return [heading, *("  " + line for line in shown.to_string(index=False).splitlines())]
