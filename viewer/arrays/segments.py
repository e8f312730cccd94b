"""Runs of rows sorted by their keys, with whole-array operations: where each run starts, and a
running sum or minimum that restarts at each run (the pairing of scopes and of events)."""

from __future__ import annotations

import numpy as np


def run_starts(*keys: np.ndarray) -> np.ndarray:
    """True where any key differs from the previous row (rows sorted by the keys)."""
    n = len(keys[0])
    starts = np.ones(n, dtype=bool)
    if n > 1:
        starts[1:] = np.logical_or.reduce([key[1:] != key[:-1] for key in keys])
    return starts


def segment_cumsum(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Inclusive running sum that restarts at each segment."""
    total = np.cumsum(values)
    segment = np.cumsum(starts) - 1
    base = (total - values)[np.flatnonzero(starts)]
    return total - base[segment]


def segment_cummin(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Running minimum that restarts at each segment."""
    segment = np.cumsum(starts) - 1
    # Shift each later segment far below the earlier ones so their minima never leak forward.
    spread = 2 * (np.abs(values).max(initial=0) + 1)
    return np.minimum.accumulate(values - segment * spread) + segment * spread
