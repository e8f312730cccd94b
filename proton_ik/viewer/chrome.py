"""Session chunks in, Chrome JSON trace out (for chrome://tracing and tools that read the legacy format).

One process per (launch, SM), named "launch N: kernel / SM s"; one thread per (CTA, warp, lane),
named "CTA c warp w". Slices are complete ("X") events with ``ts``/``dur`` in microseconds
whose three decimals carry the nanoseconds, counted from the session's first unit start so the
numbers stay exact as doubles. Slices on one thread must nest; scopes that overlap without
nesting sit on their own "overlap" threads. Within a thread, slices are written by start time,
and those starting together outermost first, as both importers want.

The trace is written chunk by chunk (``pipeline.Chunk``); the session info and the launch table
go last, in ``otherData``. Processes and threads are numbered as they first appear, so a launch
whose pieces span chunks keeps its processes. The text is built column by column with
``byterows``: one JSON object per line, no per-event Python.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from proton_ik.viewer.byterows import Rows, join
from proton_ik.viewer.groups import groups
from proton_ik.viewer.perfetto import LIFETIME, PROGRESS_EVENTS
from proton_ik.viewer.pipeline import Chunk, Columns, chunk_from_tables

CHUNK_ROWS = 1 << 15
_LIFE_COLUMNS = (
    "kernel", "launch", "sm", "cta", "unit", "warp", "start_rel_ns", "dur_ns", "start_cycles", "end_cycles",
)  # fmt: skip


def write_chrome(
    path: str | Path,
    events: pd.DataFrame,
    units: pd.DataFrame,
    launches: pd.DataFrame,
    info: Mapping[str, Any],
    *,
    progress: bool | None = None,
) -> Path:
    """Write a session's tables (events, unit lifetimes, launches) as Chrome JSON;
    ``progress=None`` shows a bar past 1e6 events."""
    show = len(events) > PROGRESS_EVENTS if progress is None else progress
    with (
        tqdm(desc="chrome json", unit="event", unit_scale=True, disable=not show) as bar,
        ChromeWriter(path, info, bar=bar) as writer,
    ):
        writer.add(chunk_from_tables(events, units, launches))
    return Path(path)


@dataclass
class _OpenLaunch:
    """A launch whose pieces go on into the next chunk: the pid and next tid of each of its SMs."""

    number: int
    processes: dict[int, tuple[int, int]]


class ChromeWriter:
    """Writes chunks of a session, in launch order, to a Chrome JSON file; use it as a context manager."""

    def __init__(self, path: str | Path, info: Mapping[str, Any], *, bar: tqdm | None = None):
        self.path = Path(path)
        self.info = dict(info)
        self._file = open(self.path, "wb")  # noqa: SIM115 (closed by close())
        self._file.write(b'{"displayTimeUnit":"ns","traceEvents":[\n')
        self._bar = bar
        self._written = 0  # objects so far: every one after the first starts with a comma
        self._pids = 0
        self._open: _OpenLaunch | None = None
        self._launches: list[dict[str, Any]] = []

    def add(self, chunk: Chunk) -> None:
        """Write a chunk's processes, threads and slices."""
        slices = _slices(chunk)
        ids = self._ids(slices, chunk)
        shared = _shared_by_thread(ids, chunk.kernels)
        new = np.flatnonzero(ids.process_new)
        self._write(len(new), lambda lo, hi: _process_rows(ids, new[lo:hi], chunk.kernels))
        self._write(len(ids.thread_pid), lambda lo, hi: _thread_rows(ids, lo, hi))
        self._write(len(slices.ts), lambda lo, hi: _slice_rows(slices, ids, shared, lo, hi))
        self._launches.extend(chunk.launches)

    def close(self) -> Path:
        """Write the session info and the launch table, and close the file."""
        launches = pd.DataFrame(self._launches).to_json(orient="records") if self._launches else "[]"
        other = b'{"proton_ik":' + json.dumps(self.info).encode() + b',"launches":' + launches.encode() + b"}"
        self._file.write(b'\n],"otherData":' + other + b"}\n")
        self._file.close()
        return self.path

    def __enter__(self) -> ChromeWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _write(self, rows: int, build) -> None:
        for lo in range(0, rows, CHUNK_ROWS):
            hi = min(rows, lo + CHUNK_ROWS)
            lines = Rows(hi - lo).constant(b",\n", np.arange(self._written, self._written + hi - lo) > 0)
            self._file.write(join(lines.rows(build(lo, hi))))
            self._written += hi - lo
            if self._bar is not None:
                self._bar.update(hi - lo)

    def _ids(self, slices: _Slices, chunk: Chunk) -> _Ids:
        """Number the chunk's processes and threads after the last chunk's; a launch continued
        from it keeps its processes, and their threads count on."""
        ids = _ids(slices, chunk.widths)
        open_launch = self._open
        n = len(ids.process_launch)
        pid = np.zeros(n, dtype=np.int64)
        tid_base = np.zeros(n, dtype=np.int64)
        new = np.ones(n, dtype=bool)
        if open_launch is not None:
            for i in np.flatnonzero(ids.process_launch == open_launch.number).tolist():
                known = open_launch.processes.get(int(ids.process_sm[i]))
                if known is not None:
                    (pid[i], tid_base[i]), new[i] = known, False
        pid[new] = self._pids + 1 + np.arange(int(new.sum()))
        self._pids += int(new.sum())
        threads = np.bincount(ids.thread_process, minlength=n)
        ending = {int(row["launch"]) for row in chunk.launches}
        before, self._open = self._open, None
        for i in range(n):
            number = int(ids.process_launch[i])
            if number not in ending:  # at most one launch: pieces come in launch order
                if self._open is None:
                    # The SMs of all its pieces so far: a later piece may run on any of them again.
                    kept = before.processes if before is not None and before.number == number else {}
                    self._open = _OpenLaunch(number, dict(kept))
                self._open.processes[int(ids.process_sm[i])] = (int(pid[i]), int(tid_base[i] + threads[i]))
        if self._open is None and before is not None and before.number not in ending:
            self._open = before  # a piece that left no slices: the launch goes on
        return ids.numbered(pid, tid_base, new)


@dataclass(frozen=True)
class _Slices:
    """Scope events and finished units' lifetimes, as columns, with times relative to the session start."""

    launch: np.ndarray
    kernel: np.ndarray  # index into the chunk's kernels
    sm: np.ndarray
    cta: np.ndarray
    unit: np.ndarray
    warp: np.ndarray
    lane: np.ndarray
    name: np.ndarray  # index into names
    names: list[str]
    ts: np.ndarray  # ns
    dur: np.ndarray  # ns
    cycles: np.ndarray
    depth: np.ndarray  # 0 for lifetimes, 1 + the scope's depth for scopes
    line: np.ndarray  # -1 where none


def _slices(chunk: Chunk) -> _Slices:
    events = chunk.events
    finished = chunk.units["finished"]
    lives: Columns = {name: chunk.units[name][finished] for name in _LIFE_COLUMNS}
    n_lives = int(finished.sum())

    def both(scoped: Any, lived: Any) -> np.ndarray:
        return np.concatenate([np.asarray(scoped, dtype=np.int64), np.asarray(lived, dtype=np.int64)])

    return _Slices(
        launch=both(events["launch"], lives["launch"]),
        kernel=both(events["kernel"], lives["kernel"]),
        sm=both(events["sm"], lives["sm"]),
        cta=both(events["cta"], lives["cta"]),
        unit=both(events["unit"], lives["unit"]),
        warp=both(events["warp"], lives["warp"]),
        lane=both(events["lane"], np.zeros(n_lives)),
        name=both(1 + events["scope"], np.zeros(n_lives)),
        names=[LIFETIME, *chunk.scopes],
        ts=both(events["begin_rel_ns"], lives["start_rel_ns"]),
        dur=both(events["dur_ns"], lives["dur_ns"]),
        cycles=both(events["dur_cycles"], lives["end_cycles"] - lives["start_cycles"]),
        depth=both(events["depth"] + 1, np.zeros(n_lives)),
        line=both(events["line"], np.full(n_lives, -1)),
    )


@dataclass(frozen=True)
class _Ids:
    """pid per (launch, SM) and tid per (CTA, unit, lane) within it, numbered in sorted order so they sort
    numerically; and the order in which slices are written."""

    process_launch: np.ndarray  # per process: launch, kernel, SM
    process_kernel: np.ndarray
    process_sm: np.ndarray
    thread_process: np.ndarray  # per thread: its process, tid within it, kernel, CTA, first warp,
    thread_rank: np.ndarray  # warps per unit, lane
    thread_kernel: np.ndarray
    thread_cta: np.ndarray
    thread_warp: np.ndarray
    thread_width: np.ndarray
    thread_lane: np.ndarray
    slice_thread: np.ndarray
    order: np.ndarray
    process_pid: np.ndarray | None = None  # set by ``numbered``
    process_new: np.ndarray | None = None  # not named by an earlier chunk
    thread_pid: np.ndarray | None = None
    thread_tid: np.ndarray | None = None

    def numbered(self, pid: np.ndarray, tid_base: np.ndarray, new: np.ndarray) -> _Ids:
        return dataclasses.replace(
            self,
            process_pid=pid,
            process_new=new,
            thread_pid=pid[self.thread_process],
            thread_tid=tid_base[self.thread_process] + self.thread_rank,
        )


def _ids(slices: _Slices, widths: Mapping[int, int]) -> _Ids:
    launch_numbers = np.unique(slices.launch)
    launch = np.searchsorted(launch_numbers, slices.launch)
    process, process_first = groups(launch, slices.sm)
    thread, thread_first = groups(launch, slices.sm, slices.cta, slices.unit, slices.lane)
    thread_process = process[thread_first]
    # Threads are numbered in (launch, SM, CTA, unit, lane) order, so each process's are contiguous.
    process_start = np.searchsorted(thread_process, np.arange(len(process_first)))
    width = np.array([int(widths.get(int(n), 1)) for n in launch_numbers], dtype=np.int64)
    return _Ids(
        process_launch=slices.launch[process_first],
        process_kernel=slices.kernel[process_first],
        process_sm=slices.sm[process_first],
        thread_process=thread_process,
        thread_rank=np.arange(len(thread_first)) - process_start[thread_process] + 1,
        thread_kernel=slices.kernel[thread_first],
        thread_cta=slices.cta[thread_first],
        thread_warp=slices.warp[thread_first],
        thread_width=width[launch[thread_first]],
        thread_lane=slices.lane[thread_first],
        slice_thread=thread,
        order=_thread_time_order(thread, slices.ts, slices.depth),
    )


def _thread_time_order(thread: np.ndarray, ts: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Sort by thread, then start time, then depth (outermost first)."""
    if len(ts) == 0:
        return np.zeros(0, np.int64)
    by_depth = np.argsort(depth.astype(np.int16 if depth.max() < 1 << 15 else np.int64), kind="stable")
    low = ts.min()
    span = int(ts.max()) - int(low) + 1
    if (int(thread.max()) + 1) * span < 1 << 62:
        key = thread[by_depth] * span + (ts[by_depth] - low)
        return by_depth[np.argsort(key, kind="stable")]
    return np.lexsort((depth, ts, thread))


def _process_rows(ids: _Ids, index: np.ndarray, kernels: Sequence[str]) -> Rows:
    """A name and a sort index per process (the given ones), two lines each."""
    pid = ids.process_pid[index]
    kernel_text = [json.dumps(kernel)[1:-1].encode() for kernel in kernels]
    n = len(index)
    name = (
        Rows(n)
        .constant(b'{"ph":"M","name":"process_name","pid":')
        .decimal(pid)
        .constant(b',"tid":0,"args":{"name":"launch ')
        .decimal(ids.process_launch[index])
        .constant(b": ")
        .pick(ids.process_kernel[index], kernel_text)
        .constant(b" / SM ")
        .decimal(ids.process_sm[index])
        .constant(b'"}},\n{"ph":"M","name":"process_sort_index","pid":')
        .decimal(pid)
        .constant(b',"tid":0,"args":{"sort_index":')
        .decimal(pid)
        .constant(b"}}")
    )
    return name


def _thread_rows(ids: _Ids, lo: int, hi: int) -> Rows:
    """A name ("CTA 3 warp 4", "CTA 3 warps 4-7 overlap 1") and a sort index per thread."""
    index = np.arange(lo, hi)
    pid, tid = ids.thread_pid[index], ids.thread_tid[index]
    width, warp, lane = ids.thread_width[index], ids.thread_warp[index], ids.thread_lane[index]
    single, overlap = width <= 1, lane > 0
    return (
        Rows(len(index))
        .constant(b'{"ph":"M","name":"thread_name","pid":')
        .decimal(pid)
        .constant(b',"tid":')
        .decimal(tid)
        .constant(b',"args":{"name":"CTA ')
        .decimal(ids.thread_cta[index])
        .constant(b" warp ", single)
        .constant(b" warps ", ~single)
        .decimal(warp)
        .constant(b"-", ~single)
        .decimal(warp + width - 1, where=~single)
        .constant(b" overlap ", overlap)
        .decimal(lane, where=overlap)
        .constant(b'"}},\n{"ph":"M","name":"thread_sort_index","pid":')
        .decimal(pid)
        .constant(b',"tid":')
        .decimal(tid)
        .constant(b',"args":{"sort_index":')
        .decimal(tid)
        .constant(b"}}")
    )


def _shared_by_thread(ids: _Ids, kernels: Sequence[str]) -> tuple[Rows, Rows]:
    """The parts of a slice's text that all slices of a thread share, one row per thread:
    up to its name, and from its arguments up to its cycles."""
    n = len(ids.thread_pid)
    head = (
        Rows(n)
        .constant(b'{"ph":"X","cat":')
        .pick(ids.thread_kernel, [json.dumps(kernel).encode() for kernel in kernels])
        .constant(b',"pid":')
        .decimal(ids.thread_pid)
        .constant(b',"tid":')
        .decimal(ids.thread_tid)
        .constant(b',"name":')
    )
    args = (
        Rows(n)
        .constant(b',"args":{"cta":')
        .decimal(ids.thread_cta)
        .constant(b',"sm":')
        .decimal(ids.process_sm[ids.thread_process])
        .constant(b',"warp":')
        .decimal(ids.thread_warp)
        .constant(b',"cycles":')
    )
    return head, args


def _slice_rows(slices: _Slices, ids: _Ids, shared: tuple[Rows, Rows], lo: int, hi: int) -> Rows:
    """Complete events ``lo`` to ``hi``, in thread and time order."""
    index = ids.order[lo:hi]
    thread = ids.slice_thread[index]
    head, args = shared
    line = slices.line[index]
    has_line = line >= 0
    rows = (
        Rows(len(index))
        .take(head, thread)
        .pick(slices.name[index], [json.dumps(name).encode() for name in slices.names])
        .constant(b',"ts":')
    )
    _microseconds(rows, slices.ts[index])
    rows.constant(b',"dur":')
    _microseconds(rows, slices.dur[index])
    return (
        rows.take(args, thread)
        .decimal(slices.cycles[index])
        .constant(b',"line":')
        .decimal(np.maximum(line, 0), where=has_line)
        .constant(b"null", ~has_line)
        .constant(b"}}")
    )


def _microseconds(rows: Rows, ns: np.ndarray) -> None:
    """Nanoseconds as exact decimal microseconds: "-12.345"."""
    negative = ns < 0
    whole, fraction = np.divmod(np.abs(ns), 1000)
    if negative.any():
        rows.constant(b"-", negative)
    rows.decimal(whole).constant(b".").decimal(fraction, digits=3)
