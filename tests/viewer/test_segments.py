"""Runs of sorted rows: starts, and sums and minima that restart at each run."""

from __future__ import annotations

import numpy as np

from proton_ik.viewer.arrays import run_starts, segment_cummin, segment_cumsum


def test_a_run_starts_where_any_key_changes():
    unit = np.array([0, 0, 0, 1, 1, 2])
    scope = np.array([5, 5, 6, 6, 6, 6])
    assert run_starts(unit).tolist() == [True, False, False, True, False, True]
    assert run_starts(unit, scope).tolist() == [True, False, True, True, False, True]
    assert run_starts(np.zeros(0, np.int64)).tolist() == []


def test_sums_and_minima_restart_at_each_run():
    starts = np.array([True, False, False, True, False])
    values = np.array([1, -3, 2, 4, -1])
    assert segment_cumsum(values, starts).tolist() == [1, -2, 0, 4, 3]
    # The second run's minimum never sees the first run's -3.
    assert segment_cummin(values, starts).tolist() == [1, -3, -3, 4, -1]
