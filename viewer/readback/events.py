"""Events, marks and values read back from a trace file proton_ik wrote, into the tables ``Trace``
has (``tables.event_tables``: ``async_events``, ``marks``, ``values``), so that a trace's event
statistics are its session's.

Both writers (``chrome.events``, ``perfetto.events``) draw them alike, and the tables come from the
same places in both: a matched event is an async slice whose begin carries its CTA, instance
index, start and end warp, duration in cycles and ns (its slice cannot show one below 0) and
source line; an event left unmatched is an instant with a ``status`` arg (and its warp, cycles and
line); the instants at a flow's ends carry an instance index and no status, and add nothing; any
other instant is a mark (CTA, warp, cycles), a value where it has a ``value`` arg. Counters repeat
the values, and are skipped.

What a trace does not carry is NA: the host scope, SM, ids, units and record numbers, a matched
event's own start and end cycles (its duration is known), a value's type and bits. Times are the
file's: since the session's first unit start in Chrome JSON (``*_rel_ns``), absolute in a
``.pftrace`` (``*_ns``). What the writers left out of the drawing (a side on a unit with no
track) is not read back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from proton_ik.viewer.pairing import MATCHED, NO_END, NO_START, STATUSES
from proton_ik.viewer.readback.checks import refuse, whole_number
from proton_ik.viewer.readback.trace_file import TraceFile
from proton_ik.viewer.tables import ASYNC_EVENT_COLUMNS, MARK_COLUMNS, VALUE_COLUMNS
from proton_ik.viewer.trace import Trace

# A row's place (a key its reader knows) as its launch numbers and kernel names.
Resolve = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]

_LABELS = ("kernel", "host_scope", "event", "mark", "status", "value_type")
_EVENT_ARGS = ("cta", "index", "start_warp", "end_warp", "cycles", "dur_ns", "line", "warp")
_MARK_ARGS = ("cta", "warp", "cycles")
_LOST = {STATUSES[NO_END]: "start", STATUSES[NO_START]: "end"}  # the side an unmatched event has


class AsyncRows:
    """The events, marks and values a reader meets, as columns: each row's place (resolved to its
    launch and kernel once the file is read), name, time as the file gives it, and args."""

    def __init__(self, path: Path):
        self.path = path
        self.events: dict[str, list[Any]] = {k: [] for k in ("place", "name", "status", "ns", *_EVENT_ARGS)}
        self.marks: dict[str, list[Any]] = {k: [] for k in ("place", "name", "ns", *_MARK_ARGS)}
        self.values: dict[str, list[Any]] = {k: [] for k in ("place", "name", "ns", *_MARK_ARGS, "value")}

    def add_slice(self, place: int, name: str, ns: int, args: Mapping[str, Any], where: str) -> None:
        """A matched event: its async slice's begin."""
        self._event(place, name, STATUSES[MATCHED], ns, args, where)

    def add_instant(self, place: int, name: str, ns: int, args: Mapping[str, Any], where: str) -> None:
        """An instant: an event left unmatched, a flow's end (skipped), a mark or a value."""
        status = args.get("status")
        if status is not None:
            if status not in _LOST:
                raise refuse(self.path, f"{where}'s status is {status!r:.40}, not one of {list(_LOST)}")
            self._event(place, name.removesuffix(f": {status}"), status, ns, args, where)
            return
        if "index" in args:
            return
        valued = "value" in args
        table = self.values if valued else self.marks
        table["place"].append(place)
        table["name"].append(name)
        table["ns"].append(ns)
        for key in _MARK_ARGS:
            table[key].append(whole_number(args.get(key), f"{where}.args.{key}", self.path, missing=True))
        if valued:
            table["value"].append(_number(args["value"], f"{where}.args.value", self.path))

    def places(self) -> np.ndarray:
        """Every place a row names, once."""
        tables = (self.events, self.marks, self.values)
        return np.unique(np.concatenate([np.asarray(t["place"], dtype=np.uint64) for t in tables]))

    def drop_places(self, places: np.ndarray) -> int:
        """Leave out the rows at ``places`` (another tool's tracks); how many were left out."""
        dropped = 0
        for table in (self.events, self.marks, self.values):
            keep = ~np.isin(np.asarray(table["place"], dtype=np.uint64), places)
            dropped += int((~keep).sum())
            for name, column in table.items():
                table[name] = [value for value, kept in zip(column, keep, strict=True) if kept]
        return dropped

    def _event(
        self, place: int, name: str, status: str, ns: int, args: Mapping[str, Any], where: str
    ) -> None:
        events = self.events
        events["place"].append(place)
        events["name"].append(name)
        events["status"].append(status)
        events["ns"].append(ns)
        for key in _EVENT_ARGS:
            events[key].append(whole_number(args.get(key), f"{where}.args.{key}", self.path, missing=True))

    def tables(self, resolve: Resolve, relative: bool) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        """The async events, marks and values tables; ``relative``: the file's times count from
        the session's first unit start (Chrome JSON), else they are absolute (``.pftrace``)."""
        suffix = "rel_ns" if relative else "ns"
        return (
            _events_table(self.events, resolve, suffix),
            _marks_table(self.marks, resolve, suffix, MARK_COLUMNS),
            _marks_table(self.values, resolve, suffix, VALUE_COLUMNS),
        )


def with_async(trace_file: TraceFile, tables: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]) -> TraceFile:
    """The trace file with its events, marks and values tables."""
    trace = trace_file.trace
    return TraceFile(
        Trace(
            trace.info, trace.events, trace.units, trace.unmatched, trace.launches, trace.aggregates, *tables
        )
    )


def _number(value: object, what: str, path: Path) -> float:
    """A value: a number, or the text Chrome JSON writes for NaN and the infinities."""
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise refuse(path, f"{what} is {value!r:.40}, not a number")
    return float(value)


def _nullable(values: list[Any]) -> pd.Series:
    """Whole numbers, None where missing, as a nullable column."""
    return pd.Series(values, dtype="Int64")


def _where(columns: dict[str, list[Any]], resolve: Resolve) -> dict[str, Any]:
    """Each row's launch and kernel, from its place."""
    places = np.asarray(columns["place"], dtype=np.int64)
    unique, at = np.unique(places, return_inverse=True)
    launch, kernel = resolve(unique) if len(unique) else (np.zeros(0, np.int64), np.zeros(0, object))
    return {"kernel": np.asarray(kernel, dtype=object)[at], "launch": np.asarray(launch, np.int64)[at]}


def _framed(data: dict[str, Any], names: list[str], time: str) -> pd.DataFrame:
    """The table of ``names``, NA where a trace does not carry one, in launch and time order."""
    n = len(data["launch"])
    columns: dict[str, Any] = {}
    for name in names:
        if name in _LABELS:
            values = data.get(name, np.full(n, None, dtype=object))
            columns[name] = pd.Categorical(
                list(values), categories=sorted({v for v in values if v is not None})
            )
        elif name == "launch":
            columns[name] = data[name]
        elif name == "value":
            columns[name] = np.asarray(data[name], dtype=np.float64)
        else:
            columns[name] = data.get(name, pd.array([None] * n, dtype="Int64"))
    table = pd.DataFrame(columns, columns=names)
    at = pd.Series(data[time], dtype="Int64").fillna(0).to_numpy(np.int64)
    order = np.lexsort((at, table["launch"].to_numpy(np.int64)))
    return table.iloc[order].reset_index(drop=True)


def _events_table(events: dict[str, list[Any]], resolve: Resolve, suffix: str) -> pd.DataFrame:
    status = np.array(events["status"], dtype=object)
    has_start = pd.Series(status != STATUSES[NO_START])
    has_end = pd.Series(status != STATUSES[NO_END])
    matched = has_start & has_end
    ns, cycles, warp = (_nullable(events[key]) for key in ("ns", "cycles", "warp"))
    # An unmatched event's one warp, cycles and time are its present side's.
    data = {
        **_where(events, resolve),
        "cta": _nullable(events["cta"]),
        "event": np.array(events["name"], dtype=object),
        "index": _nullable(events["index"]),
        "status": status,
        "start_warp": _nullable(events["start_warp"]).where(matched, warp.where(~has_end)),
        "end_warp": _nullable(events["end_warp"]).where(matched, warp.where(~has_start)),
        "start_cycles": cycles.where(~has_end),
        "end_cycles": cycles.where(~has_start),
        "dur_cycles": cycles.where(matched),
        f"start_{suffix}": ns.where(has_start),
        f"end_{suffix}": (ns + _nullable(events["dur_ns"])).where(matched, ns.where(~has_start)),
        "dur_ns": _nullable(events["dur_ns"]).where(matched),
        "line": _nullable(events["line"]),
    }
    # Ordered by start, or by end where there is none, as the session's are.
    data["at"] = data[f"start_{suffix}"].fillna(data[f"end_{suffix}"])
    return _framed(data, ASYNC_EVENT_COLUMNS, "at")


def _marks_table(
    marks: dict[str, list[Any]], resolve: Resolve, suffix: str, names: list[str]
) -> pd.DataFrame:
    data: dict[str, Any] = {
        **_where(marks, resolve),
        "mark": np.array(marks["name"], dtype=object),
        suffix: _nullable(marks["ns"]),
        **{key: _nullable(marks[key]) for key in _MARK_ARGS},
    }
    if "value" in marks:
        data["value"] = np.array(marks["value"], dtype=np.float64)
    return _framed(data, names, suffix)
