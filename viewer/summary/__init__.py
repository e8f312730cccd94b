"""What ``show`` prints: per-scope statistics and what was lost, as tables and as text.

``scopes`` holds ``Summary`` and ``summarize`` (each scope's count, mean, median, p90 and share of
its kernel's time; each kernel's losses; the session's warnings), ``async_events`` the latency of
events, ``aggregate`` the statistics of aggregate launches, and ``text_columns`` how a printed
column is formatted. Outside this package, use what it exports here.
"""

from __future__ import annotations

from proton_ik.viewer.summary.aggregate import summarize_aggregates
from proton_ik.viewer.summary.async_events import summarize_events
from proton_ik.viewer.summary.scopes import (
    LAUNCH_KEYS,
    LOSS_COLUMNS,
    SCOPE_KEYS,
    Summary,
    launch_labels,
    summarize,
    table_statistics,
)
from proton_ik.viewer.summary.statistics import ScopeSample
from proton_ik.viewer.summary.text_columns import formatted

__all__ = [
    "LAUNCH_KEYS",
    "LOSS_COLUMNS",
    "SCOPE_KEYS",
    "ScopeSample",
    "Summary",
    "formatted",
    "launch_labels",
    "summarize",
    "summarize_aggregates",
    "summarize_events",
    "table_statistics",
]
