"""Pair begin and end records into scope events: arrays in, events out.

Pairing is per unit and per scope: a begin opens, an end closes the most recent open begin of
the same scope (LIFO), so loops, nesting, and scopes that overlap without nesting all pair.
An end with nothing open is unmatched; in a unit whose ring overwrote its oldest records, up
to that many such ends are expected (their begins were overwritten) and are reported as lost
to the ring, apart from real mismatches.

Everything is vectorized. The LIFO stack of one scope is a reflected walk: its size after each
record is ``P - min(0, running min of P)``, ``P`` being the running sum of +1 (begin) and -1
(end). Matched records at the same stack level then alternate begin, end, begin, ...
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from proton_ik.contract.tags import RecordKind
from proton_ik.viewer.arrays import run_starts, segment_cummin, segment_cumsum
from proton_ik.viewer.decode import RecordTable, UnitTable

UNMATCHED_BEGIN = 0
UNMATCHED_END = 1
LOST_TO_RING = 2
UNMATCHED_KINDS = {
    UNMATCHED_BEGIN: "unmatched begin",
    UNMATCHED_END: "unmatched end",
    LOST_TO_RING: "lost to ring",
}


@dataclass(frozen=True)
class Pairs:
    """One row per matched begin/end, sorted by unit row, then begin record."""

    unit_row: np.ndarray  # int64, row in the UnitTable
    scope: np.ndarray  # int64
    begin_index: np.ndarray  # int64, record numbers within the unit
    end_index: np.ndarray
    begin_clock: np.ndarray  # int64
    end_clock: np.ndarray
    next_clock: np.ndarray  # the unit's next record after the begin (the end, or one inside)
    paired: np.ndarray  # bool: begin and end were written as one pair entry
    depth: np.ndarray  # int64, scopes open on the unit when this one began
    lane: np.ndarray  # int64, 0 unless it overlaps an earlier scope without nesting

    def __len__(self) -> int:
        return len(self.unit_row)


@dataclass(frozen=True)
class Unmatched:
    """One row per record left without a partner."""

    unit_row: np.ndarray
    scope: np.ndarray
    index: np.ndarray
    clock: np.ndarray
    kind: np.ndarray  # UNMATCHED_BEGIN, UNMATCHED_END or LOST_TO_RING

    def __len__(self) -> int:
        return len(self.unit_row)


def pair_records(records: RecordTable, units: UnitTable) -> tuple[Pairs, Unmatched]:
    """Pair a launch's scope records (records of other kinds are ignored).

    ``records`` are grouped by unit and in time order within it, as ``decode`` gives them.
    """
    if _adjacent(records):
        return _adjacent_pairs(records), _make_unmatched(records, units, np.zeros(0, dtype=np.int64))
    # Group by (scope, unit): a stable sort on the 16-bit scope id keeps each unit's order.
    rows = np.flatnonzero(records.kind == RecordKind.SCOPE)
    rows = rows[_stable_order(records.scope[rows])]
    is_end = records.is_end[rows]
    starts = run_starts(records.unit_row[rows], records.scope[rows])
    running = segment_cumsum(np.where(is_end, -1, 1), starts)
    stack_after = running - np.minimum(segment_cummin(running, starts), 0)
    stack_before = np.where(starts, 0, np.roll(stack_after, 1))
    level = np.where(is_end, stack_before, stack_after)
    group = np.cumsum(starts)
    # An end that finds its scope's stack empty closes nothing.
    live = np.flatnonzero(~(is_end & (stack_before == 0)))
    live = live[_stable_order(level[live])]
    opener, closer = live[:-1], live[1:]
    pairs_here = (
        ~is_end[opener] & is_end[closer] & (group[opener] == group[closer]) & (level[opener] == level[closer])
    )
    matched = np.zeros(len(records), dtype=bool)
    matched[rows[opener[pairs_here]]] = True
    matched[rows[closer[pairs_here]]] = True
    pairs = _make_pairs(records, rows[opener[pairs_here]], rows[closer[pairs_here]])
    scoped = np.zeros(len(records), dtype=bool)
    scoped[rows] = True
    return pairs, _make_unmatched(records, units, np.flatnonzero(scoped & ~matched))


def _adjacent(records: RecordTable) -> bool:
    """Whether every scope's begin is followed by its end, record after record, in every unit (as
    when each scope is written as one pair entry and scopes follow one another): then the records
    pair two by two, none nested in another, with nothing left over."""
    if len(records) % 2:
        return False
    begins, ends = slice(0, None, 2), slice(1, None, 2)
    return bool(
        (records.kind == RecordKind.SCOPE).all()
        and not records.is_end[begins].any()
        and records.is_end[ends].all()
        and np.array_equal(records.unit_row[begins], records.unit_row[ends])
        and np.array_equal(records.scope[begins], records.scope[ends])
    )


def _adjacent_pairs(records: RecordTable) -> Pairs:
    """The pairs of records that ``_adjacent`` accepts: what the general pairing finds for them."""
    begins, ends = slice(0, None, 2), slice(1, None, 2)
    none_open = np.zeros(len(records) // 2, dtype=np.int64)
    return Pairs(
        unit_row=records.unit_row[begins],
        scope=records.scope[begins],
        begin_index=records.index[begins],
        end_index=records.index[ends],
        begin_clock=records.clock[begins],
        end_clock=records.clock[ends],
        next_clock=records.clock[ends],
        paired=records.paired[begins],
        depth=none_open,
        lane=none_open.copy(),
    )


def _make_pairs(records: RecordTable, begin_pos: np.ndarray, end_pos: np.ndarray) -> Pairs:
    """Pairs in record order of their begins, given the positions of each pair's records."""
    n = len(records)
    pair_at = np.full(n, -1, dtype=np.int64)
    pair_at[begin_pos] = np.arange(len(begin_pos))
    order = pair_at[pair_at >= 0]
    begin_pos, end_pos = begin_pos[order], end_pos[order]
    unit_row = records.unit_row[begin_pos]
    # Matched pairs open after each record, counted per unit in record order.
    step = np.zeros(n, dtype=np.int64)
    step[begin_pos], step[end_pos] = 1, -1
    open_after = segment_cumsum(step, run_starts(records.unit_row))
    lane = np.zeros(len(begin_pos), dtype=np.int64)
    crossed = _units_with_overlaps(records.unit_row, open_after, begin_pos, end_pos)
    if len(crossed):
        where = np.flatnonzero(np.isin(unit_row, crossed))
        index = records.index
        lane[where] = _assign_lanes(unit_row[where], index[begin_pos[where]], index[end_pos[where]])
    return Pairs(
        unit_row=unit_row,
        scope=records.scope[begin_pos],
        begin_index=records.index[begin_pos],
        end_index=records.index[end_pos],
        begin_clock=records.clock[begin_pos],
        end_clock=records.clock[end_pos],
        # The unit's record right after the begin: the end itself, or the first one inside.
        next_clock=records.clock[begin_pos + 1],
        paired=records.paired[begin_pos],
        depth=open_after[begin_pos] - 1,
        lane=lane,
    )


def _make_unmatched(records: RecordTable, units: UnitTable, rows: np.ndarray) -> Unmatched:
    """Records left without a partner, given their positions in record order."""
    is_end = records.is_end[rows]
    unit_row = records.unit_row[rows]
    # The earliest unmatched ends of a unit, up to the number of records the ring overwrote,
    # are the ones whose begins were overwritten.
    end_rank = _rank_within(unit_row, is_end)
    lost = is_end & (end_rank < units.overwritten[unit_row])
    kind = np.where(lost, LOST_TO_RING, np.where(is_end, UNMATCHED_END, UNMATCHED_BEGIN))
    return Unmatched(unit_row, records.scope[rows], records.index[rows], records.clock[rows], kind)


def _assign_lanes(unit_row: np.ndarray, begin_index: np.ndarray, end_index: np.ndarray) -> np.ndarray:
    """Lane per pair such that the pairs of one unit and lane nest properly.

    A pair that overlaps an earlier-begun pair of its lane without nesting inside it moves to
    the next lane; the earliest pair always stays, so this ends. Only units where pairing by
    scope differs from plain bracket matching have such overlaps, so only those are passed here.
    """
    lane = np.zeros(len(unit_row), dtype=np.int64)
    active = np.arange(len(unit_row))
    current = 0
    while active.size:
        moved = _overlaps_earlier(unit_row[active], begin_index[active], end_index[active])
        current += 1
        active = active[moved]
        lane[active] = current
    return lane


def _units_with_overlaps(
    unit_row: np.ndarray, open_after: np.ndarray, begin_pos: np.ndarray, end_pos: np.ndarray
) -> np.ndarray:
    """Units whose pairs do not all nest.

    ``open_after`` counts the pairs open after each record (per unit, in record order). A pair
    nested in or disjoint from every other leaves as many open behind it as it found: the count
    after its begin equals the count before its end. Conversely, if that holds for every pair,
    none cross: were an earlier pair to end inside a pair B, B's counts would balance only with
    a pair C that begins inside B and ends after it; then B ends inside C, C needs its own such
    pair, and so on, each ending later than the last, which a finite unit cannot hold.
    """
    crossing = open_after[begin_pos] != open_after[end_pos] + 1
    return np.unique(unit_row[begin_pos[crossing]])


def _overlaps_earlier(unit_row: np.ndarray, begin_index: np.ndarray, end_index: np.ndarray) -> np.ndarray:
    """For each pair: does an earlier-begun pair of the same unit end strictly inside it?"""
    n = len(unit_row)
    rows = np.concatenate([unit_row, unit_row])
    index = np.concatenate([begin_index, end_index])
    order = np.lexsort((index, rows))
    position = np.empty(2 * n, dtype=np.int64)
    position[order] = np.arange(2 * n)
    begin_at, end_at = position[:n], position[n:]
    # At each end marker, where its pair began; elsewhere "never".
    began = np.full(2 * n, 2 * n, dtype=np.int64)
    began[end_at] = begin_at
    inner_min = _range_min(began, begin_at + 1, end_at)
    return inner_min < begin_at


def _range_min(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """min(values[lo:hi]) for each query (``values.max()`` where the range is empty), by a sparse table."""
    length = hi - lo
    result = np.full(len(lo), values.max(initial=0), dtype=values.dtype)
    if len(lo) == 0 or length.max() <= 0:
        return result
    levels = [values]
    while (1 << len(levels)) <= length.max():
        prev, half = levels[-1], 1 << (len(levels) - 1)
        levels.append(np.minimum(prev[:-half], prev[half:]))
    nonempty = length > 0
    k = np.frexp(np.maximum(length, 1))[1].astype(np.int64) - 1  # floor(log2), exact for integers
    for level in np.unique(k[nonempty]):
        q = np.flatnonzero(nonempty & (k == level))
        table = levels[level]
        result[q] = np.minimum(table[lo[q]], table[hi[q] - (1 << level)])
    return result


def _stable_order(values: np.ndarray) -> np.ndarray:
    """A stable argsort; radix-sorted (linear time) for values that fit 16 bits, as ids and levels do."""
    if len(values) and values.min() >= 0 and values.max() < 1 << 16:
        values = values.astype(np.uint16)
    return np.argsort(values, kind="stable")


def _rank_within(group: np.ndarray, flag: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... over the flagged rows of each group (rows sorted by group)."""
    return segment_cumsum(flag.astype(np.int64), run_starts(group)) - flag
