"""The session as pandas tables: the pipeline's chunks joined, with summaries and trace files on top.

``tables.Pipeline`` decodes a session run by run; here its chunks are joined in launch order into the
events, units, unmatched and launches tables, made into DataFrames once. Use ``load`` when you
want the tables; ``render.render_session`` writes trace files without holding them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from proton_ik.contract.layout import BufferLayout, ring_capacity
from proton_ik.contract.session_format import Capture, unrecorded_warnings
from proton_ik.viewer import chrome, perfetto
from proton_ik.viewer.arrays import collector_paused, groups, release_freed_memory
from proton_ik.viewer.session_file import LaunchCapture, SessionFileError, read_session
from proton_ik.viewer.summary import (
    SCOPE_KEYS,
    ScopeSample,
    Summary,
    launch_labels,
    summarize,
    summarize_aggregates,
    summarize_events,
    table_statistics,
)
from proton_ik.viewer.tables import (
    EVENT_COLUMNS,
    UNIT_COLUMNS,
    UNMATCHED_COLUMNS,
    Chunk,
    Pipeline,
    TimeShift,
    aggregate_frame,
    categories,
    cluster_frame,
    cluster_table,
    cta_columns,
    empty_frame,
    frame,
    frames,
    join_ctas,
    parts_of,
    time_shift_cycles,
)

if TYPE_CHECKING:  # imported where it is used: a render worker never imports it
    import pandas as pd

_NO_LAUNCH = {
    "launch": 0,
    "kernel": "",
    "profile": {"layout": BufferLayout(units=1, capacity=ring_capacity(1)).to_dict()},
}
EVENT_TABLE = [*EVENT_COLUMNS, "begin_rel_ns", "end_rel_ns"]
UNIT_TABLE = [*UNIT_COLUMNS, "start_rel_ns", "end_rel_ns"]
# What ``Trace.summary`` reads of the events and units tables (the statistics, the kernels'
# lifetimes, the clusters): ``load_for_summary`` keeps only these of each chunk as it comes.
SUMMARY_COLUMNS = {
    "events": ["kernel", "launch", "scope", "line", "file", "dur_ns", "dur_cycles"],
    "units": [
        "kernel",
        "launch",
        "cta",
        "sm",
        "cluster",
        "cluster_rank",
        "start_ns",
        "end_ns",
        "dur_ns",
        "finished",
    ],
}


class Trace:
    """Every scope event of a session, as tables, with summaries and trace files.

    ``events``: one row per scope event (see ``tables.EVENT_COLUMNS``, plus ``begin_rel_ns`` and
    ``end_rel_ns`` counted from the session's first unit start). ``units``: one row per unit
    (warp by default) with its lifetime and record counts. ``unmatched``: records left without
    a partner, and why. ``launches``: per-launch statistics, including the inferred SM clock and
    the time shift applied to scope begins. ``aggregates``: one row per (launch, CTA, unit,
    scope) of the launches made with ``aggregate=on``, which keep statistics, not events (see
    ``aggregate``); empty when there are none. ``async_events``, ``marks`` and ``values``: the
    events (``pl.start_event`` / ``pl.end_event``, paired across the warps of a CTA, unmatched
    starts and ends included), the marks, and the marks with a value (see ``tables.event_tables``).
    ``clusters``: per launch and thread-block cluster, its CTAs, their SMs and the skews of their
    starts and ends (``tables.clusters``; empty before sm_90 and in older sessions).
    """

    def __init__(
        self,
        info: Mapping[str, Any],
        events: pd.DataFrame,
        units: pd.DataFrame,
        unmatched: pd.DataFrame,
        launches: pd.DataFrame,
        aggregates: pd.DataFrame | None = None,
        async_events: pd.DataFrame | None = None,
        marks: pd.DataFrame | None = None,
        values: pd.DataFrame | None = None,
    ):
        self.info = dict(info)
        self.events = events
        self.units = units
        self.unmatched = unmatched
        self.launches = launches
        self.aggregates = empty_frame() if aggregates is None else aggregates
        empty = frames([])
        self.async_events = empty[0] if async_events is None else async_events
        self.marks = empty[1] if marks is None else marks
        self.values = empty[2] if values is None else values

    @classmethod
    def from_captures(
        cls,
        info: Mapping[str, Any],
        captures: Iterable[Capture],
        *,
        only: Mapping[str, list[str]] | None = None,
    ) -> Trace:
        """Decode launches held in memory or read from a session file. ``only``: the columns of
        the events and units tables to keep (``SUMMARY_COLUMNS``), dropped from each chunk as it
        comes, so that memory holds those alone; by default every column."""
        shift = time_shift_cycles(info)
        captures = list(captures)
        if not captures:
            # A launch with no CTAs gives tables with every column and no rows.
            empty = Pipeline([LaunchCapture(_NO_LAUNCH, np.zeros(0, dtype=np.uint8))], shift)
            chunks = [_kept(chunk, only) for chunk in empty.chunks()]
            events, units, unmatched, launches = _tables(chunks, only)
            return cls(info, events, units, unmatched, launches.iloc[:0])
        pipeline = Pipeline(captures, shift)
        chunks = [_kept(chunk, only) for chunk in pipeline.chunks()]
        tables = _tables(chunks, only)
        session = pipeline.session
        return cls(
            info,
            *tables,
            aggregate_frame(pipeline.launches, session.clocks, shift),
            *frames([part for chunk in chunks for part in chunk.async_parts]),
        )

    @property
    def name(self) -> str:
        return str(self.info.get("name", "proton_ik"))

    @property
    def device(self) -> str:
        return str(self.info.get("device", "unknown GPU"))

    @property
    def time_shift_cycles(self) -> TimeShift:
        return time_shift_cycles(self.info)

    @property
    def record_count(self) -> int:
        return int(self.launches["records"].sum()) if len(self.launches) else 0

    @property
    def problems(self) -> list[str]:
        """Every launch's problems, prefixed with the launch."""
        return _problems(self.launches)

    @cached_property
    def clusters(self) -> pd.DataFrame:
        """One row per launch and thread-block cluster (``tables.clusters.CLUSTER_COLUMNS``)."""
        return cluster_table(self.units)

    def summary(self) -> Summary:
        summary = summarize(
            *table_statistics(self.events, self.units, self.launches),
            self.unmatched,
            self.launches,
            self.problems,
            unrecorded_warnings(self.info),
            summarize_aggregates(self.aggregates, self.time_shift_cycles.pair),
            summarize_events(self.async_events),
        )
        return replace(summary, clusters=self.clusters)

    def summary_text(self) -> str:
        return str(self.summary())

    def write_perfetto(self, path: str | Path, *, progress: bool | None = None) -> Path:
        """Write a Perfetto protobuf trace (``.pftrace``) and return its path."""
        return perfetto.write_perfetto(
            path,
            self.events,
            self.units,
            self.launches,
            title=f"proton_ik: {self.name}",
            progress=progress,
            async_parts=[parts_of(self.async_events, self.marks, self.values)],
        )

    def write_chrome(self, path: str | Path, *, progress: bool | None = None) -> Path:
        """Write a Chrome JSON trace and return its path."""
        return chrome.write_chrome(
            path,
            self.events,
            self.units,
            self.launches,
            self.info,
            progress=progress,
            async_parts=[parts_of(self.async_events, self.marks, self.values)],
        )


@collector_paused()
def load(path: str | Path) -> Trace:
    """Read and decode a session file. A trace is refused with what reads it: a trace carries
    less than its session (``readback``), and ``readback.read_trace`` says so in its summary."""
    from proton_ik.viewer import readback  # it imports this module: here, not at the top

    kind = readback.file_kind(Path(path))
    if (refused := readback.not_ours(Path(path), kind)) is not None:
        raise refused
    if kind in readback.TRACE_KINDS:
        raise SessionFileError(
            f"{path} is a {kind} trace, not a session file: load() reads the .pik that finalize "
            f"wrote beside it. A trace reads back with proton_ik.viewer.readback.read_trace(path, "
            f"{kind!r}) (its .trace holds the tables), or `proton-ik show` / `proton-ik convert`"
        )
    session = read_session(path)
    return Trace.from_captures(session.info, session.launches)


@collector_paused()
def load_for_summary(path: str | Path) -> Trace:
    """Read and decode a session file for its ``summary()`` alone: the events and units tables
    hold only ``SUMMARY_COLUMNS`` (the other tables are whole). A fraction of ``load``'s memory
    and time on sessions of tens of millions of records."""
    session = read_session(path)
    return Trace.from_captures(session.info, session.launches, only=SUMMARY_COLUMNS)


@dataclass(frozen=True)
class SummarizedSession:
    """A session file's info and its ``Summary`` (``summarize_session``)."""

    info: dict[str, Any]
    summary: Summary


@collector_paused()
def summarize_session(path: str | Path) -> SummarizedSession:
    """``load_for_summary(path).summary()``, the same tables and text, without the events table:
    each chunk's scope events are gathered as a number and two durations each (``ScopeSample``),
    its finished units as lifetimes summed per launch and kernel, and its CTAs whose thread-block
    cluster was recorded as a row each (for the clusters' table). What ``proton-ik show`` runs:
    two thirds of ``load_for_summary``'s memory on sessions of millions of events."""
    import pandas as pd

    session = read_session(path)
    info = dict(session.info)
    if not session.launches:
        return SummarizedSession(info, Trace.from_captures(info, []).summary())
    shift = time_shift_cycles(info)
    pipeline = Pipeline(session.launches, shift)
    sample, kept, lifetimes, ctas = ScopeSample(), [], [], []
    for chunk in pipeline.chunks():
        sample.add(chunk)
        lifetimes.append(_lifetimes(chunk.units))
        ctas.append(_cta_rows(chunk.units, chunk.kernels))
        lean = _kept(chunk, SUMMARY_COLUMNS)
        lean = replace(
            lean,
            # Empty columns of their own: a slice would hold the chunk's whole column.
            events={name: np.empty(0, column.dtype) for name, column in lean.events.items()},
            units={name: np.empty(0, column.dtype) for name, column in lean.units.items()},
        )
        kept.append(lean)
        release_freed_memory()
    _, _, unmatched, launches = _tables(kept, SUMMARY_COLUMNS)
    kernels = kept[-1].kernels
    launch, kernel, lifetime = (np.concatenate(column) for column in zip(*lifetimes, strict=True))
    finished = pd.DataFrame(
        {"launch": launch, "kernel": np.asarray(kernels or [""], dtype=object)[kernel], "dur_ns": lifetime}
    )
    summary = summarize(
        sample.statistics(launch_labels(launches), SCOPE_KEYS),
        finished,
        unmatched,
        launches,
        _problems(launches),
        unrecorded_warnings(info),
        summarize_aggregates(aggregate_frame(pipeline.launches, pipeline.session.clocks, shift), shift.pair),
        summarize_events(frames([part for chunk in kept for part in chunk.async_parts])[0]),
    )
    return SummarizedSession(info, replace(summary, clusters=cluster_frame(join_ctas(ctas))))


def _problems(launches: pd.DataFrame) -> list[str]:
    """Every launch's problems (the launch table's), prefixed with the launch."""
    if not len(launches):
        return []
    return [
        f"launch {row.launch} ({row.kernel}): {problem}"
        for row in launches.itertuples()
        for problem in row.problems
    ]


def _lifetimes(units: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A chunk's finished units' lifetimes summed per (launch, kernel code): launch, kernel, sum."""
    done = units["finished"] & ~units["dur_ns_missing"]
    launch, kernel = units["launch"][done].astype(np.int64), units["kernel"][done].astype(np.int64)
    which, first = groups(launch - launch.min(initial=0), kernel)
    sums = np.zeros(len(first), dtype=np.int64)
    np.add.at(sums, which, units["dur_ns"][done].astype(np.int64))
    return launch[first], kernel[first], sums


def _cta_rows(units: Mapping[str, np.ndarray], kernels: tuple[str, ...]) -> dict[str, np.ndarray]:
    """A chunk's CTAs whose cluster was recorded (``tables.cta_columns``), from its units as
    ``tables.cluster_table`` reads a units table: a unit with no start starts last, one with no
    end has not ended."""
    missing_end = units["end_ns_missing"]
    return cta_columns(
        {
            "launch": units["launch"].astype(np.int64),
            "kernel": np.asarray(kernels or ("",), dtype=object)[units["kernel"]],
            **{name: units[name].astype(np.int64) for name in ("cta", "sm", "cluster", "cluster_rank")},
            "start_ns": np.where(units["start_ns_missing"], np.iinfo(np.int64).max, units["start_ns"]),
            "end_ns": np.where(missing_end, 0, units["end_ns"]),
            "finished": units["finished"] & ~missing_end,
        }
    )


def _kept(chunk: Chunk, only: Mapping[str, list[str]] | None) -> Chunk:
    """``chunk`` with only the ``only`` columns of its events and units (their masks and the
    ``order`` they are sorted by kept too; None: all of them), each table a dict of its own, for
    ``_in_launch_order`` to take the columns out of."""

    def keep(columns: Mapping[str, np.ndarray], names: list[str] | None) -> dict[str, np.ndarray]:
        if names is None:
            return dict(columns)
        wanted = {*names, *(f"{name}_missing" for name in names), "order"}
        return {name: column for name, column in columns.items() if name in wanted}

    return replace(
        chunk,
        events=keep(chunk.events, None if only is None else only["events"]),
        units=keep(chunk.units, None if only is None else only["units"]),
        unmatched=dict(chunk.unmatched),
    )


def _tables(
    chunks: list[Chunk], only: Mapping[str, list[str]] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The events, units, unmatched and launches tables of a session's chunks (in launch order);
    ``only``: the columns of the events and units tables to build."""
    import pandas as pd

    last = chunks[-1]
    kernel_names, kernel_remap = categories(last.kernels)
    scope_names, scope_remap = categories(last.scopes)
    host_names, host_remap = categories(last.host_scopes)
    file_names, file_remap = categories(last.files)
    labels = {"kernel": kernel_names, "scope": scope_names, "host_scope": host_names, "file": file_names}
    tables = []
    wanted = {"events": EVENT_TABLE, "units": UNIT_TABLE, **(only or {})}
    for table, names in (
        ("events", wanted["events"]),
        ("units", wanted["units"]),
        ("unmatched", UNMATCHED_COLUMNS),
    ):
        columns = _in_launch_order([getattr(chunk, table) for chunk in chunks])
        columns["kernel"] = kernel_remap[columns["kernel"]]
        if "scope" in columns:
            columns["scope"] = scope_remap[columns["scope"]]
        if "host_scope" in columns:
            columns["host_scope"] = host_remap[columns["host_scope"]]
        if "file" in columns:  # -1: no file, a missing value
            columns["file"] = np.where(columns["file"] >= 0, file_remap[columns["file"]], -1)
        tables.append(frame(columns, names, labels))
    launches = pd.DataFrame([row for chunk in chunks for row in chunk.launches])
    return (*tables, launches)


def _in_launch_order(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:  # emptied
    """Columns of the chunks joined, rows in launch order (a chunk's are grouped by kernel). Each
    column is taken out of the chunks as it is joined, so that memory holds a table of millions
    of rows about once, not the chunks' columns and the joined ones side by side."""
    order = np.concatenate([part["order"] for part in parts])
    # Stable: each launch's rows keep their order; the runs of launches merge in one pass.
    rows = np.argsort(order, kind="stable") if len(order) and (np.diff(order) < 0).any() else None
    columns = {}
    for name in list(parts[0]):
        joined = np.concatenate([part.pop(name) for part in parts])
        columns[name] = joined if rows is None else joined[rows]
        release_freed_memory()  # the chunks' pieces of it: the heap would keep them
    return columns
