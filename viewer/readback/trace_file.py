"""``TraceFile``, and the tables it holds built from the columns a reader read: scope events, the
finished units' lifetimes and the launch table, as ``Trace`` tables (those ``summarize`` reads,
and with ``for_writing`` those the trace writers read too)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from proton_ik.viewer.chrome import write_chrome
from proton_ik.viewer.perfetto import write_perfetto
from proton_ik.viewer.readback.nesting_order import nesting_order
from proton_ik.viewer.summary import LOSS_COLUMNS, Summary
from proton_ik.viewer.tables import UNMATCHED_COLUMNS
from proton_ik.viewer.trace import Trace
from proton_ik.viewer.tracks import LIFETIME, root_name


@dataclass(frozen=True)
class TraceFile:
    """A trace file's scope events, finished unit lifetimes and launches, as ``Trace`` tables."""

    trace: Trace

    def summary(self) -> Summary:
        """``Trace.summary``, with per-scope unmatched counts unknown where the kernel lost records."""
        summary = self.trace.summary()
        if not len(summary.kernels):
            return summary
        # A kernel has a row per host scope it ran under: what it lost, summed over them.
        lost = summary.kernels.groupby("kernel", observed=True)[list(LOSS_COLUMNS)].sum().sum(axis=1)
        unknown = summary.scopes["kernel"].map(lost).fillna(0).to_numpy() > 0
        scopes = summary.scopes.copy()
        for column in LOSS_COLUMNS:
            scopes[column] = scopes[column].astype("Int64").mask(unknown)
        return replace(summary, scopes=scopes)

    def summary_text(self) -> str:
        return str(self.summary())

    def write_perfetto(self, path: str | Path, *, timeline: str | None = None) -> Path:
        """Write the trace again as a ``.pftrace`` (what ``proton-ik convert`` runs), on the
        ``timeline`` asked for ("slots", the default, or "ctas"), whatever it was read from."""
        trace = self._writable()
        return write_perfetto(
            path, trace.events, trace.units, trace.launches, title=root_name(trace.name), timeline=timeline
        )

    def write_chrome(self, path: str | Path, *, timeline: str | None = None) -> Path:
        """Write the trace again as Chrome JSON, on the ``timeline`` asked for."""
        trace = self._writable()
        return write_chrome(path, trace.events, trace.units, trace.launches, trace.info, timeline=timeline)

    def _writable(self) -> Trace:
        if "begin_record" not in self.trace.events:
            raise ValueError("this trace was read for its summary only: read it with for_writing=True")
        return self.trace


def _labels(values: Any) -> pd.Series:
    """Names as the summary reads them; a categorical stays one (its codes are small)."""
    return pd.Series(values) if isinstance(values, pd.Categorical) else pd.Series(values, dtype=str)


def _files(values: Any) -> pd.Series:
    """Source files, missing where a slice has none (a lifetime, an older trace): a categorical."""
    return pd.Series(values if isinstance(values, pd.Categorical) else pd.Categorical(values))


def trace_file_from_columns(
    info: dict[str, Any], columns: Mapping[str, Any], launches: pd.DataFrame, for_writing: bool = False
) -> TraceFile:
    """The tables ``summarize`` reads; with ``for_writing``, also those the trace writers read."""
    if for_writing:
        return _writable_trace_file(info, columns, launches)
    slices = pd.DataFrame(
        {
            "kernel": _labels(columns["kernel"]),
            "launch": pd.Series(columns["launch"], dtype=np.int64),
            "scope": _labels(columns["scope"]),
            "cta": pd.Series(columns["cta"], dtype="Int64"),
            "sm": pd.Series(columns["sm"], dtype="Int64"),
            "cluster": pd.Series(columns["cluster"], dtype="Int64"),
            "cluster_rank": pd.Series(columns["cluster_rank"], dtype="Int64"),
            "warp": pd.Series(columns["warp"], dtype="Int64"),
            "start_ns": pd.Series(columns["begin_ns"], dtype=np.int64),
            "dur_ns": pd.Series(columns["dur_ns"], dtype=np.int64),
            "dur_cycles": pd.Series(columns["cycles"], dtype="Int64"),
            "line": pd.Series(columns["line"], dtype="Int64"),
            "file": _files(columns["file"]),
        }
    )
    lifetime = (slices["scope"] == LIFETIME).to_numpy()
    events = slices[~lifetime].reset_index(drop=True)
    # The units' clusters, starts and ends: show's cluster skews.
    unit_columns = ["kernel", "launch", "cta", "sm", "cluster", "cluster_rank", "warp", "start_ns", "dur_ns"]
    units = slices.loc[lifetime, unit_columns].reset_index(drop=True)
    units["end_ns"] = units["start_ns"] + units["dur_ns"]
    del slices
    return _finished(info, events, units, launches)


def _writable_trace_file(
    info: dict[str, Any], columns: Mapping[str, Any], launches: pd.DataFrame
) -> TraceFile:
    """Split slices into scope events and unit lifetimes, and make the tables ``summarize`` reads,
    with the columns the trace writers read too (``tables.chunk_from_tables``), so that a trace
    file can be written again in the other format."""
    slices = _writable_slices(columns, launches)
    lifetime = (slices["scope"] == LIFETIME).to_numpy()
    # Times from the session's first unit start, as a session's tables count them.
    start = int(slices["begin_ns"][lifetime].min()) if lifetime.any() else 0
    _add_record_order(slices, columns, lifetime)
    events = slices[~lifetime].reset_index(drop=True)
    events["begin_rel_ns"] = events["begin_ns"] - start
    events["end_rel_ns"] = events["end_ns"] - start
    units = _writable_units(slices, lifetime, start)
    del slices
    return _finished(info, events, units, launches)


def _writable_slices(columns: Mapping[str, Any], launches: pd.DataFrame) -> pd.DataFrame:
    """Every slice read, lifetimes and scopes alike, with the columns the writers read."""
    launch = np.asarray(columns["launch"], dtype=np.int64)
    begin = np.asarray(columns["begin_ns"], dtype=np.int64)
    dur = np.asarray(columns["dur_ns"], dtype=np.int64)
    warp = pd.Series(columns["warp"], dtype="Int64")
    numbers = launches["launch"].to_numpy(np.int64)
    order = np.argsort(numbers, kind="stable")
    at = np.minimum(np.searchsorted(numbers[order], launch), max(len(numbers) - 1, 0))
    width = launches["warps_per_unit"].to_numpy(np.int64)[order][at] if len(numbers) else np.ones_like(launch)
    return pd.DataFrame(
        {
            "kernel": _labels(columns["kernel"]),
            "launch": launch,
            "scope": _labels(columns["scope"]),
            "cta": pd.Series(columns["cta"], dtype="Int64"),
            "sm": pd.Series(columns["sm"], dtype="Int64"),
            "cluster": pd.Series(columns["cluster"], dtype="Int64"),
            "cluster_rank": pd.Series(columns["cluster_rank"], dtype="Int64"),
            "warp": warp,
            "unit": warp // width,
            "lane": np.asarray(columns["lane"], dtype=np.int64),
            "begin_ns": begin,
            "end_ns": begin + dur,
            "dur_ns": dur,
            "dur_cycles": pd.Series(columns["cycles"], dtype="Int64"),
            "line": pd.Series(columns["line"], dtype="Int64"),
            "file": _files(columns["file"]),
            "count": pd.Series(columns["records"], dtype="Int64"),
            "overwritten": pd.Series(columns["overwritten"], dtype="Int64"),
        }
    )


def _add_record_order(slices: pd.DataFrame, columns: Mapping[str, Any], lifetime: np.ndarray) -> None:
    """Each slice's depth and the place of its begin and end on its track: as read from a
    ``.pftrace``, or, from a Chrome trace, by how its track's slices nest."""
    if "begin_record" in columns:
        slices["depth"] = np.asarray(columns["depth"], dtype=np.int64)
        slices["begin_record"] = np.asarray(columns["begin_record"], dtype=np.int64)
        slices["end_record"] = np.asarray(columns["end_record"], dtype=np.int64)
    else:
        slices["depth"] = 0
        track = np.asarray(columns["track"], dtype=np.int64)
        slices["begin_record"], slices["end_record"] = nesting_order(
            np.where(lifetime, -1, track), slices["begin_ns"].to_numpy(), slices["end_ns"].to_numpy()
        )


def _writable_units(slices: pd.DataFrame, lifetime: np.ndarray, start: int) -> pd.DataFrame:
    """The finished units' lifetimes, as a session's unit table has them."""
    unit_columns = ["kernel", "launch", "cta", "sm", "cluster", "cluster_rank", "warp", "unit", "dur_ns"]
    units = slices.loc[lifetime, [*unit_columns, "count", "overwritten"]]
    units = units.reset_index(drop=True)
    units["start_ns"] = slices["begin_ns"][lifetime].to_numpy()
    units["end_ns"] = slices["end_ns"][lifetime].to_numpy()
    units["start_rel_ns"] = units["start_ns"] - start
    units["end_rel_ns"] = units["end_ns"] - start
    units["start_cycles"] = 0
    units["end_cycles"] = slices["dur_cycles"][lifetime].reset_index(drop=True)
    return units


def _finished(
    info: dict[str, Any], events: pd.DataFrame, units: pd.DataFrame, launches: pd.DataFrame
) -> TraceFile:
    """The trace file from its events and unit lifetimes: only what a file holds is named."""
    for table in (events, units):
        for name in ("kernel", "scope"):
            if name in table and isinstance(table[name].dtype, pd.CategoricalDtype):
                table[name] = table[name].cat.remove_unused_categories()
    units["finished"] = True
    unmatched = pd.DataFrame({column: [] for column in UNMATCHED_COLUMNS})
    return TraceFile(Trace(info, events, units, unmatched, launches))
