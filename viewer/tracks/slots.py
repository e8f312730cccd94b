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
    keys = np.concatenate([group, group])
    times = np.concatenate([begin, end])
    delta = np.concatenate([np.ones(n, np.int64), np.full(n, -1, np.int64)])
    order = _by_group_time_end_first(keys, times, delta)
    keys, times = keys[order], times[order]
    # Each group's begins and ends cancel out, so one running sum restarts at 0 at every group.
    count = np.cumsum(delta[order])
    last = np.ones(len(keys), dtype=bool)  # one point per group and time: its count after all changes
    last[:-1] = (keys[1:] != keys[:-1]) | (times[1:] != times[:-1])
    settled = count[last][np.cumsum(np.concatenate([[True], last[:-1]])) - 1]  # per sorted row
    at = np.empty(2 * n, dtype=np.int64)
    at[order] = settled
    keys, times, count = keys[last], times[last], count[last]
    changed = np.ones(len(keys), dtype=bool)
    changed[1:] = (keys[1:] != keys[:-1]) | (count[1:] != count[:-1])
    return Steps(keys[changed], times[changed], count[changed], at[:n], at[n:])


def _by_group_time_end_first(keys: np.ndarray, times: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """The order by group, then time, then ends before begins: one sort of a combined key where
    it fits 63 bits."""
    low = int(times.min())
    span = int(times.max()) - low + 1
    if (int(keys.max()) + 1) * span * 2 < 1 << 63:
        # Ties (a group's begins, or ends, at one time) may come in any order: the counts after
        # each time are the same. numpy's default sort is vectorized where the CPU allows.
        return np.argsort((keys * span + (times - low)) * 2 + (delta > 0))
    return np.lexsort((delta, times, keys))


def most_at_once(group: np.ndarray, begin: np.ndarray, end: np.ndarray, groups: int) -> np.ndarray:
    """The most intervals open at once in each group."""
    series = steps(group, begin, end)
    most = np.zeros(groups, dtype=np.int64)
    np.maximum.at(most, series.group, series.count)
    return most
