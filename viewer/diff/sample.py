"""A session reduced to what ``diff`` compares: each scope event's duration and CTA, each CTA's
launch and warp time, each launch's kernel, span and SM clock.

Built from the pipeline's chunks, as ``render`` writes traces from them, so the session's tables
are never built: a chunk's columns are reduced to these and dropped. Durations are nanoseconds,
converted from cycles with each launch's fitted per-SM clocks (``tables.timebase``), so sessions taken
at different SM clocks compare. A CTA is a (launch, CTA index) pair, numbered launch by launch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from proton_ik.viewer.session_file import read_session
from proton_ik.viewer.tables import Chunk, Pipeline, chunk_from_tables
from proton_ik.viewer.trace import Trace, time_shift_cycles

_CTA_BITS = 32  # a CTA's key: its launch number above, its CTA index below


class ScopeKey(NamedTuple):
    """A scope as a diff matches it: its kernel, its name and its source line (None if unknown)."""

    kernel: str
    scope: str
    line: int | None


@dataclass(frozen=True)
class SessionSample:
    """One session's scope events and CTAs (see the module docstring)."""

    label: str
    keys: tuple[ScopeKey, ...]  # the session's scopes; events name them by position
    event_key: np.ndarray  # int64, per event
    event_cta: np.ndarray  # int64, per event
    event_ns: np.ndarray  # int64, per event: its duration
    cta_launch: np.ndarray  # int64, per CTA: its launch's position in launch_kernel
    cta_warp_ns: np.ndarray  # float64, per CTA: the lifetimes of its finished units, summed
    launch_kernel: tuple[str, ...]  # per launch with CTAs, in launch-number order
    launch_span_ns: np.ndarray  # float64, per launch: first unit start to last unit end
    mhz: float  # the median of the launches' fitted SM clocks
    records: int

    @property
    def kernels(self) -> list[str]:
        return sorted(set(self.launch_kernel))

    def launches_of(self, kernel: str) -> int:
        return self.launch_kernel.count(kernel)


def sample_session(source: str | Path | Trace) -> SessionSample:
    """A session file (``SessionFileError`` if it is not one) or a loaded ``Trace``, reduced."""
    if isinstance(source, Trace):
        chunk = chunk_from_tables(source.events, source.units, source.launches)
        return sample_chunks(source.name, [chunk])
    session = read_session(source)
    if not session.launches:
        return sample_chunks(str(source), [])
    return sample_chunks(str(source), Pipeline(session.launches, time_shift_cycles(session.info)).chunks())


def sample_chunks(label: str, chunks: Iterable[Chunk]) -> SessionSample:
    """A session's chunks (in launch order), reduced."""
    keys: dict[ScopeKey, int] = {}
    event_key, event_cta, event_ns, cta_keys, warp = [], [], [], [], []
    spans: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    rows: dict[int, dict] = {}
    ctas_so_far = 0
    for chunk in chunks:
        units, events = chunk.units, chunk.events
        finished = np.asarray(units["finished"], dtype=bool)
        ctas, unit_cta = np.unique(_cta_key(units), return_inverse=True)
        warp.append(np.bincount(unit_cta, np.where(finished, units["dur_ns"], 0), minlength=len(ctas)))
        cta_keys.append(ctas)
        event_cta.append(ctas_so_far + np.searchsorted(ctas, _cta_key(events)))
        ctas_so_far += len(ctas)
        event_key.append(_scope_keys(chunk, keys))
        event_ns.append(np.asarray(events["dur_ns"], dtype=np.int64))
        launch = np.asarray(units["launch"], dtype=np.int64)[finished]
        spans.append(
            _per_launch(
                launch, np.asarray(units["start_ns"])[finished], np.asarray(units["end_ns"])[finished]
            )
        )
        rows.update((int(row["launch"]), row) for row in chunk.launches)
    every_cta, cta = np.unique(_joined(cta_keys), return_inverse=True)
    numbers, cta_launch = np.unique(every_cta >> _CTA_BITS, return_inverse=True)
    span_numbers, first, last = _per_launch(*(_joined([part[i] for part in spans]) for i in range(3)))
    # A launch whose units all failed to finish has no span.
    span = pd.Series(last - first, index=span_numbers, dtype=np.float64).reindex(numbers).to_numpy()
    clocks = (row.get("mhz") for row in rows.values())
    mhz = [float(v) for v in clocks if isinstance(v, (int, float)) and np.isfinite(v)]
    return SessionSample(
        label=label,
        keys=tuple(keys),
        event_key=_joined(event_key),
        event_cta=cta[_joined(event_cta)] if len(cta) else np.zeros(0, np.int64),
        event_ns=_joined(event_ns),
        cta_launch=cta_launch.astype(np.int64),
        cta_warp_ns=np.bincount(cta, _joined(warp, np.float64), minlength=len(every_cta)),
        launch_kernel=tuple(str(rows[n]["kernel"]) if n in rows else "?" for n in numbers.tolist()),
        launch_span_ns=span,
        mhz=float(np.median(mhz)) if mhz else float("nan"),
        records=sum(int(row.get("records", 0)) for row in rows.values()),
    )


def _cta_key(columns) -> np.ndarray:
    return (np.asarray(columns["launch"], dtype=np.int64) << _CTA_BITS) | np.asarray(
        columns["cta"], dtype=np.int64
    )


def _scope_keys(chunk: Chunk, keys: dict[ScopeKey, int]) -> np.ndarray:
    """Each event's scope key, numbered in ``keys`` (new ones added, in the order first seen).
    Kernel, scope and line are factorized as columns, not packed into bits: a line may be any
    number a session file holds (a line of -1, or any negative one, is unknown)."""
    events = chunk.events
    columns = [np.asarray(events[name], dtype=np.int64) for name in ("kernel", "scope", "line")]
    if not len(columns[0]):
        return np.zeros(0, np.int64)
    codes, uniques = pd.MultiIndex.from_arrays(columns).factorize()
    numbers = [
        keys.setdefault(
            ScopeKey(chunk.kernels[kernel], chunk.scopes[scope], line if line >= 0 else None), len(keys)
        )
        for kernel, scope, line in uniques.tolist()
    ]
    return np.asarray(numbers, dtype=np.int64)[codes]


def _per_launch(
    launch: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Launch numbers, and each one's earliest ``start`` and latest ``end``."""
    order = np.argsort(launch, kind="stable")
    numbers, first = np.unique(launch[order], return_index=True)
    if not len(numbers):
        return numbers, np.zeros(0, np.int64), np.zeros(0, np.int64)
    return (
        numbers,
        np.minimum.reduceat(np.asarray(start)[order], first),
        np.maximum.reduceat(np.asarray(end)[order], first),
    )


def _joined(parts: list[np.ndarray], dtype: type = np.int64) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)
