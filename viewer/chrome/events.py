"""Events, marks and values in the Chrome JSON trace, beside the scope slices of ``writer``.

For each chunk with events or marks (``Chunk.async_parts``: the events ``pairing.async_events``
paired and ``tables.event_tables`` tabled, as the Perfetto writer draws them), on the processes and threads
``writer`` numbered for the chunk:

- an event from its start to its end: a nestable async slice, "b" and its "e" on one line, on
  its CTA's process (launch and SM), named after the event, ``cat`` its kernel (as the slices'),
  args: CTA, instance index, start and end warp, cycles, ns, source line and status (from which
  ``readback.events`` reads the tables back). Both importers stack the "b"/"e" of one ``id2.local``
  (Perfetto: one track per id), so events of a process and name that overlap (or touch) take
  different ids: *lanes*, as few as the most events open at once, numbered afresh in every chunk
  so that chunks never share one;
- a flow from the warp that started it to the warp that ended it: an instant "tma: start" on
  the starting warp's thread, then the flow's "s"; an instant "tma: end" on the ending warp's,
  then its "f" (``bp`` "e"). Perfetto binds a flow event to the slice last begun on its thread,
  sorting events of one time in file order, so to the instant just before it; chrome://tracing
  to the slice that encloses it, the instant or the scope around it;
- a start with no end, or an end with no start: an instant "tma: no end" or "tma: no start" on
  its warp's thread, with its warp, cycles, source line and status;
- marks: instants on their warp's thread (args: CTA, warp, cycles), a value as the instant's
  ``value`` arg; for each warp thread and mark whose values change, a counter ("C", ``id`` the
  thread's name) of them.

A side whose unit has no thread here (it neither finished nor has scopes) draws its instant on
the process ("s":"p") and no flow; a row whose CTA has no process here, or no time, is left out
of the drawing (not of the tables). Each kind is written in time order.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from proton_ik.viewer.arrays import Rows, groups
from proton_ik.viewer.pairing import MATCHED, NO_END, NO_START, STATUSES
from proton_ik.viewer.tables import Chunk, Columns
from proton_ik.viewer.tracks import Tracks, stacked, thread_name

Build = Callable[[int, int], Rows]  # the rows from the first to past the last given


@dataclass
class AsyncIds:
    """The next free lane (an async slice's ``id2.local``) and flow id of a file."""

    lane: int = 1
    flow: int = 1


@dataclass(frozen=True)
class ChromeTracks:
    """A chunk's tracks as ``writer`` numbered them: a pid per SM track, a tid per unit track."""

    tracks: Tracks
    process_pid: np.ndarray
    thread_tid: np.ndarray


def async_rows(
    chunk: Chunk, lives: Columns, numbered: ChromeTracks, ids: AsyncIds
) -> list[tuple[int, Build]]:
    """The chunk's events, marks and values as kinds of rows: (how many, how to build them)."""
    places = _Places(chunk, lives, numbered)
    parts = chunk.async_parts
    return [
        *_event_rows(_joined([part.events for part in parts]), places, ids),
        _mark_rows(_joined([part.marks for part in parts]), places, valued=False),
        _mark_rows(_joined([part.values for part in parts]), places, valued=True),
        _counter_rows(_joined([part.values for part in parts]), places),
    ]


def microseconds(rows: Rows, ns: np.ndarray) -> None:
    """Nanoseconds as exact decimal microseconds: "-12.345"."""
    negative = ns < 0
    whole, fraction = np.divmod(np.abs(ns), 1000)
    if negative.any():
        rows.constant(b"-", negative)
    rows.decimal(whole).constant(b".").decimal(fraction, digits=3)


class _Places:
    """Where a chunk's rows are drawn: each unit's warp thread (its lane 0 unit track) by
    (launch, CTA, unit), each process (SM track) by (launch, SM), and the text they share."""

    def __init__(self, chunk: Chunk, lives: Columns, numbered: ChromeTracks):
        tracks = self.tracks = numbered.tracks
        events = chunk.events
        first_lane = stacked(events["lane"], np.zeros(len(lives["launch"]))) == 0
        self._unit_keys = [stacked(events[key], lives[key])[first_lane] for key in ("launch", "cta", "unit")]
        self._unit_track = tracks.row_track[first_lane]
        self.pid, self.tid = numbered.process_pid, numbered.thread_tid
        self.kernels = [json.dumps(kernel).encode() for kernel in tracks.kernel]

    def threads(
        self, launch: np.ndarray, cta: np.ndarray, unit: np.ndarray, present: np.ndarray
    ) -> np.ndarray:
        """The unit track of each row's unit; -1 where it has none (or no side here)."""
        found = _lookup(self._unit_keys, self._unit_track, [launch, cta, np.where(present, unit, 0)])
        return np.where(present, found, -1)

    def processes(self, launch: np.ndarray, sm: np.ndarray) -> np.ndarray:
        """The SM track of each row's launch and SM; -1 where it has none."""
        tracks = self.tracks
        keys = [tracks.launch[tracks.sm_launch], tracks.sm]
        return _lookup(keys, np.arange(len(tracks.sm)), [launch, sm])

    def head(self, rows: Rows, phase: bytes, process: np.ndarray, thread: np.ndarray) -> Rows:
        """An event's text up to its name: phase, kernel, pid and tid (0 where it has no thread)."""
        on_thread = thread >= 0
        rows.constant(b'{"ph":"' + phase + b'","cat":')
        rows.pick(self.tracks.sm_launch[process], self.kernels).constant(b',"pid":')
        rows.decimal(self.pid[process]).constant(b',"tid":')
        return rows.decimal(np.where(on_thread, self.tid[np.maximum(thread, 0)], 0)).constant(b',"name":')


def _lookup(keys: Sequence[np.ndarray], values: np.ndarray, queries: Sequence[np.ndarray]) -> np.ndarray:
    """``values`` at the row whose ``keys`` equal each query's; -1 where none do."""
    n = len(values)
    joined = [np.concatenate([key, query]).astype(np.int64) for key, query in zip(keys, queries, strict=True)]
    number, first = groups(*joined)
    found = np.full(len(first), -1, np.int64)
    found[number[:n]] = values
    return found[number[n:]]


def _joined(parts: list[Columns]) -> Columns:
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]} if parts else {}


def _names(labels: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Each row's code into the table of its distinct names."""
    names, codes = np.unique(labels.astype(str), return_inverse=True)
    return codes.reshape(-1), names.tolist()


def _texts(names: list[str], suffix: str = "") -> list[bytes]:
    """Names as JSON strings, ``suffix`` appended."""
    return [json.dumps(f"{name}{suffix}").encode() for name in names]


def lanes(group: np.ndarray, begin: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each interval's lane within its group (groups numbered 0, 1, ...), and each group's lanes:
    intervals that overlap or touch never share one, and a group has as many lanes as it had
    intervals open at once.

    Lanes are reused first freed, first taken. The k-th interval of a group to begin (from 0)
    finds ``ended`` of them ended before it, so k - ended + 1 open with it: where that is a new
    high for the group it opens a lane, and otherwise it takes the lane of the group's
    (k - lanes so far)-th interval to end, found by pointer jumping (that one began earlier).
    """
    n = len(group)
    count = np.bincount(group, minlength=int(group.max(initial=-1)) + 1)
    if n == 0:
        return np.zeros(0, np.int64), count
    first = np.cumsum(count) - count
    by_begin = np.lexsort((begin, group))
    sorted_group = group[by_begin]
    k = np.arange(n) - first[sorted_group]
    # Ends and begins in one order, a begin before an end at its time: ends strictly before.
    is_end = np.concatenate([np.ones(n, bool), np.zeros(n, bool)])
    order = np.lexsort(
        (is_end, np.concatenate([end, begin[by_begin]]), np.concatenate([group, sorted_group]))
    )
    ends_before = np.empty(2 * n, np.int64)
    ends_before[order] = np.cumsum(is_end[order]) - is_end[order]
    ended = ends_before[n:] - first[sorted_group]
    # The running high of each group: offsets keep a group's values above the groups' before it.
    offset = sorted_group * (n + 1)
    high = np.maximum.accumulate(k - ended + 1 + offset) - offset
    before = np.where(k == 0, 0, np.roll(high, 1))
    opens = high > before
    by_end = np.lexsort((end, group))
    rank = np.empty(n, np.int64)
    rank[by_begin] = np.arange(n)
    root = np.where(opens, np.arange(n), rank[by_end[first[sorted_group] + k - before]])
    while not np.array_equal(jumped := root[root], root):
        root = jumped
    lane = np.empty(n, np.int64)
    lane[by_begin] = high[root] - 1
    most = np.zeros(len(count), np.int64)
    np.maximum.at(most, sorted_group, high)
    return lane, most


def _event_rows(events: Columns, places: _Places, ids: AsyncIds) -> list[tuple[int, Build]]:
    """Async slices, flow starts, flow ends, then unmatched starts and ends."""
    if not events or not len(events["status"]):
        return []
    drawn = _DrawnEvents(events, places, ids)
    return [
        _in_time_order(drawn.spans, drawn.begin, drawn.span),
        _in_time_order(drawn.flows, drawn.begin, drawn.flow("start", drawn.start, drawn.begin)),
        _in_time_order(drawn.flows, drawn.end, drawn.flow("end", drawn.finish, drawn.end)),
        _in_time_order(drawn.lost, drawn.lost_ns, drawn.unmatched),
    ]


class _DrawnEvents:
    """A chunk's events as they are drawn: where each side goes, the lane of each span and the
    id of each flow (taken from ``ids``), and which sides are drawn as unmatched instants."""

    def __init__(self, events: Columns, places: _Places, ids: AsyncIds) -> None:
        self.events, self.places = events, places
        launch, cta = events["launch"], events["cta"]
        begin, end = events["start_rel_ns"], events["end_rel_ns"]
        has_start, has_end = ~events["start_rel_ns_missing"], ~events["end_rel_ns_missing"]
        process = self.process = places.processes(launch, events["sm"])
        start = self.start = places.threads(launch, cta, events["start_unit"], has_start)
        finish = self.finish = places.threads(launch, cta, events["end_unit"], has_end)
        status = events["status"]
        matched = (status == STATUSES[MATCHED]) & has_start & has_end & (process >= 0)
        self.code, self.labels = _names(events["event"])
        self.names = _texts(self.labels)
        self.spans = np.flatnonzero(matched)
        # Ends drawn no earlier than their starts, which both importers need of a slice.
        end = np.where(matched, np.maximum(end, begin), end)
        self.begin, self.end = begin, end
        self.lane_id = self._lanes(ids)
        self.flows = np.flatnonzero(matched & (start >= 0) & (finish >= 0))
        self.flow_id = np.zeros(len(status), np.int64)
        self.flow_id[self.flows] = ids.flow + np.arange(len(self.flows))
        ids.flow += len(self.flows)
        no_end = self.no_end = (status == STATUSES[NO_END]) & has_start & (process >= 0)
        no_start = self.no_start = (status == STATUSES[NO_START]) & has_end & (process >= 0)
        self.lost = np.flatnonzero(no_end | no_start)
        self.lost_thread = np.where(no_end, start, finish)
        self.lost_ns = np.where(no_end, begin, end)
        # Codes into the names with ": no end", then with ": no start".
        self.lost_code = self.code + len(self.labels) * no_start
        self.statuses = [STATUSES[NO_END], STATUSES[NO_START]]
        self.lost_names = [name for text in self.statuses for name in _texts(self.labels, f": {text}")]

    def _lanes(self, ids: AsyncIds) -> np.ndarray:
        """Each span's lane (``id2.local``): as few per process and name as were open at once."""
        spans = self.spans
        group, _ = groups(self.process[spans], self.code[spans])
        lane, per_group = lanes(group, self.begin[spans], self.end[spans])
        lane_id = np.zeros(len(self.events["status"]), np.int64)
        lane_id[spans] = ids.lane + (np.cumsum(per_group) - per_group)[group] + lane
        ids.lane += int(per_group.sum())
        return lane_id

    def args(self, rows: Rows, index: np.ndarray) -> Rows:
        return (
            rows.constant(b',"args":{"cta":')
            .decimal(self.events["cta"][index])
            .constant(b',"index":')
            .decimal(self.events["index"][index])
        )

    def line(self, rows: Rows, index: np.ndarray) -> Rows:
        known = ~self.events["line_missing"][index]
        return rows.constant(b',"line":', known).decimal(self.events["line"][index], where=known)

    def span(self, index: np.ndarray) -> Rows:
        """An event's async slice: its "b", then its "e"."""
        events, places, process, code, names = self.events, self.places, self.process, self.code, self.names
        rows = places.head(Rows(len(index)), b"b", process[index], self.start[index])
        rows.pick(code[index], names).constant(b',"id2":{"local":"').decimal(self.lane_id[index])
        rows.constant(b'"},"ts":')
        microseconds(rows, self.begin[index])
        self.args(rows, index).constant(b',"start_warp":').decimal(events["start_warp"][index])
        rows.constant(b',"end_warp":').decimal(events["end_warp"][index])
        rows.constant(b',"cycles":').decimal(events["dur_cycles"][index])
        # The duration in ns too: the slice cannot show one below 0 (clock skew), its end is raised.
        rows.constant(b',"dur_ns":').decimal(events["dur_ns"][index])
        self.line(rows, index)
        rows.constant(b',"status":' + json.dumps(STATUSES[MATCHED]).encode() + b"}},\n")
        places.head(rows, b"e", process[index], self.finish[index])
        rows.pick(code[index], names).constant(b',"id2":{"local":"').decimal(self.lane_id[index])
        rows.constant(b'"},"ts":')
        microseconds(rows, self.end[index])
        return rows.constant(b"}")

    def flow(self, side: str, thread: np.ndarray, ns: np.ndarray) -> Callable[[np.ndarray], Rows]:
        """A flow's start or end: an instant on the warp's thread, then the flow event bound to it."""
        instants = _texts(self.labels, f": {side}")
        phase, bind = (b"s", b"") if side == "start" else (b"f", b',"bp":"e"')
        places, process, code = self.places, self.process, self.code

        def build(index: np.ndarray) -> Rows:
            rows = places.head(Rows(len(index)), b"i", process[index], thread[index])
            rows.pick(code[index], instants).constant(b',"s":"t","ts":')
            microseconds(rows, ns[index])
            places.head(self.args(rows, index).constant(b"}},\n"), phase, process[index], thread[index])
            rows.pick(code[index], self.names).constant(b',"id":').decimal(self.flow_id[index])
            rows.constant(b',"ts":')
            microseconds(rows, ns[index])
            return rows.constant(bind + b"}")

        return build

    def unmatched(self, index: np.ndarray) -> Rows:
        """A start with no end, or an end with no start: an instant on its warp's thread."""
        events, no_end = self.events, self.no_end
        on_thread = self.lost_thread[index] >= 0
        rows = self.places.head(Rows(len(index)), b"i", self.process[index], self.lost_thread[index])
        rows.pick(self.lost_code[index], self.lost_names).constant(b',"s":"t","ts":', on_thread)
        rows.constant(b',"s":"p","ts":', ~on_thread)
        microseconds(rows, self.lost_ns[index])
        warp = np.where(no_end[index], events["start_warp"][index], events["end_warp"][index])
        cycles = np.where(no_end[index], events["start_cycles"][index], events["end_cycles"][index])
        self.args(rows, index).constant(b',"warp":').decimal(warp).constant(b',"cycles":').decimal(cycles)
        self.line(rows, index).constant(b',"status":')
        texts = [json.dumps(text).encode() for text in self.statuses]
        return rows.pick(self.no_start[index].astype(np.int64), texts).constant(b"}}")


def _mark_rows(marks: Columns, places: _Places, valued: bool) -> tuple[int, Build]:
    """Marks (or values) as instants on their warp's thread (the process where it has none)."""
    if not marks or not len(marks["launch"]):
        return 0, lambda lo, hi: Rows(0)
    launch, cta, ns = marks["launch"], marks["cta"], marks["rel_ns"]
    process = places.processes(launch, marks["sm"])
    thread = places.threads(launch, cta, marks["unit"], ~marks["rel_ns_missing"])
    drawn = np.flatnonzero(~marks["rel_ns_missing"] & (process >= 0))
    code, labels = _names(marks["mark"])
    names = _texts(labels)

    def build(index: np.ndarray) -> Rows:
        on_thread = thread[index] >= 0
        rows = places.head(Rows(len(index)), b"i", process[index], thread[index]).pick(code[index], names)
        rows.constant(b',"s":"t","ts":', on_thread).constant(b',"s":"p","ts":', ~on_thread)
        microseconds(rows, ns[index])
        rows.constant(b',"args":{"cta":').decimal(cta[index]).constant(b',"warp":').decimal(
            marks["warp"][index]
        )
        rows.constant(b',"cycles":').decimal(marks["cycles"][index])
        if valued:
            _value(rows.constant(b',"value":'), marks["value"][index], marks["value_type"][index])
        return rows.constant(b"}}")

    return _in_time_order(drawn, ns, build)


def _counter_rows(values: Columns, places: _Places) -> tuple[int, Build]:
    """Per warp thread and mark whose values change, a counter of them."""
    if not values or not len(values["launch"]):
        return 0, lambda lo, hi: Rows(0)
    launch, ns, value = values["launch"], values["rel_ns"], values["value"]
    process = places.processes(launch, values["sm"])
    thread = places.threads(launch, values["cta"], values["unit"], ~values["rel_ns_missing"])
    on_thread = np.flatnonzero((thread >= 0) & (process >= 0))
    counter, _ = groups(thread[on_thread], values["mark_id"][on_thread])
    low = np.full(int(counter.max(initial=-1)) + 1, np.inf)
    high = np.full(len(low), -np.inf)
    np.minimum.at(low, counter, value[on_thread])
    np.maximum.at(high, counter, value[on_thread])
    # A value that never changes is an arg, not a counter (NaN compares unequal: it counts).
    drawn = on_thread[~(low[counter] == high[counter])]
    code, labels = _names(values["mark"])
    names = _texts(labels)
    tracks = places.tracks

    def build(index: np.ndarray) -> Rows:
        rows = places.head(Rows(len(index)), b"C", process[index], thread[index]).pick(code[index], names)
        thread_name(rows.constant(b',"id":"'), tracks, thread[index]).constant(b'","ts":')
        microseconds(rows, ns[index])
        _value(rows.constant(b',"args":{"value":'), value[index], values["value_type"][index])
        return rows.constant(b"}}")

    return _in_time_order(drawn, ns, build)


def _value(rows: Rows, value: np.ndarray, value_type: np.ndarray) -> None:
    """A value as JSON: i32 and u32 exact as decimals; f32 (exact as a double) as the shortest
    text that reads back as it, from a table of the distinct ones; NaN and infinities, which JSON
    has no number for, as text ("nan", "inf") that both importers' counters parse."""
    is_float = value_type == "f32"
    rows.decimal(np.where(is_float, 0, value).astype(np.int64), where=~is_float)
    if not is_float.any():
        return
    distinct, code = np.unique(np.where(is_float, value, 0.0), return_inverse=True)
    texts = [repr(v) if math.isfinite(v) else json.dumps(repr(v)) for v in distinct.tolist()]
    rows.pick(code.reshape(-1), [text.encode() for text in texts], where=is_float)


def _in_time_order(
    rows: np.ndarray, ns: np.ndarray, build: Callable[[np.ndarray], Rows]
) -> tuple[int, Build]:
    """``rows`` by time, as a kind of rows."""
    index = rows[np.argsort(ns[rows], kind="stable")]
    return len(index), lambda lo, hi: build(index[lo:hi])
