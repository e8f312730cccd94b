import numpy as np
import pytest

from proton_ik.viewer.tables.timebase import (
    FIT,
    LAUNCH_MEDIAN,
    SESSION_MEDIAN,
    WIDEST_SPAN,
    ClockAnchors,
    fit_session,
)

T0 = 1_700_000_000_000_000_000


def anchors_for(timers, span_cycles, units=40, seed=0):
    """Start/end (clock64, globaltimer) pairs of ``units`` units per SM spread over ``span_cycles``."""
    rng = np.random.default_rng(seed)
    sm, clock, time = [], [], []
    for index, timer in enumerate(timers):
        starts = timer.clock0 + rng.integers(0, max(span_cycles // 2, 1), units)
        ends = starts + rng.integers(span_cycles // 4, span_cycles // 2 + 1, units)
        for c in np.concatenate([starts, ends]).tolist():
            sm.append(index)
            clock.append(c)
            time.append(timer.time(c))
    return ClockAnchors(np.array(sm), np.array(clock, dtype=np.int64), np.array(time, dtype=np.int64))


def test_a_known_rate_is_recovered_from_quantized_globaltimer(sm_timer):
    timers = [sm_timer(1.755, 5_000_000 * (s + 1), T0 + 777 * s, tick=32) for s in range(3)]
    (clocks,) = fit_session([anchors_for(timers, span_cycles=400_000)])  # ~230 us per SM

    assert clocks.source.tolist() == [FIT] * 3
    assert clocks.mhz == pytest.approx(1755, rel=1e-3)
    assert 1e3 / clocks.ns_per_cycle == pytest.approx(np.full(3, 1755.0), rel=1e-3)
    probe = np.array([t.clock0 + 123_456 for t in timers])
    exact = np.array([t.exact_ns(c) for t, c in zip(timers, probe.tolist(), strict=True)])
    assert np.abs(clocks.to_ns(np.arange(3), probe) - exact).max() < 40  # within a globaltimer tick


def test_a_short_sm_borrows_the_launch_median_rate_and_fits_its_offset(sm_timer):
    timers = [sm_timer(1.9, 1_000_000 * (s + 1), T0 + 5000 * s, tick=32) for s in range(4)]
    long_ones = anchors_for(timers[:3], span_cycles=200_000)
    short = anchors_for([timers[3]], span_cycles=4_000, units=5, seed=1)  # ~2 us of globaltimer
    anchors = ClockAnchors(
        np.concatenate([long_ones.sm, short.sm + 3]),
        np.concatenate([long_ones.clock, short.clock]),
        np.concatenate([long_ones.time, short.time]),
    )
    (clocks,) = fit_session([anchors])

    assert clocks.source.tolist() == [FIT, FIT, FIT, LAUNCH_MEDIAN]
    assert clocks.ns_per_cycle[3] == np.median(clocks.ns_per_cycle[:3])
    assert clocks.rate_source == FIT
    probe = timers[3].clock0 + 1_000
    assert abs(int(clocks.to_ns(np.array([3]), np.array([probe]))[0]) - timers[3].exact_ns(probe)) < 40


def test_a_launch_of_short_sms_borrows_the_session_median(sm_timer):
    long_launch = anchors_for([sm_timer(1.5, 10**6, T0)], span_cycles=100_000)
    short_launch = anchors_for([sm_timer(1.5, 10**6, T0)], span_cycles=6_000, seed=2)
    long_clocks, short_clocks = fit_session([long_launch, short_launch])

    assert long_clocks.source.tolist() == [FIT]
    assert short_clocks.source.tolist() == [SESSION_MEDIAN]
    assert short_clocks.ns_per_cycle[0] == long_clocks.ns_per_cycle[0]
    assert short_clocks.rate_source == SESSION_MEDIAN


def test_with_only_short_spans_the_widest_one_sets_the_rate(sm_timer):
    narrow = anchors_for([sm_timer(1.5, 10**6, T0)], span_cycles=3_000, seed=3)
    wide = anchors_for([sm_timer(1.5, 10**6, T0)], span_cycles=20_000, seed=4)
    narrow_clocks, wide_clocks = fit_session([narrow, wide])

    assert narrow_clocks.source.tolist() == [WIDEST_SPAN]
    assert wide_clocks.source.tolist() == [WIDEST_SPAN]
    assert narrow_clocks.ns_per_cycle[0] == wide_clocks.ns_per_cycle[0]
    assert wide_clocks.mhz == pytest.approx(1500, rel=0.02)


def test_no_time_span_anywhere_is_an_error():
    anchors = ClockAnchors(np.array([0, 0]), np.array([100, 200]), np.array([T0, T0]))
    with pytest.raises(ValueError, match="cannot infer the SM clock rate"):
        fit_session([anchors])
