"""Number the distinct key tuples of many rows (tracks, threads, processes) with whole-array operations."""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class KeyedIds:
    """Ids kept by rows of non-negative integer keys, looked up and added a whole array at a time
    (the tracks of a launch that goes on into a later chunk)."""

    keys: np.ndarray  # (rows, key columns)
    ids: np.ndarray

    @classmethod
    def empty(cls, width: int) -> KeyedIds:
        return cls(np.zeros((0, width), np.int64), np.zeros(0, np.int64))

    def find(self, keys: np.ndarray) -> np.ndarray:
        """The id kept for each row of ``keys``; -1 where none is."""
        if not len(self.ids) or not len(keys):
            return np.full(len(keys), -1, dtype=np.int64)
        group, first = groups(*np.concatenate([self.keys, keys]).astype(np.int64).T)
        id_of_group = np.full(len(first), -1, dtype=np.int64)
        id_of_group[group[: len(self.ids)]] = self.ids
        return id_of_group[group[len(self.ids) :]]

    def updated(self, keys: np.ndarray, ids: np.ndarray) -> KeyedIds:
        """These and ``keys``' ``ids``, a later row's id replacing an earlier one's of its key."""
        all_keys = np.concatenate([self.keys, keys]).astype(np.int64)
        all_ids = np.concatenate([self.ids, np.asarray(ids, dtype=np.int64)])
        if not len(all_ids):
            return self
        group, first = groups(*all_keys.T)
        last = np.zeros(len(first), dtype=np.int64)
        np.maximum.at(last, group, np.arange(len(group)))
        return KeyedIds(all_keys[last], all_ids[last])
