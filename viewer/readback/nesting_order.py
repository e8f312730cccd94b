"""The nesting order of a track's slices where a trace keeps only their times (Chrome JSON):
the place of each slice's begin and end among its track's markers."""

from __future__ import annotations

import numpy as np


def nesting_order(track: np.ndarray, begin: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The place of each slice's begin and end among its track's, where a trace keeps only
    times: slices that nest (as a track's do) begin outermost first and end innermost first, and
    a slice that ends as another begins ends first. Returns the begin's and the end's place."""
    n = len(track)
    rank = np.empty(n, dtype=np.int64)
    rank[np.lexsort((-end, begin, track))] = np.arange(n)
    empty = begin == end
    # Markers sort by (track, time, phase, then): ends of slices begun before (phase 0,
    # innermost first), then begins (phase 1, outermost first), each empty slice's end right
    # after its begin.
    phase = np.concatenate([np.ones(n, np.int64), empty.astype(np.int64)])
    then = np.concatenate([2 * rank, np.where(empty, 2 * rank + 1, -rank)])
    place = np.empty(2 * n, dtype=np.int64)
    place[np.lexsort((then, phase, np.concatenate([begin, end]), np.concatenate([track, track])))] = (
        np.arange(2 * n)
    )
    return place[:n], place[n:]
