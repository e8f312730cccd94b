"""CTA slots: the tracks an SM's CTAs share, as many as ever ran on it at once.

A grid of 100,000 CTAs needs 100,000 CTA tracks, but an SM holds only a few CTAs at a time. So
each SM gets slots instead: CTAs are taken by start time, each into the lowest-numbered slot that
is free at its start; a slot is free from its last CTA's end on (a CTA that starts as another
ends may take its slot). This greedy colouring of intervals is optimal: an SM gets exactly as
many slots as the most CTAs it held at once, whatever the grid.

``assign_slots`` takes every SM of a chunk at once: step r places the r-th CTA of every SM, as
whole-array operations, so the work is a few numpy calls per CTA of the busiest SM, not per CTA.
``steps`` counts intervals in flight over time (resident CTAs, scopes) for counter tracks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FREE = np.iinfo(np.int64).min  # a slot's end time before any CTA ran in it


def assign_slots(
    group: np.ndarray, begin: np.ndarray, end: np.ndarray, busy: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The slot of each CTA within its group (an SM of a launch, numbered from 0).

    ``busy``: per group and slot, when the slot's last CTA ended (``FREE`` for none): the state
    a group's earlier CTAs left, for a launch that comes in pieces. Returns each CTA's slot and
    the state after these CTAs, one row per group and a column per slot of the busiest group.
    """
    n = len(group)
    groups = busy.shape[0] if busy is not None else int(group.max(initial=-1)) + 1
    free_at = busy.copy() if busy is not None and busy.shape[1] else np.full((groups, 1), FREE)
    slot = np.zeros(n, dtype=np.int64)
    if n == 0:
        return slot, free_at
    order = np.lexsort((begin, group))  # by group, then start; ties in CTA order
    counts = np.bincount(group, minlength=groups)
    first = np.cumsum(counts) - counts
    busiest = np.argsort(-counts, kind="stable")
    descending = -counts[busiest]
    for rank in range(int(counts.max())):
        active = busiest[: np.searchsorted(descending, -rank, side="left")]  # groups with > rank CTAs
        cta = order[first[active] + rank]
        fits = free_at[active] <= begin[cta][:, None]
        if not fits.any(axis=1).all():  # every slot of some group is taken: open a column
            free_at = np.hstack([free_at, np.full((groups, free_at.shape[1]), FREE)])
            fits = free_at[active] <= begin[cta][:, None]
        chosen = fits.argmax(axis=1)
        free_at[active, chosen] = end[cta]
        slot[cta] = chosen
    used = int((free_at > FREE).any(axis=0).sum())
    return slot, free_at[:, : max(used, 1)]


@dataclass(frozen=True)
class Steps:
    """How many intervals are open in each group over time: a point (group, time, count) at
    every time the count changes, by group then time; and the count at each interval's begin
    and at its end (after every change at that time)."""

    group: np.ndarray
    time: np.ndarray
    count: np.ndarray
    at_begin: np.ndarray
    at_end: np.ndarray


def steps(group: np.ndarray, begin: np.ndarray, end: np.ndarray) -> Steps:
    """Count the intervals open in each group over time. An interval that ends as another
    begins does not overlap it (ends count first)."""
    n = len(group)
    if n == 0:
        empty = np.zeros(0, np.int64)
        return Steps(empty, empty, empty, empty, empty)
    # Rows: the ends, then the begins. Sorted by group, time and row, a time's ends come first.
    order, keys, times = _by_group_time(np.concatenate([group, group]), np.concatenate([end, begin]))
    # Each group's begins and ends cancel out, so one running sum restarts at 0 at every group.
    delta = (order >= n).view(np.int8) * np.int8(2) - np.int8(1)  # +1 at a begin, -1 at an end
    count = np.cumsum(delta, dtype=np.int64)
    last = np.ones(len(keys), dtype=bool)  # one point per group and time: its count after all changes
    last[:-1] = (keys[1:] != keys[:-1]) | (times[1:] != times[:-1])
    lasts = np.flatnonzero(last)
    keys, times, count = keys[lasts], times[lasts], count[lasts]
    at = np.empty(2 * n, dtype=np.int64)
    at[order] = np.repeat(count, np.diff(lasts, prepend=-1))  # each row's group and time's count
    changed = np.ones(len(keys), dtype=bool)
    changed[1:] = (keys[1:] != keys[:-1]) | (count[1:] != count[:-1])
    return Steps(keys[changed], times[changed], count[changed], at[n:], at[:n])


def _by_group_time(keys: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The order by group, then time, then row; and the groups and times in that order. One sort
    of a combined key where group, time and row fit 63 bits."""
    low = int(times.min())
    span = int(times.max()) - low + 1
    key_range = (int(keys.max()) + 1) * span
    row_bits = (len(keys) - 1).bit_length()
    if key_range << row_bits < 1 << 63:
        # The row in the low bits makes the keys unique, so a plain sort of the keys (numpy's
        # default is vectorized where the CPU allows; sorting values is twice as fast as argsort)
        # gives the order, and the groups and times come back from the sorted keys without
        # gathers. Built in place: on a fresh array every page costs a fault.
        key = times - low
        key += keys * span
        key <<= row_bits
        key |= np.arange(len(keys))
        key.sort()
        order = key & ((1 << row_bits) - 1)
        key >>= row_bits
        group = key // span
        key -= group * span
        key += low
        return order, group, key
    if key_range < 1 << 63:  # no room for the row: a stable sort keeps ties in row order
        order = np.argsort(keys * span + (times - low), kind="stable")
    else:
        order = np.lexsort((times, keys))  # stable: ties in row order
    return order, keys[order], times[order]


def most_at_once(group: np.ndarray, begin: np.ndarray, end: np.ndarray, groups: int) -> np.ndarray:
    """The most intervals open at once in each group."""
    series = steps(group, begin, end)
    most = np.zeros(groups, dtype=np.int64)
    np.maximum.at(most, series.group, series.count)
    return most
