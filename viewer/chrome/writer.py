"""Session chunks in, Chrome JSON trace out (for chrome://tracing and tools that read the legacy format).

The track model (``tracks``) as Chrome draws it: a process per (launch, SM), named "launch N:
kernel / SM s"; a thread per unit track, named by its place: "slot 2 warp 4" (timeline "slots",
the default: the CTAs that ran in an SM's slot one after another) or "CTA 42 warp 4" ("ctas").
Each slice's args name its CTA, SM, warp and cycles; a scope's, its source line and file (where
the kernel's scope table has one). Slices are complete ("X") events with
``ts``/``dur`` in microseconds whose three decimals carry the nanoseconds, counted from the
session's first unit start so the numbers stay exact as doubles. Slices on one thread must
nest; scopes that overlap without nesting sit on their own "overlap" threads. Within a thread,
slices are written by start time, and those starting together outermost first, as both
importers want. Events, marks and values follow each chunk's slices (``events``): async
slices on the CTA's process, flows between warp threads, instants and counters.

The trace is written chunk by chunk (``tables.Chunk``); the session info and the launch table
go last, in ``otherData``. Processes and threads are numbered as they first appear, so a launch
whose pieces span chunks keeps its processes (and with slots its threads). The text is built
column by column with ``arrays.byterows``: one JSON object per line, no per-event Python.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from proton_ik.viewer.arrays import Rows, join
from proton_ik.viewer.chrome.events import AsyncIds, ChromeTracks, async_rows, microseconds
from proton_ik.viewer.perfetto import PROGRESS_EVENTS
from proton_ik.viewer.tables import AsyncParts, Chunk, Columns, batches, chunk_from_tables
from proton_ik.viewer.tracks import (
    FILE_ARG,
    LIFETIME,
    TREE_COLUMNS,
    OpenTracks,
    Tracks,
    check_timeline,
    process_name,
    stacked,
    thread_name,
    track_tree,
)

_LIFE_COLUMNS = (*TREE_COLUMNS, "start_rel_ns", "dur_ns", "start_cycles", "end_cycles")


def write_chrome(
    path: str | Path,
    events: pd.DataFrame,
    units: pd.DataFrame,
    launches: pd.DataFrame,
    info: Mapping[str, Any],
    *,
    timeline: str | None = None,
    progress: bool | None = None,
    async_parts: Sequence[AsyncParts] = (),
) -> Path:
    """Write a session's tables (events, unit lifetimes, launches; ``async_parts``: its events,
    marks and values, ``tables.parts_of``) as Chrome JSON; ``timeline``: "slots" (the
    default) or "ctas" (``tracks``); ``progress=None`` shows a bar past 1e6 events."""
    show = len(events) > PROGRESS_EVENTS if progress is None else progress
    with (
        tqdm(desc="chrome json", unit="event", unit_scale=True, disable=not show) as bar,
        ChromeWriter(path, info, timeline=timeline, bar=bar) as writer,
    ):
        writer.add(replace(chunk_from_tables(events, units, launches), async_parts=tuple(async_parts)))
    return Path(path)


@dataclass
class _OpenLaunch:
    """A launch whose pieces go on into the next chunk: its tracks (pids by SM; with slots, tids
    by unit track) and each SM's next tid."""

    tracks: OpenTracks
    next_tid: dict[int, int]


class ChromeWriter:
    """Writes chunks of a session, in launch order, to a Chrome JSON file; use it as a context manager."""

    def __init__(
        self,
        path: str | Path,
        info: Mapping[str, Any],
        *,
        timeline: str | None = None,
        bar: tqdm | None = None,
    ):
        self.timeline = check_timeline(timeline)
        self.path = Path(path)
        self.info = dict(info)
        self._file = open(self.path, "wb")  # noqa: SIM115 (closed by close())
        self._file.write(b'{"displayTimeUnit":"ns","traceEvents":[\n')
        self._bar = bar
        self._written = 0  # objects so far: every one after the first starts with a comma
        self._pids = 0
        self._open: _OpenLaunch | None = None
        self._launches: list[dict[str, Any]] = []
        self._async_ids = AsyncIds()

    def add(self, chunk: Chunk) -> None:
        """Write a chunk's processes, threads and slices, then its events, marks and values."""
        lives = chunk.lifetimes(_LIFE_COLUMNS)
        slices = _slices(chunk, lives)
        carried = None if self._open is None else self._open.tracks
        ids = self._ids(track_tree(chunk, lives, self.timeline, carried), slices, chunk)
        head, args = _shared_by_thread(ids)
        new = np.flatnonzero(ids.process_new)
        self._write(len(new), lambda lo, hi: _process_rows(ids, new[lo:hi]))
        threads = np.flatnonzero(ids.thread_new)
        self._write(len(threads), lambda lo, hi: _thread_rows(ids, threads[lo:hi]))
        self._write(len(slices.ts), lambda lo, hi: _slice_rows(slices, ids, head, args, lo, hi))
        if chunk.async_parts:  # events, marks and values (``events``)
            numbered = ChromeTracks(ids.tracks, ids.process_pid, ids.thread_tid)
            for rows, build in async_rows(chunk, lives, numbered, self._async_ids):
                self._write(rows, build)
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
        for lo, hi in batches(rows):
            lines = Rows(hi - lo).constant(b",\n", np.arange(self._written, self._written + hi - lo) > 0)
            self._file.write(join(lines.rows(build(lo, hi))))  # type: ignore[arg-type]  # an ndarray is a buffer (numpy stubs: from 3.12)
            self._written += hi - lo
            if self._bar is not None:
                self._bar.update(hi - lo)

    def _ids(self, tracks: Tracks, slices: _Slices, chunk: Chunk) -> _Ids:
        """Number the chunk's processes and threads after the last chunk's; a launch continued
        from it keeps its processes (and with slots its threads), and their tids count on."""
        thread_process = tracks.unit_sm
        before = self._open
        pid, _, tid = tracks.known(None if before is None else before.tracks)
        new = pid < 0
        pid[new] = self._pids + 1 + np.arange(int(new.sum()))
        self._pids += int(new.sum())
        base = np.zeros(len(pid), dtype=np.int64)
        if before is not None:
            for i in np.flatnonzero(~new).tolist():
                base[i] = before.next_tid[int(tracks.sm[i])]
        # Threads come by process: a new one takes its process's next tid.
        new_thread = tid < 0
        counted = np.cumsum(new_thread)
        first = np.searchsorted(thread_process, np.arange(len(pid)))
        prior = np.concatenate([[0], counted])[first]
        tid = np.where(new_thread, base[thread_process] + counted - prior[thread_process], tid)
        next_tid = base + np.bincount(thread_process[new_thread], minlength=len(pid))
        ending = {int(row["launch"]) for row in chunk.launches}
        # At most one launch goes on into the next chunk: pieces come in launch order.
        going_on = next((n for n in tracks.launch.tolist() if n not in ending), None)
        self._open = None
        if going_on is not None:
            places = np.zeros(len(tracks.place), np.int64)  # Chrome has no place of its own
            kept = tracks.keep(going_on, (pid, places, tid), None if before is None else before.tracks)
            tids = dict(before.next_tid) if before is not None and before.tracks.number == going_on else {}
            at = tracks.launch_index(going_on)
            tids.update(
                (int(tracks.sm[i]), int(next_tid[i])) for i in np.flatnonzero(tracks.sm_launch == at).tolist()
            )
            self._open = _OpenLaunch(kept, tids)
        return _Ids(
            tracks=tracks,
            thread_process=thread_process,
            order=_thread_time_order(tracks.row_track, slices.ts, slices.depth),
            process_pid=pid,
            process_new=new,
            thread_pid=pid[thread_process],
            thread_tid=tid,
            thread_new=new_thread,
        )


@dataclass(frozen=True)
class _Slices:
    """Scope events and finished units' lifetimes, as columns, with times relative to the session start."""

    name: np.ndarray  # index into names
    names: list[str]
    ts: np.ndarray  # ns
    dur: np.ndarray  # ns
    cycles: np.ndarray
    depth: np.ndarray  # 0 for lifetimes, 1 + the scope's depth for scopes
    line: np.ndarray  # -1 where none
    file: np.ndarray  # index into files, -1 where none
    files: tuple[str, ...]


def _slices(chunk: Chunk, lives: Columns) -> _Slices:
    events = chunk.events
    n_lives = len(lives["launch"])
    return _Slices(
        name=stacked(1 + events["scope"], np.zeros(n_lives)),
        names=[LIFETIME, *chunk.scopes],
        ts=stacked(events["begin_rel_ns"], lives["start_rel_ns"]),
        dur=stacked(events["dur_ns"], lives["dur_ns"]),
        cycles=stacked(events["dur_cycles"], lives["end_cycles"] - lives["start_cycles"]),
        depth=stacked(events["depth"] + 1, np.zeros(n_lives)),
        line=stacked(events["line"], np.full(n_lives, -1)),
        file=stacked(events["file"], np.full(n_lives, -1)),
        files=chunk.files,
    )


@dataclass(frozen=True)
class _Ids:
    """The track model as Chrome draws it: a process per SM track, a thread per unit track, in
    the model's (launch, SM, place, unit, lane) order, so that pids and each process's tids sort
    numerically; and the order in which slices are written."""

    tracks: Tracks
    thread_process: np.ndarray  # per thread (unit track): its process, and its tid within it
    order: np.ndarray
    process_pid: np.ndarray
    process_new: np.ndarray  # not named by an earlier chunk
    thread_pid: np.ndarray
    thread_tid: np.ndarray
    thread_new: np.ndarray


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


def _process_rows(ids: _Ids, index: np.ndarray) -> Rows:
    """A name and a sort index per process (the given ones), two lines each."""
    tracks = ids.tracks
    pid = ids.process_pid[index]
    launch = tracks.sm_launch[index]
    names = [
        json.dumps(process_name(number, kernel, sm)).encode()
        for number, kernel, sm in zip(
            tracks.launch[launch].tolist(), tracks.kernel[launch], tracks.sm[index].tolist(), strict=True
        )
    ]
    return (
        Rows(len(index))
        .constant(b'{"ph":"M","name":"process_name","pid":')
        .decimal(pid)
        .constant(b',"tid":0,"args":{"name":')
        .pick(np.arange(len(index)), names)
        .constant(b'}},\n{"ph":"M","name":"process_sort_index","pid":')
        .decimal(pid)
        .constant(b',"tid":0,"args":{"sort_index":')
        .decimal(pid)
        .constant(b"}}")
    )


def _thread_rows(ids: _Ids, index: np.ndarray) -> Rows:
    """A name ("slot 3 warp 4", "CTA 3 warps 4-7 overlap 1") and a sort index per thread (the
    given ones)."""
    pid, tid = ids.thread_pid[index], ids.thread_tid[index]
    rows = (
        Rows(len(index))
        .constant(b'{"ph":"M","name":"thread_name","pid":')
        .decimal(pid)
        .constant(b',"tid":')
        .decimal(tid)
        .constant(b',"args":{"name":"')
    )
    return (
        thread_name(rows, ids.tracks, index)
        .constant(b'"}},\n{"ph":"M","name":"thread_sort_index","pid":')
        .decimal(pid)
        .constant(b',"tid":')
        .decimal(tid)
        .constant(b',"args":{"sort_index":')
        .decimal(tid)
        .constant(b"}}")
    )


def _shared_by_thread(ids: _Ids) -> tuple[Rows, Rows]:
    """The parts of a slice's text that all slices of a thread share, one row per thread: up to
    its name, and from its arguments after the CTA up to its cycles."""
    tracks = ids.tracks
    n = len(tracks.unit)
    head = (
        Rows(n)
        .constant(b'{"ph":"X","cat":')
        .pick(tracks.sm_launch[tracks.unit_sm], [json.dumps(kernel).encode() for kernel in tracks.kernel])
        .constant(b',"pid":')
        .decimal(ids.thread_pid)
        .constant(b',"tid":')
        .decimal(ids.thread_tid)
        .constant(b',"name":')
    )
    args = (
        Rows(n)
        .constant(b',"sm":')
        .decimal(tracks.sm[tracks.unit_sm])
        .constant(b',"warp":')
        .decimal(tracks.warp)
        .constant(b',"cycles":')
    )
    return head, args


def _slice_rows(slices: _Slices, ids: _Ids, head: Rows, args: Rows, lo: int, hi: int) -> Rows:
    """Complete events ``lo`` to ``hi``, in thread and time order."""
    index = ids.order[lo:hi]
    tracks = ids.tracks
    thread = tracks.row_track[index]
    line, file = slices.line[index], slices.file[index]
    has_line, has_file = line >= 0, file >= 0
    rows = (
        Rows(len(index))
        .take(head, thread)
        .pick(slices.name[index], [json.dumps(name).encode() for name in slices.names])
        .constant(b',"ts":')
    )
    microseconds(rows, slices.ts[index])
    rows.constant(b',"dur":')
    microseconds(rows, slices.dur[index])
    cta = tracks.row_cta[index]
    rows.constant(b',"args":{"cta":').decimal(tracks.cta[cta])
    cluster, rank = tracks.cta_cluster[cta], tracks.cta_cluster_rank[cta]
    if (recorded := cluster >= 0).any():
        rows.constant(b',"cluster":', recorded).decimal(np.maximum(cluster, 0), where=recorded)
        rows.constant(b',"cluster_rank":', recorded).decimal(np.maximum(rank, 0), where=recorded)
    rows.take(args, thread)
    rows.decimal(slices.cycles[index]).constant(b',"line":')
    rows.decimal(np.maximum(line, 0), where=has_line).constant(b"null", ~has_line)
    if has_file.any():
        files = [json.dumps(name).encode() for name in slices.files]
        rows.constant(f',"{FILE_ARG}":'.encode(), has_file).pick(np.maximum(file, 0), files, has_file)
    return rows.constant(b"}}")
