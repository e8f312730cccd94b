import pytest

from proton_ik.viewer import LaunchCapture, Trace
from proton_ik.viewer.tables import TimeShift

T0 = 1_700_000_000_000_000_000
A, B, C = 0, 1, 2


def shifted_trace(fake_launch, info):
    """A 1 GHz clock and a 1 ns globaltimer: nanoseconds equal cycles, so every number is exact."""
    fake = fake_launch(units=1, capacity=16)
    fake.cta(0, smid=0)
    unit = fake.unit(0, 0, 0, T0)
    script = [
        (A, False, 1000), (A, True, 1100),  # a plain scope
        (A, False, 2000), (B, False, 2010), (B, True, 2100), (A, True, 2200),  # B begins 10 cycles into A
        (C, False, 3000), (C, True, 3020),  # shorter than the shift
    ]  # fmt: skip
    for scope, is_end, clock in script:
        unit.record(scope, is_end, clock)
    unit.finish(40_000, T0 + 40_000)
    return Trace.from_captures(info, [fake.capture()])


def test_scope_begins_move_later_by_the_time_shift(fake_launch):
    events = shifted_trace(fake_launch, {"time_shift_cycles": 30}).events.set_index(["scope", "begin_record"])

    plain = events.loc[("a", 0)]
    assert (plain["begin_cycles_raw"], plain["begin_cycles"], plain["end_cycles"]) == (1000, 1030, 1100)
    assert (plain["dur_cycles"], plain["dur_ns"], plain["begin_ns"]) == (70, 70, T0 + 1030)
    # A's shifted begin would pass B's begin: it stops at the unit's next record, so B stays inside A.
    outer, inner = events.loc[("a", 2)], events.loc[("b", 3)]
    assert (outer["begin_cycles_raw"], outer["begin_cycles"], outer["dur_cycles"]) == (2000, 2010, 190)
    assert (inner["begin_cycles"], inner["dur_cycles"]) == (2040, 60)
    assert outer["begin_ns"] <= inner["begin_ns"] and inner["end_ns"] <= outer["end_ns"]
    # A scope shorter than the shift is clipped to zero length, at its end.
    short = events.loc[("c", 6)]
    assert (short["begin_cycles"], short["dur_cycles"], short["dur_ns"]) == (3020, 0, 0)


def test_the_shift_is_reported_per_launch_and_in_the_summary(fake_launch):
    trace = shifted_trace(fake_launch, {"time_shift_cycles": 30})
    assert trace.launches["time_shift_cycles"].tolist() == [30]
    assert trace.time_shift_cycles == TimeShift(single=30, pair=30)
    assert "scope begins shifted by 30 cycles" in trace.summary_text()


def test_sessions_from_before_the_calibration_are_not_shifted(fake_launch):
    trace = shifted_trace(fake_launch, {})
    assert (trace.events["begin_cycles"] == trace.events["begin_cycles_raw"]).all()
    assert trace.events["dur_cycles"].tolist() == [100, 200, 90, 20]
    assert trace.launches["time_shift_cycles"].tolist() == [0]
    assert "scope begins shifted by 0 cycles" in trace.summary_text()


@pytest.mark.parametrize("shift", [-5, 2.5, "30", True])
def test_a_shift_that_is_not_a_cycle_count_is_refused(fake_launch, shift):
    with pytest.raises(ValueError, match=r"time_shift_cycles is .* not a whole number of cycles"):
        shifted_trace(fake_launch, {"time_shift_cycles": shift})


def test_single_records_and_pairs_shift_by_their_own_amounts(fake_launch):
    """A single begin carries its own store inside the scope; a paired begin is a bare clock read."""
    fake = fake_launch(units=1, capacity=8)
    fake.cta(0, smid=0)
    unit = fake.unit(0, 0, start_clock=0, start_time=0)
    unit.begin(0, 100)
    unit.end(0, 400)
    unit.pair(1, 500, 800)
    unit.finish(1000, 1000)
    info = {"name": "t", "time_shift_cycles": {"single": 20, "pair": 2}}
    trace = Trace.from_captures(info, [LaunchCapture(fake.meta(scopes=["single", "paired"]), fake.buffer)])
    events = trace.events.set_index("scope")
    assert events.loc["single", "begin_cycles"] == 120 and events.loc["single", "dur_cycles"] == 280
    assert events.loc["paired", "begin_cycles"] == 502 and events.loc["paired", "dur_cycles"] == 298
    assert trace.time_shift_cycles == TimeShift(single=20, pair=2)
    assert trace.launches["time_shift_pair_cycles"].tolist() == [2]
    assert "20 cycles (2 for paired scopes)" in trace.summary_text()
