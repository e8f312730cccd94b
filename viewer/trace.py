"""A decoded session: launches in, pandas tables out, and the trace writers on top.

Decoding and pairing run launch by launch, keeping only unit headers and pairs (records are
dropped once paired). Clock rates need the whole session (an SM with too short a span borrows
the launch's or the session's rate), so cycles become nanoseconds in a second pass.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from proton_ik.layout import BufferLayout, RecordKind
from proton_ik.viewer import chrome, perfetto
from proton_ik.viewer.decode import CtaTable, UnitTable, decode_buffer
from proton_ik.viewer.events import Pairs, Unmatched, pair_records
from proton_ik.viewer.session_file import Capture, LaunchCapture, check_meta, read_session
from proton_ik.viewer.summary import Summary, summarize
from proton_ik.viewer.table import (
    ScopeTable,
    events_frame,
    launch_stats,
    units_frame,
    unmatched_frame,
)
from proton_ik.viewer.timebase import ClockAnchors, fit_session

_NO_LAUNCH = {"launch": 0, "kernel": "", "profile": {"layout": BufferLayout(units=1, capacity=1).to_dict()}}


@dataclass(frozen=True)
class _Launch:
    meta: Mapping[str, Any]
    ctas: CtaTable
    units: UnitTable
    records: int
    pairs: Pairs
    unmatched: Unmatched
    anchors: ClockAnchors
    problems: list[str]


class Trace:
    """Every scope event of a session, as tables, with summaries and trace files.

    ``events``: one row per scope event (see ``table.EVENT_COLUMNS``, plus ``begin_rel_ns`` and
    ``end_rel_ns`` counted from the session's first unit start). ``units``: one row per unit
    (warp by default) with its lifetime and record counts. ``unmatched``: records left without
    a partner, and why. ``launches``: per-launch statistics, including the inferred SM clock.
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
        decoded = [_decode_launch(capture) for capture in captures]
        captured = bool(decoded)
        if not captured:
            # A launch with no CTAs gives tables with every column and no rows.
            decoded = [_decode_launch(LaunchCapture(_NO_LAUNCH, np.zeros(0, dtype=np.uint8)))]
        clocks = fit_session([launch.anchors for launch in decoded])
        events, units, unmatched, stats = [], [], [], []
        for launch, sm_clocks in zip(decoded, clocks, strict=True):
            events.append(events_frame(launch.meta, launch.units, launch.pairs, sm_clocks))
            units.append(units_frame(launch.meta, launch.units, sm_clocks))
            unmatched.append(unmatched_frame(launch.meta, launch.units, launch.unmatched))
            stats.append(
                launch_stats(
                    launch.meta,
                    launch.ctas,
                    launch.units,
                    launch.records,
                    launch.pairs,
                    launch.unmatched,
                    sm_clocks,
                    launch.problems,
                )
            )
        events_table, units_table = _concat(events), _concat(units)
        launches = pd.DataFrame(stats) if captured else pd.DataFrame(stats).iloc[:0]
        first_start = units_table["start_ns"].min()
        start = 0 if pd.isna(first_start) else int(first_start)
        events_table["begin_rel_ns"] = events_table["begin_ns"] - start
        events_table["end_rel_ns"] = events_table["end_ns"] - start
        units_table["start_rel_ns"] = units_table["start_ns"] - start
        units_table["end_rel_ns"] = units_table["end_ns"] - start
        for column in ("kernel", "scope"):
            events_table[column] = events_table[column].astype("category")
        return cls(info, events_table, units_table, _concat(unmatched), launches)

    @property
    def name(self) -> str:
        return str(self.info.get("name", "proton_ik"))

    @property
    def device(self) -> str:
        return str(self.info.get("device", "unknown GPU"))

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


def _decode_launch(capture: Capture) -> _Launch:
    meta = capture.meta
    check_meta(meta)
    where = f"launch {meta['launch']} ({meta['kernel']})"
    try:
        layout = BufferLayout.from_dict(meta["profile"]["layout"])
        decoded = decode_buffer(capture.buffer, layout)
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{where}: {error}") from None
    pairs, unmatched = pair_records(decoded.records, decoded.units)
    problems = list(decoded.problems)
    expected = _expected_ctas(meta)
    if expected is not None and expected != len(decoded.ctas.slot):
        problems.append(f"the buffer holds {len(decoded.ctas.slot)} CTAs but the launch had {expected}")
    records = decoded.records
    unknown = ScopeTable.from_profile(meta["profile"]).unknown(records.scope) & (
        records.kind == RecordKind.SCOPE
    )
    if unknown.any():
        ids = sorted({int(i) for i in np.unique(records.scope[unknown])})
        problems.append(
            f"{int(unknown.sum())} records name scope ids missing from the kernel's scope table: {ids}"
        )
    other = int((records.kind != RecordKind.SCOPE).sum())
    if other:
        problems.append(f"{other} records of a kind this viewer does not know were ignored")
    return _Launch(
        meta, decoded.ctas, decoded.units, len(records), pairs, unmatched, _anchors(decoded.units), problems
    )


def _anchors(units: UnitTable) -> ClockAnchors:
    """(clock64, globaltimer) pairs: both ends of finished units, and the start of decoded
    unfinished units on SMs where no unit finished (their start was written, their end was not)."""
    finished = units.finished
    extra = ~finished & units.decoded & ~np.isin(units.smid, units.smid[finished])
    return ClockAnchors(
        sm=np.concatenate([units.smid[finished], units.smid[finished], units.smid[extra]]),
        clock=np.concatenate(
            [units.start_clock[finished], units.end_clock[finished], units.start_clock[extra]]
        ),
        time=np.concatenate([units.start_time[finished], units.end_time[finished], units.start_time[extra]]),
    )


def _expected_ctas(meta: Mapping[str, Any]) -> int | None:
    if "num_ctas" in meta:
        return int(meta["num_ctas"])
    if meta.get("grid"):
        return math.prod(int(g) for g in meta["grid"])
    return None


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    nonempty = [frame for frame in frames if len(frame)]
    return pd.concat(nonempty, ignore_index=True) if nonempty else frames[0]
