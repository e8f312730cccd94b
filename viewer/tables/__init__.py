"""A session's launches as columns and pandas tables, in bounded memory.

``pipeline`` takes launches in and hands out chunks (``chunk``: a run of launches decoded into
columns), with each SM's clock fitted first (``timebase``: cycles to nanoseconds, no rate
assumed); ``runs`` checks the launches and cuts them into the runs both of its passes walk, and
``launch_spans`` times each launch from its headers alone. ``table`` builds the columns of scope events, unit lifetimes, unmatched records and
launches; ``event_tables`` those of events, marks and values; ``aggregate`` the statistics of
launches made with ``aggregate=on``; ``clusters`` the thread-block clusters; ``sampled`` says
which CTAs and warps recorded; ``shares`` cuts a large launch's SMs into shares drawn apart. ``viewer.trace`` joins the chunks into a session's whole tables.
Outside this package, use what it exports here.
"""

from __future__ import annotations

from proton_ik.viewer.tables.aggregate import HIST_COLUMNS, aggregate_frame, empty_frame
from proton_ik.viewer.tables.chunk import Chunk, Columns, batches, chunk_from_tables, empty_chunk
from proton_ik.viewer.tables.clusters import (
    cluster_columns,
    cluster_frame,
    cluster_lines,
    cluster_table,
    cta_columns,
    join_ctas,
)
from proton_ik.viewer.tables.event_tables import (
    ASYNC_EVENT_COLUMNS,
    MARK_COLUMNS,
    VALUE_COLUMNS,
    AsyncParts,
    frames,
    parts_of,
)
from proton_ik.viewer.tables.pipeline import Pipeline, fit_session, launch_spans
from proton_ik.viewer.tables.runs import Launch, prepare
from proton_ik.viewer.tables.shares import SmShare
from proton_ik.viewer.tables.table import (
    EVENT_COLUMNS,
    UNIT_COLUMNS,
    UNMATCHED_COLUMNS,
    TimeShift,
    categories,
    config_text,
    frame,
    time_shift_cycles,
)

__all__ = [
    "ASYNC_EVENT_COLUMNS",
    "EVENT_COLUMNS",
    "HIST_COLUMNS",
    "MARK_COLUMNS",
    "UNIT_COLUMNS",
    "UNMATCHED_COLUMNS",
    "VALUE_COLUMNS",
    "AsyncParts",
    "Chunk",
    "Columns",
    "Launch",
    "Pipeline",
    "SmShare",
    "TimeShift",
    "aggregate_frame",
    "batches",
    "categories",
    "chunk_from_tables",
    "cluster_columns",
    "cluster_frame",
    "cluster_lines",
    "cluster_table",
    "config_text",
    "cta_columns",
    "empty_chunk",
    "empty_frame",
    "fit_session",
    "frame",
    "frames",
    "join_ctas",
    "launch_spans",
    "parts_of",
    "prepare",
    "time_shift_cycles",
]
