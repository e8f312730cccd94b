"""The pipeline: launches in, pandas tables out, and the trace writers on top.

Launches of one kernel and profile are decoded and paired together, in groups of up to
``GROUP_BYTES`` of buffers, so that a thousand small launches cost about what one large launch
does; a launch larger than that is decoded in pieces of whole CTAs. Either way the arrays stay a
size the allocator reuses, and only unit headers and pairs are kept (records are dropped once
paired). Clock rates need the whole session (an SM with too short a span borrows the launch's or
the session's rate), so cycles become nanoseconds in a second pass, and the tables are put in
launch order at the end.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from proton_ik.layout import BufferLayout, RecordKind
from proton_ik.viewer import chrome, perfetto
from proton_ik.viewer.decode import PROBLEM_COUNTS, decode_buffers, describe_problems
from proton_ik.viewer.events import pair_records
from proton_ik.viewer.session_file import Capture, LaunchCapture, check_meta, read_session
from proton_ik.viewer.summary import Summary, summarize
from proton_ik.viewer.table import (
    EVENT_COLUMNS,
    LAUNCH_COUNTS,
    UNIT_COLUMNS,
    UNMATCHED_COLUMNS,
    Labels,
    LaunchGroup,
    ScopeTable,
    TimeShift,
    event_columns,
    first_grid,
    frame,
    launch_counts,
    launch_row,
    scope_codes,
    unit_columns,
    unmatched_columns,
    warps_per_unit,
)
from proton_ik.viewer.timebase import ClockAnchors, fit_clocks

# Buffer bytes decoded at once: enough for whole-array work to pay, and few enough that its arrays
# stay below the size (32 MB) past which the allocator maps fresh memory for each one.
GROUP_BYTES = 32 << 20
TIME_SHIFT_KEY = "time_shift_cycles"
_NO_LAUNCH = {"launch": 0, "kernel": "", "profile": {"layout": BufferLayout(units=1, capacity=1).to_dict()}}


class Trace:
    """Every scope event of a session, as tables, with summaries and trace files.

    ``events``: one row per scope event (see ``table.EVENT_COLUMNS``, plus ``begin_rel_ns`` and
    ``end_rel_ns`` counted from the session's first unit start). ``units``: one row per unit
    (warp by default) with its lifetime and record counts. ``unmatched``: records left without
    a partner, and why. ``launches``: per-launch statistics, including the inferred SM clock and
    the time shift applied to scope begins.
    """

    def __init__(
        self,
        info: Mapping[str, Any],
        events: pd.DataFrame,
        units: pd.DataFrame,
        unmatched: pd.DataFrame,
        launches: pd.DataFrame,
    ):
        self.info = dict(info)
        self.events = events
        self.units = units
        self.unmatched = unmatched
        self.launches = launches

    @classmethod
    def from_captures(cls, info: Mapping[str, Any], captures: Iterable[Capture]) -> Trace:
        """Decode launches held in memory or read from a session file."""
        builder = _Builder(time_shift_cycles(info))
        for capture in captures:
            builder.add(capture)
        return cls(info, *builder.tables())

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
        if not len(self.launches):
            return []
        return [
            f"launch {row.launch} ({row.kernel}): {problem}"
            for row in self.launches.itertuples()
            for problem in row.problems
        ]

    def summary(self) -> Summary:
        return summarize(self.events, self.units, self.unmatched, self.launches, self.problems)

    def summary_text(self) -> str:
        return str(self.summary())

    def write_perfetto(self, path: str | Path, *, progress: bool | None = None) -> Path:
        """Write a Perfetto protobuf trace (``.pftrace``) and return its path."""
        return perfetto.write_perfetto(
            path, self.events, self.units, self.launches, title=f"proton_ik: {self.name}", progress=progress
        )

    def write_chrome(self, path: str | Path, *, progress: bool | None = None) -> Path:
        """Write a Chrome JSON trace and return its path."""
        return chrome.write_chrome(path, self.events, self.units, self.launches, self.info, progress=progress)


def load(path: str | Path) -> Trace:
    """Read and decode a session file."""
    session = read_session(path)
    return Trace.from_captures(session.info, session.launches)


def time_shift_cycles(info: Mapping[str, Any]) -> TimeShift:
    """The session's calibrated cost of an empty scope, for single records and for pairs: one
    number for both, or ``{"single": s, "pair": p}`` (0 in files from before it was measured)."""
    shift = info.get(TIME_SHIFT_KEY, 0)
    values = shift if isinstance(shift, Mapping) else {"single": shift, "pair": shift}
    for kind in ("single", "pair"):
        value = values.get(kind)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(
                f"the session info's {TIME_SHIFT_KEY} is {shift!r}, not a whole number of cycles >= 0 "
                "for single records and pairs; the runtime that wrote the session is broken: capture again"
            )
    return TimeShift(single=values["single"], pair=values["pair"])


def _prepare(capture: Capture) -> tuple[tuple[str, str], BufferLayout, np.ndarray]:
    """Check a launch; its group key (kernel and profile), layout and buffer."""
    meta = capture.meta
    check_meta(meta)
    where = f"launch {meta['launch']} ({meta['kernel']})"
    try:
        layout = BufferLayout.from_dict(meta["profile"]["layout"])
        key = (str(meta["kernel"]), json.dumps(meta["profile"], sort_keys=True))
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{where}: {error}") from None
    buffer = np.ascontiguousarray(capture.buffer, dtype=np.uint8).reshape(-1)
    if buffer.size % layout.cta_bytes:
        raise ValueError(
            f"{where}: a profile buffer of {buffer.size} bytes is not a whole number of "
            f"{layout.cta_bytes}-byte CTA regions: the buffer and the kernel metadata do not belong together"
        )
    return key, layout, buffer


def _pieces(buffer: np.ndarray, layout: BufferLayout) -> list[tuple[int, np.ndarray]]:
    """The buffer in pieces of whole CTAs, up to GROUP_BYTES each: (first CTA, bytes)."""
    ctas = max(1, GROUP_BYTES // layout.cta_bytes)
    step = ctas * layout.cta_bytes
    return [
        (start // layout.cta_bytes, buffer[start : start + step]) for start in range(0, buffer.size, step)
    ] or [(0, buffer)]


class _Builder:
    """Takes launches one by one, in launch order; makes the session's tables at the end."""

    def __init__(self, shift: TimeShift):
        self.shift = shift
        self.kernels = Labels()
        self.metas: list[Mapping[str, Any]] = []
        self.layouts: list[BufferLayout] = []
        self.pending: dict[tuple[str, str], _Pending] = {}
        self.decoded: list[_Decoded] = []

    def add(self, capture: Capture) -> None:
        key, layout, buffer = _prepare(capture)
        index = len(self.metas)
        self.metas.append(capture.meta)
        self.layouts.append(layout)
        for first_cta, piece in _pieces(buffer, layout):
            group = self.pending.setdefault(key, _Pending(layout))
            group.add(index, first_cta, piece)
            if group.bytes >= GROUP_BYTES:
                self.decoded.append(self.pending.pop(key).decode(self.metas, self.kernels))

    def tables(self) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        """The events, units, unmatched and launches tables, in launch order."""
        captured = bool(self.metas)
        if not captured:
            # A launch with no CTAs gives tables with every column and no rows.
            self.add(LaunchCapture(_NO_LAUNCH, np.zeros(0, dtype=np.uint8)))
        self.decoded.extend(group.decode(self.metas, self.kernels) for group in self.pending.values())
        self.pending = {}
        launches = len(self.metas)
        anchors = [d.anchors() for d in self.decoded]
        clocks = fit_clocks(
            ClockAnchors(
                *(np.concatenate([getattr(a, f) for a in anchors]) for f in ("sm", "clock", "time", "launch"))
            ),
            launches,
        )
        scopes = Labels()
        events, units, unmatched = [], [], []
        for d in self.decoded:
            group = d.group
            unit_rows = clocks.rows(group.units.smid, group.index[group.units.launch])
            codes = scope_codes(group, scopes)
            events.append(event_columns(group, clocks, unit_rows, codes, self.shift))
            units.append(unit_columns(group, clocks, unit_rows))
            unmatched.append(unmatched_columns(group, codes))
        kernel_names, kernel_remap = self.kernels.categories()
        scope_names, scope_remap = scopes.categories()
        categories = {"kernel": kernel_names, "scope": scope_names}
        tables = []
        for parts, names in ((events, EVENT_COLUMNS), (units, UNIT_COLUMNS), (unmatched, UNMATCHED_COLUMNS)):
            columns = _in_launch_order(parts)
            columns["kernel"] = kernel_remap[columns["kernel"]]
            if "scope" in columns:
                columns["scope"] = scope_remap[columns["scope"]]
            tables.append(frame(columns, names, categories))
        events_table, units_table, unmatched_table = tables
        first_start = units_table["start_ns"].min()
        start = 0 if pd.isna(first_start) else int(first_start)
        events_table["begin_rel_ns"] = events_table["begin_ns"] - start
        events_table["end_rel_ns"] = events_table["end_ns"] - start
        units_table["start_rel_ns"] = units_table["start_ns"] - start
        units_table["end_rel_ns"] = units_table["end_ns"] - start
        launches_table = self._launches(clocks.per_launch(launches))
        return (
            events_table,
            units_table,
            unmatched_table,
            launches_table if captured else launches_table.iloc[:0],
        )

    def _launches(self, clocks: tuple[np.ndarray, np.ndarray]) -> pd.DataFrame:
        """The launch table: the counts of each launch's pieces added up, and what went wrong."""
        n = len(self.metas)
        counts = np.zeros((n, len(LAUNCH_COUNTS)), dtype=np.int64)
        problem_counts = np.zeros((n, len(PROBLEM_COUNTS)), dtype=np.int64)
        unknown = np.zeros(n, dtype=np.int64)
        other = np.zeros(n, dtype=np.int64)
        unknown_ids: dict[int, set[int]] = {}
        grids: dict[int, list[int]] = {}
        for d in self.decoded:
            index = d.group.index
            np.add.at(counts, index, d.counts)
            np.add.at(problem_counts, index, d.problem_counts)
            np.add.at(unknown, index, d.unknown)
            np.add.at(other, index, d.other)
            for piece, ids in d.unknown_ids.items():
                unknown_ids.setdefault(int(index[piece]), set()).update(ids)
            for piece, grid in d.grids.items():
                grids.setdefault(int(index[piece]), grid)
        mhz, source = clocks
        ctas = counts[:, LAUNCH_COUNTS.index("ctas")]
        rows = []
        for i, meta in enumerate(self.metas):
            problems = list(describe_problems(problem_counts[i].tolist(), self.layouts[i]))
            expected = _expected_ctas(meta)
            if expected is not None and expected != ctas[i]:
                problems.append(f"the buffer holds {ctas[i]} CTAs but the launch had {expected}")
            if unknown[i]:
                problems.append(
                    f"{unknown[i]} records name scope ids missing from the kernel's scope table: "
                    f"{sorted(unknown_ids[i])}"
                )
            if other[i]:
                problems.append(f"{other[i]} records of a kind this viewer does not know were ignored")
            rows.append(
                launch_row(meta, counts[i].tolist(), grids.get(i), mhz[i], source[i], self.shift, problems)
            )
        return pd.DataFrame(rows)


@dataclass
class _Pending:
    """Launches (or pieces of launches) of one kernel and profile waiting to be decoded together."""

    layout: BufferLayout
    index: list[int] = field(default_factory=list)  # each piece's launch
    first_ctas: list[int] = field(default_factory=list)
    buffers: list[np.ndarray] = field(default_factory=list)
    bytes: int = 0

    def add(self, index: int, first_cta: int, buffer: np.ndarray) -> None:
        self.index.append(index)
        self.first_ctas.append(first_cta)
        self.buffers.append(buffer)
        self.bytes += buffer.size

    def decode(self, metas: list[Mapping[str, Any]], kernels: Labels) -> _Decoded:
        meta = metas[self.index[0]]
        decoded = decode_buffers(self.buffers, self.layout, self.first_ctas)
        pairs, unmatched = pair_records(decoded.records, decoded.units)
        group = LaunchGroup(
            index=np.array(self.index, dtype=np.int64),
            number=np.array([int(metas[i]["launch"]) for i in self.index], dtype=np.int64),
            kernel=kernels.code(str(meta["kernel"])),
            scopes=ScopeTable.from_profile(meta["profile"]),
            warps_per_unit=warps_per_unit(meta),
            ctas=decoded.ctas,
            units=decoded.units,
            pairs=pairs,
            unmatched=unmatched,
        )
        n = len(self.index)
        records = decoded.records
        piece = decoded.units.launch[records.unit_row]
        scoped = records.kind == RecordKind.SCOPE
        unknown = scoped & group.scopes.unknown(records.scope)
        unknown_count = np.bincount(piece[unknown], minlength=n)
        return _Decoded(
            group=group,
            counts=launch_counts(group, np.bincount(piece, minlength=n)),
            problem_counts=decoded.counts,
            unknown=unknown_count,
            unknown_ids={
                i: set(np.unique(records.scope[unknown & (piece == i)]).tolist())
                for i in np.flatnonzero(unknown_count).tolist()
            },
            other=np.bincount(piece[~scoped], minlength=n),
            grids=first_grid(group),
        )


@dataclass(frozen=True)
class _Decoded:
    """A decoded group, and what the launch table needs of each of its pieces."""

    group: LaunchGroup
    counts: np.ndarray  # per piece: LAUNCH_COUNTS
    problem_counts: np.ndarray  # per piece: decode.PROBLEM_COUNTS
    unknown: np.ndarray  # per piece: records with scope ids the kernel's table lacks
    unknown_ids: dict[int, set[int]]  # those ids, by piece
    other: np.ndarray  # per piece: records of unknown kinds
    grids: dict[int, list[int]]  # %nctaid, by piece, where a CTA header gives it

    def anchors(self) -> ClockAnchors:
        """(clock64, globaltimer) pairs: both ends of finished units, and the start of decoded
        unfinished units on SMs where no unit of their launch finished (their start was written,
        their end was not)."""
        units = self.group.units
        finished = units.finished
        launch = self.group.index[units.launch]
        extra = ~finished & units.decoded
        if extra.any():
            key = launch * (int(units.smid.max()) + 1) + units.smid
            extra &= ~np.isin(key, key[finished])
        return ClockAnchors(
            sm=np.concatenate([units.smid[finished], units.smid[finished], units.smid[extra]]),
            clock=np.concatenate(
                [units.start_clock[finished], units.end_clock[finished], units.start_clock[extra]]
            ),
            time=np.concatenate(
                [units.start_time[finished], units.end_time[finished], units.start_time[extra]]
            ),
            launch=np.concatenate([launch[finished], launch[finished], launch[extra]]),
        )


def _in_launch_order(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Columns of several groups joined so that rows go by launch (each group's rows already do)."""
    if len(parts) == 1:
        return parts[0]
    blocks = []  # (launch, part, start, stop)
    for number, part in enumerate(parts):
        order = part["order"]
        starts = np.flatnonzero(np.diff(order, prepend=-1))
        stops = np.append(starts[1:], len(order))[: len(starts)]
        launches = order[starts].tolist()
        blocks.extend(zip(launches, [number] * len(starts), starts.tolist(), stops.tolist(), strict=True))
    blocks.sort()
    runs: list[list[int]] = []  # consecutive blocks of one part make one slice
    for _, number, start, stop in blocks:
        if runs and runs[-1][0] == number and runs[-1][2] == start:
            runs[-1][2] = stop
        else:
            runs.append([number, start, stop])
    return {
        name: np.concatenate([parts[number][name][start:stop] for number, start, stop in runs])
        if runs
        else parts[0][name]
        for name in parts[0]
    }


def _expected_ctas(meta: Mapping[str, Any]) -> int | None:
    if "num_ctas" in meta:
        return int(meta["num_ctas"])
    if meta.get("grid"):
        return math.prod(int(g) for g in meta["grid"])
    return None
