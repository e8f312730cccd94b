"""A session read for its report: the pipeline's chunks kept in the few columns the report draws.

``collect`` runs the session through ``tables.Pipeline`` chunk by chunk, as ``render`` does, and
keeps of each chunk only the columns that ``Trace.summary`` (what ``proton-ik show`` prints) and
the report's figures read: about a quarter of what ``trace.load`` holds. The summary is then
``Trace.summary`` itself, on those tables, so the report's numbers are ``show``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from proton_ik.viewer.session_file import read_session
from proton_ik.viewer.summary import Summary
from proton_ik.viewer.tables import (
    UNMATCHED_COLUMNS,
    Chunk,
    Pipeline,
    aggregate_frame,
    categories,
    frame,
    frames,
    time_shift_cycles,
)
from proton_ik.viewer.trace import Trace

EVENT_NAMES = [
    "kernel", "launch", "cta", "sm", "scope", "line", "file", "dur_ns", "dur_cycles", "begin_rel_ns", "end_rel_ns",
]  # fmt: skip
UNIT_NAMES = ["kernel", "launch", "cta", "sm", "finished", "dur_ns", "start_rel_ns", "end_rel_ns"]


@dataclass(frozen=True)
class Collected:
    """A session's narrow tables (``trace``: a ``Trace`` whose events and units hold
    ``EVENT_NAMES`` and ``UNIT_NAMES`` only), its summary, and its info."""

    info: dict[str, Any]
    trace: Trace
    summary: Summary

    @property
    def events(self) -> pd.DataFrame:
        return self.trace.events

    @property
    def units(self) -> pd.DataFrame:
        return self.trace.units

    @property
    def launches(self) -> pd.DataFrame:
        return self.trace.launches


def collect(session_path: str | Path) -> Collected:
    """Decode a session chunk by chunk into the report's tables and ``show``'s summary."""
    session = read_session(session_path)
    shift = time_shift_cycles(session.info)
    if not session.launches:
        trace = Trace.from_captures(session.info, [])  # tables with every column and no rows
        return Collected(dict(session.info), trace, trace.summary())
    pipeline = Pipeline(session.launches, shift)
    kept: dict[str, list[dict[str, np.ndarray]]] = {"events": [], "units": [], "unmatched": []}
    rows: list[dict[str, Any]] = []
    async_parts: list[Any] = []
    last: Chunk | None = None
    for chunk in pipeline.chunks():
        kept["events"].append(_narrow(chunk.events, EVENT_NAMES))
        kept["units"].append(_narrow(chunk.units, UNIT_NAMES))
        kept["unmatched"].append(_narrow(chunk.unmatched, UNMATCHED_COLUMNS))
        rows.extend(chunk.launches)
        async_parts.extend(chunk.async_parts)
        last = chunk
    assert last is not None  # a session with launches gives a chunk at least
    labels = {
        "kernel": categories(last.kernels),
        "scope": categories(last.scopes),
        "file": categories(last.files),
    }
    events = _table(kept["events"], EVENT_NAMES, labels)
    units = _table(kept["units"], UNIT_NAMES, labels)
    unmatched = _table(kept["unmatched"], UNMATCHED_COLUMNS, labels)
    aggregates = aggregate_frame(pipeline.launches, pipeline.session.clocks, shift)
    async_events, marks, values = frames(async_parts)
    trace = Trace(
        session.info, events, units, unmatched, pd.DataFrame(rows), aggregates, async_events, marks, values
    )
    return Collected(dict(session.info), trace, trace.summary())


def _narrow(columns: Any, names: list[str]) -> dict[str, np.ndarray]:
    """The named columns of a chunk's table (with their missing-value masks and launch order)."""
    wanted = [*names, "order", *(f"{name}_missing" for name in names)]
    return {name: np.asarray(columns[name]) for name in wanted if name in columns}


def _table(
    parts: list[dict[str, np.ndarray]],
    names: list[str],
    labels: dict[str, tuple[list[str], np.ndarray]],
) -> pd.DataFrame:
    """One table of the chunks' columns, in launch order, names as categoricals (as ``Trace``'s)."""
    columns = {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
    order = columns.pop("order", None)
    if order is not None and len(order) and (np.diff(order) < 0).any():
        rows = np.argsort(order, kind="stable")
        columns = {name: column[rows] for name, column in columns.items()}
    for name, (_, remap) in labels.items():
        if name in columns:
            codes = columns[name]
            columns[name] = np.where(codes >= 0, remap[np.maximum(codes, 0)], -1)
    present = [name for name in names if name in columns]
    return frame(columns, present, {name: labels[name][0] for name in labels if name in present})
