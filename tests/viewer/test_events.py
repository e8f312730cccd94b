import numpy as np

from proton_ik.viewer.decode import decode_buffer
from proton_ik.viewer.pairing import events
from proton_ik.viewer.pairing.events import (
    LOST_TO_RING,
    UNMATCHED_BEGIN,
    UNMATCHED_END,
    _range_min,
    pair_records,
)

A, B, C = 0, 1, 2


def pair(fake, script):
    """Write ``script`` (a list of (scope, is_end)) into unit 0, one record every 10 cycles, and pair it."""
    fake.cta(0, smid=0)
    unit = fake.unit(0, 0, 0, 0)
    for i, (scope, is_end) in enumerate(script):
        unit.record(scope, is_end, 10 * (i + 1))
    unit.finish(10 * (len(script) + 1), 0)
    decoded = decode_buffer(fake.buffer, fake.layout)
    return decoded, *pair_records(decoded.records, decoded.units)


def spans(pairs):
    return list(zip(pairs.scope.tolist(), pairs.begin_index.tolist(), pairs.end_index.tolist(), strict=True))


def test_nested_scopes_pair_with_their_depth(fake_launch):
    script = [(A, 0), (B, 0), (C, 0), (C, 1), (B, 1), (A, 1), (A, 0), (A, 1)]
    _, pairs, unmatched = pair(fake_launch(units=1, capacity=16), script)
    assert spans(pairs) == [(A, 0, 5), (B, 1, 4), (C, 2, 3), (A, 6, 7)]
    assert pairs.depth.tolist() == [0, 1, 2, 0]
    assert pairs.lane.tolist() == [0, 0, 0, 0]
    assert pairs.begin_clock.tolist() == [10, 20, 30, 70]
    assert pairs.end_clock.tolist() == [60, 50, 40, 80]
    assert len(unmatched) == 0


def test_a_loop_pairs_each_iteration(fake_launch):
    script = [(A, 0), (A, 1)] * 5
    _, pairs, _ = pair(fake_launch(units=1, capacity=16), script)
    assert spans(pairs) == [(A, 2 * i, 2 * i + 1) for i in range(5)]
    assert pairs.depth.tolist() == [0] * 5


def test_a_scope_nested_in_itself_pairs_innermost_first(fake_launch):
    script = [(A, 0), (A, 0), (A, 1), (A, 1)]
    _, pairs, _ = pair(fake_launch(units=1, capacity=8), script)
    assert spans(pairs) == [(A, 0, 3), (A, 1, 2)]
    assert pairs.depth.tolist() == [0, 1]


def test_ends_whose_begins_the_ring_overwrote_are_lost_to_the_ring(fake_launch):
    script = [(A, 0), (B, 0), (B, 1), (A, 1)] * 5 + [(C, 0), (C, 1)]  # 22 records, 8 kept
    decoded, pairs, unmatched = pair(fake_launch(units=1, capacity=8), script)
    assert decoded.units.overwritten.tolist() == [14]
    assert spans(pairs) == [(A, 16, 19), (B, 17, 18), (C, 20, 21)]
    assert unmatched.index.tolist() == [14, 15]
    assert unmatched.scope.tolist() == [B, A]
    assert unmatched.kind.tolist() == [LOST_TO_RING, LOST_TO_RING]


def test_unmatched_begins_and_ends_are_reported(fake_launch):
    script = [(B, 1), (A, 0), (C, 0), (C, 1)]
    _, pairs, unmatched = pair(fake_launch(units=1, capacity=8), script)
    assert spans(pairs) == [(C, 2, 3)]
    assert pairs.depth.tolist() == [0]  # the open, never-closed A does not count
    assert unmatched.index.tolist() == [0, 1]
    assert unmatched.kind.tolist() == [UNMATCHED_END, UNMATCHED_BEGIN]


def test_orphan_ends_beyond_the_overwritten_count_are_real_mismatches(fake_launch):
    # 5 records, 4 kept (B end, C end, A end, A begin): only 1 begin can have been overwritten.
    _, pairs, unmatched = pair(fake_launch(units=1, capacity=4), [(A, 0), (B, 1), (C, 1), (A, 1), (A, 0)])
    assert len(pairs) == 0
    assert unmatched.index.tolist() == [1, 2, 3, 4]
    assert unmatched.kind.tolist() == [LOST_TO_RING, UNMATCHED_END, UNMATCHED_END, UNMATCHED_BEGIN]


def test_scopes_that_overlap_without_nesting_pair_and_take_another_lane(fake_launch):
    script = [(A, 0), (B, 0), (A, 1), (B, 1)]
    _, pairs, unmatched = pair(fake_launch(units=1, capacity=8), script)
    assert spans(pairs) == [(A, 0, 2), (B, 1, 3)]
    assert pairs.depth.tolist() == [0, 1]
    assert pairs.lane.tolist() == [0, 1]
    assert len(unmatched) == 0


def test_a_software_pipeline_splits_into_nesting_lanes(fake_launch):
    # load(i+1) is issued while compute(i) runs: L0 ( C0 ( L1 ) C1 ( L2 ) ...
    script = [(A, 0), (A, 1)]
    for _ in range(6):
        script += [(B, 0), (A, 0), (B, 1), (A, 1)]
    _, pairs, _ = pair(fake_launch(units=1, capacity=32), script)
    assert len(pairs) == 13
    assert_lanes_nest(pairs)
    assert pairs.lane.max() == 1


def assert_lanes_nest(pairs):
    for unit in np.unique(pairs.unit_row):
        for lane in np.unique(pairs.lane):
            pick = (pairs.unit_row == unit) & (pairs.lane == lane)
            begins, ends = pairs.begin_index[pick], pairs.end_index[pick]
            for b1, e1 in zip(begins, ends, strict=True):
                crossing = (begins > b1) & (begins < e1) & (ends > e1)
                assert not crossing.any(), f"lane {lane} of unit {unit} has crossing pairs"


def reference_pairing(script):
    """LIFO per scope, one record at a time."""
    stacks, pairs, orphans = {}, [], []
    for index, (scope, is_end) in enumerate(script):
        stack = stacks.setdefault(scope, [])
        if not is_end:
            stack.append(index)
        elif stack:
            pairs.append((scope, stack.pop(), index))
        else:
            orphans.append(index)
    opened = sorted(i for stack in stacks.values() for i in stack)
    return sorted(pairs, key=lambda p: p[1]), orphans, opened


def test_random_scripts_pair_like_the_one_record_at_a_time_reference(fake_launch):
    rng = np.random.default_rng(3)
    for _ in range(30):
        script = [
            (int(s), bool(e)) for s, e in zip(rng.integers(0, 3, 60), rng.random(60) < 0.45, strict=True)
        ]
        _, pairs, unmatched = pair(fake_launch(units=1, capacity=64), script)
        expected_pairs, orphans, opened = reference_pairing(script)
        assert spans(pairs) == expected_pairs
        assert unmatched.index[unmatched.kind == UNMATCHED_END].tolist() == orphans
        assert unmatched.index[unmatched.kind == UNMATCHED_BEGIN].tolist() == opened
        assert_lanes_nest(pairs)
        open_at = [sum(1 for _, b, e in expected_pairs if b < begin < e) for _, begin, _ in expected_pairs]
        assert pairs.depth.tolist() == open_at


def test_range_min_matches_brute_force():
    rng = np.random.default_rng(1)
    values = rng.integers(0, 1000, 500)
    lo = rng.integers(0, 500, 300)
    hi = np.minimum(lo + rng.integers(0, 80, 300), 500)
    got = _range_min(values, lo, hi)
    expected = [values[a:b].min() if b > a else values.max() for a, b in zip(lo, hi, strict=True)]
    assert got.tolist() == expected


def test_each_pair_knows_the_clock_of_the_record_after_its_begin(fake_launch):
    script = [(A, 0), (B, 0), (B, 1), (A, 1), (C, 0), (C, 1)]
    _, pairs, _ = pair(fake_launch(units=1, capacity=8), script)
    assert spans(pairs) == [(A, 0, 3), (B, 1, 2), (C, 4, 5)]
    assert pairs.next_clock.tolist() == [20, 30, 60]  # B's begin, B's end, C's end


def test_scopes_one_after_another_pair_as_the_general_pairing_does(fake_launch, monkeypatch):
    """Units whose every begin is followed by its end (pair entries one after another, single
    records of a flat scope) take a shortcut; it gives what pairing scope by scope gives."""
    fake = fake_launch(units=3, capacity=8, num_ctas=2)
    for cta in range(2):
        fake.cta(cta, smid=cta)
        for u in range(3):
            unit = fake.unit(cta, u, 1000 * u, 0)
            for i in range(3 + u):
                unit.pair(i % 3, 1000 * u + 100 * i + 10, 1000 * u + 100 * i + 60 + cta)
            unit.record(A, False, 1000 * u + 700)
            unit.record(A, True, 1000 * u + 720)
            unit.finish(1000 * u + 800, 0)
    decoded = decode_buffer(fake.buffer, fake.layout)
    assert events._adjacent(decoded.records)
    shortcut = pair_records(decoded.records, decoded.units)
    monkeypatch.setattr(events, "_adjacent", lambda records: False)
    general = pair_records(decoded.records, decoded.units)
    for got, expected in zip(shortcut, general, strict=True):
        for name in type(expected).__dataclass_fields__:
            assert np.array_equal(getattr(got, name), getattr(expected, name)), name
    assert len(shortcut[0]) == 2 * (3 + 4 + 5) + 2 * 3 and len(shortcut[1]) == 0


def test_the_shortcut_leaves_nested_scopes_to_the_general_pairing(fake_launch):
    fake = fake_launch(units=1, capacity=8)
    fake.cta(0, smid=0)
    unit = fake.unit(0, 0, 0, 0)
    unit.pair(B, 20, 30)  # inside A's pair, written first
    unit.pair(A, 10, 40)
    unit.finish(50, 0)
    decoded = decode_buffer(fake.buffer, fake.layout)
    assert not events._adjacent(decoded.records)
    pairs, _ = pair_records(decoded.records, decoded.units)
    assert spans(pairs) == [(A, 0, 3), (B, 1, 2)] and pairs.depth.tolist() == [0, 1]
