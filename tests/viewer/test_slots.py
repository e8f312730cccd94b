"""CTA slots (``viewer.tracks.slots``): every CTA placed, none overlapping another in its slot, and no
more slots than CTAs ran at once."""

from __future__ import annotations

import time

import numpy as np
import pytest

from proton_ik.viewer.tracks.slots import FREE, assign_slots, most_at_once, steps


def most_at_once_by_sweep(group: np.ndarray, begin: np.ndarray, end: np.ndarray, groups: int) -> np.ndarray:
    """The most intervals open at once per group, by a plain sweep (ends before begins at a tie)."""
    most = np.zeros(groups, dtype=np.int64)
    for g in range(groups):
        mine = group == g
        marks = sorted(
            [(t, 1) for t in begin[mine]] + [(t, -1) for t in end[mine]], key=lambda m: (m[0], m[1])
        )
        open_now = 0
        for _, step in marks:
            open_now += step
            most[g] = max(most[g], open_now)
    return most


def assert_placed_without_overlap(
    group: np.ndarray, slot: np.ndarray, begin: np.ndarray, end: np.ndarray
) -> None:
    assert (slot >= 0).all()  # every CTA placed
    order = np.lexsort((begin, slot, group))
    same = (group[order][1:] == group[order][:-1]) & (slot[order][1:] == slot[order][:-1])
    # In a slot, each CTA starts at or after the one before it ends.
    assert (begin[order][1:][same] >= end[order][:-1][same]).all()


def test_a_cta_takes_the_lowest_slot_free_at_its_start():
    # A [0, 10), B [5, 15), C [10, 20) starts as A ends, D [12, 30) finds slots 0 and 1 busy.
    begin, end = np.array([0, 5, 10, 12]), np.array([10, 15, 20, 30])
    slot, busy = assign_slots(np.zeros(4, np.int64), begin, end)
    assert slot.tolist() == [0, 1, 0, 2]
    assert busy.tolist() == [[20, 15, 30]]  # when each slot's last CTA ends


def test_a_hundred_thousand_ctas_fit_in_as_many_slots_as_ran_at_once(record_property):
    rng = np.random.default_rng(7)
    ctas, sms = 100_000, 132
    group = rng.integers(0, sms, ctas)
    begin = rng.integers(0, 10**9, ctas)
    end = begin + rng.integers(1, 3 * 10**6, ctas)
    began = time.perf_counter()
    slot, busy = assign_slots(group, begin, end)
    record_property("assign_slots_seconds", time.perf_counter() - began)  # a number to look at, not a bound
    assert_placed_without_overlap(group, slot, begin, end)
    slots = np.zeros(sms, dtype=np.int64)
    np.maximum.at(slots, group, slot + 1)
    expected = most_at_once_by_sweep(group, begin, end, sms)
    assert (slots == expected).all()  # bounded by each SM's concurrency, and no tighter bound exists
    assert (most_at_once(group, begin, end, sms) == expected).all()
    assert busy.shape == (sms, expected.max())


def test_a_launch_in_pieces_goes_on_from_the_slots_its_earlier_pieces_left():
    # Two SMs; each runs waves of 3 CTAs, CTAs handed out in order; pieces of 7 CTAs.
    ctas = np.arange(40)
    group = ctas % 2
    wave, place = (ctas // 2) // 3, (ctas // 2) % 3
    begin = wave * 100 + place
    end = begin + 90
    whole, _ = assign_slots(group, begin, end)
    busy, pieces = None, []
    for lo in range(0, len(ctas), 7):
        piece = slice(lo, lo + 7)
        slot, busy = assign_slots(group[piece], begin[piece], end[piece], busy)
        pieces.append(slot)
    assert np.concatenate(pieces).tolist() == whole.tolist()
    assert_placed_without_overlap(group, np.concatenate(pieces), begin, end)
    assert busy.shape == (2, 3)


def test_a_group_with_no_ctas_keeps_its_state():
    busy = np.array([[FREE], [50]])
    slot, after = assign_slots(np.array([0]), np.array([10]), np.array([20]), busy)
    assert slot.tolist() == [0] and after.tolist() == [[20], [50]]


@pytest.mark.parametrize(
    ("begin", "end", "expected", "at_begin", "at_end"),
    [
        ([0, 5], [10, 15], [(0, 1), (5, 2), (10, 1), (15, 0)], [1, 2], [1, 0]),
        ([0, 10], [10, 20], [(0, 1), (20, 0)], [1, 1], [1, 0]),  # one ends as the next begins
        ([0, 0], [5, 5], [(0, 2), (5, 0)], [2, 2], [0, 0]),
        ([], [], [], [], []),
    ],
)
def test_steps_count_what_is_open_where_it_changes(begin, end, expected, at_begin, at_end):
    series = steps(np.zeros(len(begin), np.int64), np.array(begin, np.int64), np.array(end, np.int64))
    assert series.group.tolist() == [0] * len(expected)
    assert list(zip(series.time.tolist(), series.count.tolist(), strict=True)) == expected
    # Each interval's begin and end read the count there, after every change at that time.
    assert (series.at_begin.tolist(), series.at_end.tolist()) == (at_begin, at_end)
