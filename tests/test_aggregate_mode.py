"""``aggregate=on`` in the mode string: parsed, checked, and in Triton's cache key."""

from __future__ import annotations

import dataclasses

import pytest

from proton_ik.mode import Mode


def test_aggregate_round_trips_and_reaches_the_knob():
    mode = Mode.parse("instrumentation:aggregate=on")
    assert mode.aggregate and str(mode).endswith(":aggregate=on")
    assert Mode.parse(str(mode)) == mode
    assert Mode.from_knob(mode.knob) == mode
    # Different knob strings: Triton's cache never hands an aggregate binary to a trace.
    assert mode.knob != Mode().knob


def test_a_trace_modes_string_is_as_before():
    assert str(Mode()) == "instrumentation:granularity=warp:capacity=auto:pairs=on"
    assert Mode.parse("instrumentation:aggregate=off") == Mode()


def test_aggregate_combines_with_granularity():
    mode = Mode.parse("instrumentation:granularity=warpgroup:aggregate=on")
    assert mode.granularity.value == "warpgroup" and mode.aggregate


@pytest.mark.parametrize(
    "text, message",
    [
        ("instrumentation:aggregate=yes", "aggregate='yes': use aggregate=on or aggregate=off"),
        ("instrumentation:aggregate=on:capacity=64", "capacity=64 has no meaning with aggregate=on"),
        ("instrumentation:capacity=64:aggregate=on", "capacity=64 has no meaning with aggregate=on"),
        ("instrumentation:aggregate=on:pairs=off", "pairs=off has no meaning with aggregate=on"),
    ],
)
def test_options_that_mean_nothing_with_aggregate_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        Mode.parse(text)


def test_an_aggregate_mode_takes_no_ring_options_until_it_is_a_trace_again():
    """What calibrate.time_shifts relies on: it times empty scopes as a trace (aggregate off)
    before it sets pairs and a capacity of its own."""
    with pytest.raises(ValueError, match="has no meaning with aggregate=on"):
        dataclasses.replace(Mode(aggregate=True), pairs=False)
    trace = dataclasses.replace(Mode(aggregate=True), aggregate=False)
    assert dataclasses.replace(trace, pairs=False, capacity=128) == Mode(pairs=False, capacity=128)
