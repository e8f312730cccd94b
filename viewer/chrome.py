"""Events in, Chrome JSON trace out (for chrome://tracing and tools that read the legacy format).

One process per (launch, SM), named "launch N: kernel / SM s"; one thread per (CTA, warp, lane),
named "CTA c warp w". Slices are complete ("X") events with ``ts``/``dur`` in microseconds
whose three decimals carry the nanoseconds, counted from the session's first unit start so the
numbers stay exact as doubles. Slices on one thread must nest; scopes that overlap without
nesting sit on their own "overlap" threads. Within a thread, slices are written by start time,
and those starting together outermost first, as both importers want.

The text is built column by column with ``byterows``: one JSON object per line, no per-event
Python.
"""

from __future__ import annotations

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

CHUNK_ROWS = 1 << 15


def write_chrome(
    path: str | Path,
    events: pd.DataFrame,
    units: pd.DataFrame,
    launches: pd.DataFrame,
    info: Mapping[str, Any],
    *,
    progress: bool | None = None,
) -> Path:
    """Write events (and unit lifetimes) as Chrome JSON; ``progress=None`` shows a bar past 1e6 events."""
    path = Path(path)
    slices = _slices(events, units)
    ids = _ids(slices, launches)
    shared = _shared_by_thread(ids, slices)
    other = {"proton_ik": dict(info), "launches": json.loads(launches.to_json(orient="records"))}
    parts = [
        (len(ids.process_launch), lambda lo, hi: _process_rows(ids, slices.kernels, lo, hi)),
        (len(ids.thread_pid), lambda lo, hi: _thread_rows(ids, lo, hi)),
        (len(slices.ts), lambda lo, hi: _slice_rows(slices, ids, shared, lo, hi)),
    ]
    total = sum(rows for rows, _ in parts)
    show = len(events) > PROGRESS_EVENTS if progress is None else progress
    written = 0
    with open(path, "wb") as file:
        file.write(
            b'{"displayTimeUnit":"ns","otherData":' + json.dumps(other).encode() + b',"traceEvents":[\n'
        )
        with tqdm(total=total, desc="chrome json", unit="event", unit_scale=True, disable=not show) as bar:
            for rows, build in parts:
                for lo in range(0, rows, CHUNK_ROWS):
                    hi = min(rows, lo + CHUNK_ROWS)
                    # Every object but the last is followed by a comma.
                    comma = np.arange(written + lo, written + hi) < total - 1
                    file.write(join(build(lo, hi).constant(b",", comma).constant(b"\n")))
                    bar.update(hi - lo)
                written += rows
        file.write(b"]}\n")
    return path


@dataclass(frozen=True)
class _Slices:
    """Scope events and finished units' lifetimes, as columns, with times relative to the session start."""

    launch: np.ndarray
    kernel: np.ndarray  # index into kernels
    kernels: list[str]
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


def _slices(events: pd.DataFrame, units: pd.DataFrame) -> _Slices:
    finished = units[units["finished"]]
    kernels = sorted({*_labels(events["kernel"]), *_labels(finished["kernel"])})
    scope_names = _labels(events["scope"])
    names = [LIFETIME, *scope_names]

    def both(scoped: Any, lives: Any) -> np.ndarray:
        return np.concatenate([np.asarray(scoped, dtype=np.int64), np.asarray(lives, dtype=np.int64)])

    return _Slices(
        launch=both(events["launch"], finished["launch"]),
        kernel=both(_codes(events["kernel"], kernels), _codes(finished["kernel"], kernels)),
        kernels=kernels,
        sm=both(events["sm"], finished["sm"]),
        cta=both(events["cta"], finished["cta"]),
        unit=both(events["unit"], finished["unit"]),
        warp=both(events["warp"], finished["warp"]),
        lane=both(events["lane"], np.zeros(len(finished))),
        name=both(1 + _codes(events["scope"], scope_names), np.zeros(len(finished))),
        names=names,
        ts=both(events["begin_rel_ns"], finished["start_rel_ns"].astype(np.int64)),
        dur=both(events["dur_ns"], finished["dur_ns"].astype(np.int64)),
        cycles=both(
            events["dur_cycles"], (finished["end_cycles"] - finished["start_cycles"]).astype(np.int64)
        ),
        depth=both(events["depth"] + 1, np.zeros(len(finished))),
        line=both(events["line"].fillna(-1), np.full(len(finished), -1)),
    )


def _labels(column: pd.Series) -> list[str]:
    """The distinct values of a column of names, as strings, sorted."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return sorted(str(c) for c in column.cat.categories)
    return sorted(str(c) for c in pd.unique(column))


def _codes(column: pd.Series, labels: Sequence[str]) -> np.ndarray:
    """Each value's index in ``labels``."""
    position = {label: i for i, label in enumerate(labels)}
    if isinstance(column.dtype, pd.CategoricalDtype):
        lookup = np.array([position[str(c)] for c in column.cat.categories] or [0], dtype=np.int64)
        return lookup[column.cat.codes.to_numpy()]
    return pd.Categorical(column.astype(str), categories=list(labels)).codes.astype(np.int64)


@dataclass(frozen=True)
class _Ids:
    """pid per (launch, SM) and tid per (CTA, unit, lane) within it, numbered in sorted order so they sort
    numerically; and the order in which slices are written."""

    process_launch: np.ndarray  # per process: launch, kernel, SM
    process_kernel: np.ndarray
    process_sm: np.ndarray
    thread_pid: np.ndarray  # per thread: pid, tid, kernel, CTA, first warp, warps per unit, lane
    thread_tid: np.ndarray
    thread_kernel: np.ndarray
    thread_cta: np.ndarray
    thread_warp: np.ndarray
    thread_width: np.ndarray
    thread_lane: np.ndarray
    slice_thread: np.ndarray
    order: np.ndarray


def _ids(slices: _Slices, launches: pd.DataFrame) -> _Ids:
    launch_numbers = np.unique(slices.launch)
    launch = np.searchsorted(launch_numbers, slices.launch)
    process, process_first = groups(launch, slices.sm)
    thread, thread_first = groups(launch, slices.sm, slices.cta, slices.unit, slices.lane)
    thread_process = process[thread_first]
    # Threads are numbered in (launch, SM, CTA, unit, lane) order, so each process's are contiguous.
    process_start = np.searchsorted(thread_process, np.arange(len(process_first)))
    thread_tid = np.arange(len(thread_first)) - process_start[thread_process] + 1
    wide = dict(zip(launches["launch"].tolist(), launches["warps_per_unit"].tolist(), strict=True))
    width = np.array([int(wide.get(int(n), 1)) for n in launch_numbers], dtype=np.int64)
    return _Ids(
        process_launch=slices.launch[process_first],
        process_kernel=slices.kernel[process_first],
        process_sm=slices.sm[process_first],
        thread_pid=thread_process + 1,
        thread_tid=thread_tid,
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


def _process_rows(ids: _Ids, kernels: list[str], lo: int, hi: int) -> Rows:
    """A name and a sort index per process, two lines each: rows ``lo`` to ``hi`` of processes."""
    index = np.arange(lo, hi)
    pid = index + 1
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


def _shared_by_thread(ids: _Ids, slices: _Slices) -> tuple[Rows, Rows]:
    """The parts of a slice's text that all slices of a thread share, one row per thread:
    up to its name, and from its arguments up to its cycles."""
    n = len(ids.thread_pid)
    head = (
        Rows(n)
        .constant(b'{"ph":"X","cat":')
        .pick(ids.thread_kernel, [json.dumps(kernel).encode() for kernel in slices.kernels])
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
        .decimal(ids.process_sm[ids.thread_pid - 1])
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
