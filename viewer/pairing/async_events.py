"""Pair event records across the units of a CTA, and pick out marks: arrays in, rows out.

An event (``pl.start_event`` / ``pl.end_event``) may start in one warp and end in another: a
TMA producer starts it, each warp of a consumer partition ends it. Records are grouped by CTA,
event and instance (``index=``), and taken in time order: all units of a CTA read the SM clock.

The SM's sub-partitions do not read it in perfect step: on an H100, a warp's start before a
``bar.sync`` read the clock 2 cycles after another warp's end of the same instance after it.
So across units, a start counts as earlier than an end up to ``CLOCK_SKEW_CYCLES`` after it, and
within a unit, records keep the order the unit wrote them in. No program can end an event in
one warp and start it again in another that quickly: the handoff goes through a barrier or an
mbarrier, which takes far longer.

Within a group, consecutive records of one kind (starts, or ends) by different units are one
*batch*: the start or end of one instance as several warps of a partition record it. A unit that
appears again begins a new batch, so a unit that starts twice before any end starts two
instances. Batches pair first in, first out: the k-th end batch closes the oldest start batch
not yet closed that began before it; an end batch with none open is unmatched. A closed pair of
batches gives one event per (start record, end record): one start by a producer warp and its end
by four consumer warps make four events, one per consumer warp. Records left in unmatched
batches are events with no end, or no start; they are counted and shown, never dropped.

Everything is vectorized: the FIFO is a reflected walk, as in ``events`` (the matched end
batches after the j-th are ``j + min(0, running min of (starts before it - j))``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from proton_ik.contract.tags import RecordKind
from proton_ik.viewer.arrays import run_starts, segment_cummin, segment_cumsum
from proton_ik.viewer.decode import RecordTable, UnitTable

MATCHED, NO_END, NO_START = 0, 1, 2
CLOCK_SKEW_CYCLES = 32  # how far apart two warps of one SM may read the same instant
STATUSES = {MATCHED: "matched", NO_END: "no end", NO_START: "no start"}


@dataclass(frozen=True)
class Spans:
    """One row per event (a matched start and end), per start with no end and per end with no
    start, in the order of their start's clock (their end's where they have none). Where a side
    is missing, its unit row and record are -1 and its clock 0."""

    start_unit_row: np.ndarray  # int64, row in the UnitTable
    end_unit_row: np.ndarray  # int64
    event: np.ndarray  # int64, the event's id in the kernel's name table
    instance: np.ndarray  # int64
    start_clock: np.ndarray  # int64
    end_clock: np.ndarray  # int64
    start_record: np.ndarray  # int64, record number within its unit
    end_record: np.ndarray  # int64
    status: np.ndarray  # int64: MATCHED, NO_END or NO_START

    def __len__(self) -> int:
        return len(self.status)


@dataclass(frozen=True)
class Marks:
    """One row per mark record, with or without a value, grouped by unit and in time order."""

    unit_row: np.ndarray  # int64
    mark: np.ndarray  # int64, the mark's id in the kernel's name table
    clock: np.ndarray  # int64
    record: np.ndarray  # int64, record number within its unit
    has_value: np.ndarray  # bool
    value: np.ndarray  # uint32, the value's bits (0 without one)
    value_type: np.ndarray  # int64, layout.ValueType

    def __len__(self) -> int:
        return len(self.unit_row)


def marks(records: RecordTable) -> Marks:
    rows = np.flatnonzero((records.kind == RecordKind.MARK) | (records.kind == RecordKind.VALUE))
    return Marks(
        unit_row=records.unit_row[rows],
        mark=records.scope[rows],
        clock=records.clock[rows],
        record=records.index[rows],
        has_value=records.kind[rows] == RecordKind.VALUE,
        value=records.value[rows],
        value_type=records.value_type[rows],
    )


def pair_events(records: RecordTable, units: UnitTable) -> Spans:
    """The events of decoded launches (records of other kinds are ignored)."""
    rows = np.flatnonzero(records.kind == RecordKind.EVENT)
    unit = records.unit_row[rows]
    launch, cta = units.launch[unit], units.cta[unit]
    event, instance, clock = records.scope[rows], records.instance[rows], records.clock[rows]
    is_end = records.is_end[rows]
    when = _skew_tolerant_time(clock, is_end, records.index[rows], unit, instance, event, cta, launch)
    # Group, then time; at one time a start before an end, then by unit.
    order = np.lexsort((unit, is_end, when, instance, event, cta, launch))
    rows, unit, is_end = rows[order], unit[order], is_end[order]
    group_start = run_starts(launch[order], cta[order], event[order], instance[order])
    batch = _batches(group_start, is_end, unit)
    start_batch, end_batch = _pair_batches(batch, group_start, is_end)
    return _spans(records, rows, batch, is_end, start_batch, end_batch)


def _skew_tolerant_time(
    clock: np.ndarray, is_end: np.ndarray, record: np.ndarray, unit: np.ndarray, *group: np.ndarray
) -> np.ndarray:
    """Each record's place in time, in half cycles: a start counts ``CLOCK_SKEW_CYCLES`` early,
    then each unit's records of a group are raised where needed to follow each other in the
    order the unit wrote them (by at least half a cycle)."""
    import pandas as pd  # here, not at the top: a render worker imports this module, not pandas

    when = 2 * clock - 2 * CLOCK_SKEW_CYCLES * (~is_end)
    if not len(when):
        return when
    order = np.lexsort((record, unit, *group))
    segment = np.cumsum(run_starts(unit[order], *(key[order] for key in group))) - 1
    position = np.arange(len(order)) - np.searchsorted(segment, segment)
    # The smallest strictly increasing sequence that stays at or above the shifted times.
    raised = pd.Series(when[order] - position).groupby(segment).cummax().to_numpy() + position
    out = np.empty_like(when)
    out[order] = raised
    return out


def _batches(group_start: np.ndarray, is_end: np.ndarray, unit: np.ndarray) -> np.ndarray:
    """Each record's batch, numbered 0, 1, ... in group and time order: a run of one kind within a
    group, split where a unit appears again (its second record in the run opens the next batch)."""
    n = len(unit)
    if not n:
        return np.zeros(0, np.int64)
    run_start = group_start.copy()
    run_start[1:] |= is_end[1:] != is_end[:-1]
    run = np.cumsum(run_start) - 1
    by_unit = np.lexsort((np.arange(n), unit, run))  # stable: time order within (run, unit)
    first = run_starts(run[by_unit], unit[by_unit])
    position = np.arange(n)
    rank = np.empty(n, np.int64)
    rank[by_unit] = position - np.maximum.accumulate(np.where(first, position, 0))
    by_batch = np.lexsort((rank, run))
    batch = np.empty(n, np.int64)
    batch[by_batch] = np.cumsum(run_starts(run[by_batch], rank[by_batch])) - 1
    return batch


def _pair_batches(
    batch: np.ndarray, group_start: np.ndarray, is_end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(start batch, end batch) of each matched pair of batches, first in, first out per group."""
    count = int(batch.max(initial=-1)) + 1
    batch_end = np.zeros(count, bool)
    batch_end[batch] = is_end
    batch_group = np.zeros(count, np.int64)
    batch_group[batch] = np.cumsum(group_start) - 1
    new_group = run_starts(batch_group)
    is_start = (~batch_end).astype(np.int64)
    starts_before = segment_cumsum(is_start, new_group) - is_start
    ends = np.flatnonzero(batch_end)
    if not len(ends):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    end_group_start = run_starts(batch_group[ends])
    j = segment_cumsum(np.ones(len(ends), np.int64), end_group_start)  # 1, 2, ... per group
    slack = starts_before[ends] - j
    matched_so_far = j + np.minimum(0, segment_cummin(slack, end_group_start))
    previous = np.where(end_group_start, 0, np.roll(matched_so_far, 1))
    matched = matched_so_far > previous
    # The k-th start batch of a group (k = matched_so_far, from 1).
    start_batches = np.flatnonzero(~batch_end)
    first_start = np.searchsorted(batch_group[start_batches], batch_group[ends])
    return start_batches[first_start[matched] + matched_so_far[matched] - 1], ends[matched]


def _spans(
    records: RecordTable,
    rows: np.ndarray,
    batch: np.ndarray,
    is_end: np.ndarray,
    start_batch: np.ndarray,
    end_batch: np.ndarray,
) -> Spans:
    count = int(batch.max(initial=-1)) + 1
    size = np.bincount(batch, minlength=count)
    offset = np.cumsum(size) - size
    by_batch = rows[np.argsort(batch, kind="stable")]
    # Every record of the start batch with every record of the end batch.
    pairs = size[start_batch] * size[end_batch]
    pair = np.repeat(np.arange(len(pairs)), pairs)
    local = np.arange(int(pairs.sum())) - np.repeat(np.cumsum(pairs) - pairs, pairs)
    ends_per = size[end_batch][pair]
    start_at = by_batch[offset[start_batch][pair] + local // ends_per]
    end_at = by_batch[offset[end_batch][pair] + local % ends_per]
    closed = np.zeros(count, bool)
    closed[start_batch] = closed[end_batch] = True
    left = rows[~closed[batch]]
    left_end = is_end[~closed[batch]]

    def side(at: np.ndarray, present: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (
            np.where(present, records.unit_row[at], -1),
            np.where(present, records.clock[at], 0),
            np.where(present, records.index[at], -1),
        )

    start_unit, start_clock, start_record = side(left, ~left_end)
    end_unit, end_clock, end_record = side(left, left_end)
    joined = np.concatenate
    spans = Spans(
        start_unit_row=joined([records.unit_row[start_at], start_unit]),
        end_unit_row=joined([records.unit_row[end_at], end_unit]),
        event=joined([records.scope[start_at], records.scope[left]]),
        instance=joined([records.instance[start_at], records.instance[left]]),
        start_clock=joined([records.clock[start_at], start_clock]),
        end_clock=joined([records.clock[end_at], end_clock]),
        start_record=joined([records.index[start_at], start_record]),
        end_record=joined([records.index[end_at], end_record]),
        status=joined([np.full(len(start_at), MATCHED), np.where(left_end, NO_START, NO_END)]),
    )
    order = np.argsort(np.where(spans.status == NO_START, spans.end_clock, spans.start_clock), kind="stable")
    return Spans(*(getattr(spans, name)[order] for name in Spans.__dataclass_fields__))
