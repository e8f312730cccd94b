"""Number the distinct key tuples of many rows (tracks, threads, processes) with whole-array operations."""

from __future__ import annotations

import numpy as np

# Keys are numbered by marking a dense table when it is at most this many entries per row (plus a
# small fixed allowance); otherwise by sorting. The table is written whole on every call, so a
# table much larger than the rows costs more than sorting them (docs/PERFORMANCE.md: a chunk of
# 65,536 rows over 4096 CTAs' tracks once allocated 8.6M entries a call).
DENSE_PER_ROW = 8
DENSE_ALLOWANCE = 1 << 16


def groups(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Number the distinct tuples of non-negative integer ``keys`` in sorted (lexicographic) order.

    Returns the group of each row and the first row of each group.
    """
    n = len(keys[0])
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    key = np.zeros(n, dtype=np.int64)
    space = 1
    for column in keys:
        radix = int(column.max()) + 1
        if space * radix >= 1 << 62:
            return _sorted_groups(np.stack(keys, axis=1))
        key, space = key * radix + column, space * radix
    if space > DENSE_PER_ROW * n + DENSE_ALLOWANCE:
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        return inverse.reshape(-1), first
    first = np.full(space, n, dtype=np.int64)
    np.minimum.at(first, key, np.arange(n))
    present = np.flatnonzero(first < n)
    number = np.zeros(space, dtype=np.int64)
    number[present] = np.arange(len(present))
    return number[key], first[present]


def _sorted_groups(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    _, first, inverse = np.unique(table, axis=0, return_index=True, return_inverse=True)
    return inverse.reshape(-1), first
