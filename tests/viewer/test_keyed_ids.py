"""Ids kept by integer key rows (``arrays.KeyedIds``): what a launch's earlier pieces left for its
later ones, looked up a whole array at a time. Checked against a dict of tuples."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from proton_ik.viewer.arrays import KeyedIds

_ROWS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5), st.integers(0, 2)), max_size=30)


def _table(rows: list[tuple[int, ...]]) -> np.ndarray:
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


@settings(max_examples=200, deadline=None)
@given(first=_ROWS, second=_ROWS, asked=_ROWS)
def test_updates_and_lookups_match_a_dict(first, second, asked):
    kept, expected = KeyedIds.empty(3), {}
    for batch, base in ((first, 100), (second, 200)):
        ids = base + np.arange(len(batch))
        kept = kept.updated(_table(batch), ids)
        expected.update(zip(batch, ids.tolist(), strict=True))  # a later row's id wins
    assert kept.find(_table(asked)).tolist() == [expected.get(row, -1) for row in asked]
    assert len(kept.ids) == len(expected)


def test_keys_too_wide_to_pack_are_still_told_apart():
    big = np.int64(1) << 40
    kept = KeyedIds.empty(3).updated(np.array([[big, big, 1], [big, big, 2]]), np.array([7, 8]))
    asked = np.array([[big, big, 2], [big, 0, 1], [big, big, 1]])
    assert kept.find(asked).tolist() == [8, -1, 7]


def test_nothing_kept_finds_nothing():
    assert KeyedIds.empty(2).find(np.array([[1, 2]])).tolist() == [-1]
    assert KeyedIds.empty(2).find(np.zeros((0, 2), np.int64)).tolist() == []
