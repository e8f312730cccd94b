"""Clock extension: full 64-bit ``%clock64`` values rebuilt from the low 32 bits a record keeps.

Each unit's records are extended as one sequence from a full clock read in its header (its end
clock, read after its last record, or its start clock, read before its first), with whole-array
operations over every unit at once. ``buffers`` extends each record's clock through this.
"""

from __future__ import annotations

import numpy as np

CLOCK_LOW_MASK = (1 << 32) - 1


def extend_clocks(low: np.ndarray, group: np.ndarray, anchor: np.ndarray, from_end: np.ndarray) -> np.ndarray:
    """Full 64-bit clocks from their low 32 bits.

    ``low`` holds each group's values in the order they were read, groups contiguous; ``group``
    indexes ``anchor`` (a full clock per group) and ``from_end``. Going backwards from an anchor
    read after the last value, each value is the latest clock not after its successor with those
    low bits; going forwards from an anchor read before the first, the earliest not before its
    predecessor. Exact while consecutive reads are less than 2**32 cycles apart.
    """
    low = low.astype(np.int64)
    n = len(low)
    if n == 0:
        return low
    first = np.flatnonzero(np.diff(group, prepend=-1))  # each group's first value
    last = np.append(first[1:], n) - 1
    # Each value's distance from its group's first value: the running sum of the forward steps.
    step = (low - np.roll(low, 1)) & CLOCK_LOW_MASK
    step[first] = 0
    walk = np.cumsum(step)
    walk -= np.repeat(walk[first], np.diff(np.append(first, n)))
    # The first value in full, from the anchor: forwards to it, or backwards from the last one.
    owner = group[first]
    anchor_low = anchor[owner] & CLOCK_LOW_MASK
    forwards = anchor[owner] + ((low[first] - anchor_low) & CLOCK_LOW_MASK)
    backwards = anchor[owner] - ((anchor_low - low[last]) & CLOCK_LOW_MASK) - walk[last]
    start = np.where(from_end[owner], backwards, forwards)
    return np.repeat(start, np.diff(np.append(first, n))) + walk
