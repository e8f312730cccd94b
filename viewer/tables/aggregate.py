"""Aggregate launches (``aggregate=on``) as a table: one row per (launch, CTA, unit, scope).

An aggregate launch keeps no records: each unit's segment holds, after its header, per-scope
statistics of durations in cycles (``layout.AGGREGATE_STATS_DTYPE``). The event pipeline finds
no records there, only the units' start and end clocks, which the clock fits use as for any
launch. Here the statistics are read from the same bytes: ``decode_stats`` (bytes in, arrays
out), then ``aggregate_frame`` (arrays to pandas, with nanoseconds from each launch's fitted SM
clocks). ``Trace.aggregates`` holds the session's table; ``viewer.aggregate_table(path)`` reads
one from a file.

Columns: ``count``; ``sum_cycles``, ``min_cycles``, ``max_cycles`` and ``mean_cycles`` with the
session's calibrated time shift for pairs taken off each duration (what an empty scope measures,
as ``begin_cycles`` of trace events is moved; never below zero), ``*_cycles_raw`` as the device
added them; ``sum_ns``, ``mean_ns``, ``min_ns`` and ``max_ns`` from the shifted cycles at the
unit's SM clock (``ns_per_cycle``; missing where its SM has no clock fit); ``hist_0`` ..
``hist_31``, the histogram of raw durations: bin ``b`` counts durations of ``b`` bits (bin 0:
zero cycles), the last bin every longer one too (``layout.HISTOGRAM_LOWER``/``UPPER``).
``min_*`` and ``max_*`` are missing where ``count`` is 0. ``finished``: the unit reached its
epilogue (an unfinished unit's statistics hold what it added before it stopped).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from proton_ik.contract.buffer_view import BufferView
from proton_ik.contract.layout import (
    AGGREGATE_STATS_BYTES,
    AGGREGATE_STATS_DTYPE,
    HISTOGRAM_BINS,
    BufferLayout,
)
from proton_ik.viewer.decode import CtaTable, UnitTable, decode_headers
from proton_ik.viewer.tables.runs import Launch
from proton_ik.viewer.tables.table import HOST_SCOPE_SEPARATOR, TimeShift, host_scopes, launch_name
from proton_ik.viewer.tables.timebase import SmClocks

if TYPE_CHECKING:  # imported where it is used: a render worker never imports it
    import pandas as pd

HIST_COLUMNS = tuple(f"hist_{b}" for b in range(HISTOGRAM_BINS))
AGGREGATE_COLUMNS = (
    "launch", "kernel", "name", "host_scope", "cta", "sm", "cluster", "cluster_rank", "warp", "unit", "scope",
    "scope_id", "line", "finished", "count", "sum_cycles", "min_cycles", "max_cycles", "mean_cycles", "sum_cycles_raw",
    "min_cycles_raw", "max_cycles_raw", "ns_per_cycle", "sum_ns", "mean_ns", "min_ns", "max_ns",
    *HIST_COLUMNS,
)  # fmt: skip
_LABELS = ("kernel", "name", "host_scope", "scope")
_EXTREMES = ("min_cycles", "max_cycles", "min_cycles_raw", "max_cycles_raw")  # missing where count is 0
_U32 = 0xFFFFFFFF


@dataclass(frozen=True)
class StatsTable:
    """One row per (unit, scope) of the decoded units, unit after unit, scopes in id order."""

    unit_row: np.ndarray  # int64, row in the UnitTable
    scope: np.ndarray  # int64, scope id
    count: np.ndarray  # int64, durations added (the histogram's total)
    sum: np.ndarray  # int64, cycles
    min: np.ndarray  # int64, cycles; meaningless where count is 0
    max: np.ndarray  # int64, cycles; meaningless where count is 0
    bins: np.ndarray  # int64, shape (rows, HISTOGRAM_BINS)

    def __len__(self) -> int:
        return len(self.unit_row)


def decode_stats(
    view: BufferView, layout: BufferLayout, first_cta: int = 0
) -> tuple[CtaTable, UnitTable, StatsTable]:
    """The CTA and unit tables of an aggregate launch (or a piece of one, from CTA ``first_cta``)
    and the statistics of every unit of its valid CTAs."""
    if not layout.aggregate:
        raise ValueError("this launch is a trace, not an aggregate launch: it has records, not statistics")
    ctas, units = decode_headers([view], layout, [first_cta])
    # The statistics are read through the view's slots, whose size follows the layout version.
    per_unit = layout.aggregate_scopes * AGGREGATE_STATS_BYTES // layout.slot_bytes
    first = view.slot0[ctas.valid].reshape(-1)
    if first.size and int(first.max()) + per_unit > len(view.slots):
        raise ValueError(
            "the buffer ends before its units' statistics: an aggregate launch must be stored whole, "
            "not trimmed"
        )
    rows = view.slots[first[:, None] + np.arange(per_unit)]
    stats = np.ascontiguousarray(rows).view(np.uint8).reshape(len(first), -1).view(AGGREGATE_STATS_DTYPE)
    stats = stats.reshape(-1)  # type: ignore[assignment]  # one row per (unit, scope)
    bins = stats["bins"].astype(np.int64)
    return (
        ctas,
        units,
        StatsTable(
            unit_row=np.repeat(np.arange(len(first), dtype=np.int64), layout.aggregate_scopes),
            scope=np.tile(np.arange(layout.aggregate_scopes, dtype=np.int64), len(first)),
            count=bins.sum(axis=1),
            sum=stats["sum"].astype(np.int64),
            min=(~stats["min_inverted"] & np.uint32(_U32)).astype(np.int64),
            max=stats["max"].astype(np.int64),
            bins=bins,
        ),
    )


def aggregate_frame(launches: Sequence[Launch], clocks: SmClocks, shift: TimeShift) -> pd.DataFrame:
    """The table of every aggregate launch among ``launches`` (the module docstring's columns);
    ``clocks``: the session's fitted SM clocks, by launch index."""
    import pandas as pd

    parts = [_columns(launch, clocks, shift.pair) for launch in launches if launch.layout.aggregate]
    if not parts:
        return empty_frame()
    columns = {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
    data: dict[str, object] = {}
    for name in AGGREGATE_COLUMNS:
        values = columns[name]
        if name in _LABELS:
            data[name] = pd.Categorical(values)
        elif name in _EXTREMES:
            data[name] = pd.arrays.IntegerArray(values.astype(np.int64), columns["count"] == 0)
        elif name == "line":
            data[name] = pd.arrays.IntegerArray(values.astype(np.int64), values < 0)
        else:
            data[name] = values
    return pd.DataFrame(data, columns=list(AGGREGATE_COLUMNS))


def empty_frame() -> pd.DataFrame:
    """The table of a session without aggregate launches: every column, no rows."""
    import pandas as pd

    empty = pd.DataFrame({name: pd.Series(dtype=np.int64) for name in AGGREGATE_COLUMNS})
    return empty.astype({name: "category" for name in _LABELS})


def _columns(launch: Launch, clocks: SmClocks, shift: int) -> dict[str, np.ndarray]:
    try:
        _, units, stats = decode_stats(launch.view(), launch.layout)
    except ValueError as error:
        raise ValueError(f"{launch.where}: {error}") from None
    row = stats.unit_row
    clock_rows = clocks.rows(units.smid, launch.index)[row]
    rate = np.where(clock_rows >= 0, clocks.ns_per_cycle[np.maximum(clock_rows, 0)], np.nan)
    empty = stats.count == 0
    shifted_sum = np.maximum(stats.sum - stats.count * shift, 0)
    shifted_min = np.where(empty, 0, np.maximum(stats.min - shift, 0))
    shifted_max = np.where(empty, 0, np.maximum(stats.max - shift, 0))
    mean = np.where(empty, np.nan, shifted_sum / np.maximum(stats.count, 1))
    names = {scope.id: scope.name for scope in launch.kernel.scopes}
    lines = {scope.id: -1 if scope.line is None else scope.line for scope in launch.kernel.scopes}
    scope_ids = range(launch.layout.aggregate_scopes)
    meta = launch.meta
    n = len(stats)
    return {
        "launch": np.full(n, int(meta["launch"]), dtype=np.int64),
        "kernel": np.full(n, str(meta["kernel"]), dtype=object),
        "name": np.full(n, launch_name(meta), dtype=object),
        "host_scope": np.full(n, HOST_SCOPE_SEPARATOR.join(host_scopes(meta)), dtype=object),
        "cta": units.cta[row],
        "sm": units.smid[row],
        "cluster": units.cluster[row],
        "cluster_rank": units.cluster_rank[row],
        "warp": units.unit[row] * launch.kernel.warps_per_unit,
        "unit": units.unit[row],
        "scope": np.array([names.get(i, f"<scope {i}>") for i in scope_ids], dtype=object)[stats.scope],
        "scope_id": stats.scope,
        "line": np.array([lines.get(i, -1) for i in scope_ids], dtype=np.int64)[stats.scope],
        "finished": units.finished[row],
        "count": stats.count,
        "sum_cycles": shifted_sum,
        "min_cycles": shifted_min,
        "max_cycles": shifted_max,
        "mean_cycles": mean,
        "sum_cycles_raw": stats.sum,
        "min_cycles_raw": np.where(empty, 0, stats.min),
        "max_cycles_raw": np.where(empty, 0, stats.max),
        "ns_per_cycle": rate,
        "sum_ns": shifted_sum * rate,
        "mean_ns": mean * rate,
        "min_ns": np.where(empty, np.nan, shifted_min * rate),
        "max_ns": np.where(empty, np.nan, shifted_max * rate),
        **{name: stats.bins[:, b] for b, name in enumerate(HIST_COLUMNS)},
    }
