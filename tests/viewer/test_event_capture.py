"""Decode a real event session captured on an H100 (``tests/gpu/capture_events.py``).

events.pik: barrier_kernel, 8 CTAs x 4 warps, 6 iterations. Per iteration every warp starts
instance i % 2 of "handoff", all warps meet at a ``bar.sync``, every warp ends the instance and
marks "iter" with the iteration as its value; after the loop, odd CTAs mark "odd" and CTA 0
marks "total" with a float. In the first iteration one warp's start read the clock 2 cycles
after another warp's end across the barrier: the sub-partitions' clocks are not in step, and
pairing must allow for it (``pairing.async_events.CLOCK_SKEW_CYCLES``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent

from proton_ik import viewer
from proton_ik.viewer.pairing.async_events import CLOCK_SKEW_CYCLES
from proton_ik.viewer.readback import read_packets

PATH = Path(__file__).parents[1] / "data" / "events.pik"
CTAS, WARPS, ITERS = 8, 4, 6


@pytest.fixture(scope="module")
def trace() -> viewer.Trace:
    return viewer.load(PATH)


def test_every_start_pairs_with_every_end_of_its_iteration(trace) -> None:
    events = trace.async_events
    assert (events["status"] == "matched").all()
    assert len(events) == CTAS * ITERS * WARPS * WARPS
    per_pair = events.groupby(["cta", "start_warp", "end_warp"]).size()
    assert len(per_pair) == CTAS * WARPS * WARPS and (per_pair == ITERS).all()
    for (_, _), group in events.groupby(["cta", "start_record"]):
        assert group["start_cycles"].max() <= group["end_cycles"].min() + CLOCK_SKEW_CYCLES
        assert group["index"].nunique() == 1


def test_the_capture_holds_the_skew_the_pairing_allows_for(trace) -> None:
    """Without the allowance this capture does not pair: keep it a capture that shows why."""
    events = trace.async_events
    grouped = events.groupby(["cta", "start_record"])
    late = grouped["start_cycles"].max() - grouped["end_cycles"].min()
    assert 0 < late.max() <= CLOCK_SKEW_CYCLES


def test_marks_and_values(trace) -> None:
    values = trace.values
    iteration = values[values["mark"] == "iter"].sort_values(["cta", "warp", "cycles"])
    assert len(iteration) == CTAS * WARPS * ITERS
    assert all(
        seq == list(map(float, range(ITERS)))
        for seq in iteration.groupby(["cta", "warp"])["value"].apply(list)
    )
    marks = trace.marks
    assert sorted(set(marks["cta"])) == [c for c in range(CTAS) if c % 2]
    assert set(values[values["mark"] == "total"]["cta"]) == {0}
    assert trace.problems == []


def test_no_event_slice_ends_before_it_begins(trace, tmp_path) -> None:
    """Some of this capture's events last less than the skew between the warps' clocks: their
    measured duration is negative. Perfetto's slices still end at or after their begin, and the
    args keep what was measured."""
    assert (trace.async_events["dur_cycles"] < 0).any()
    packets = read_packets(trace.write_perfetto(tmp_path / "events.pftrace"))
    open_at: dict[int, list[int]] = {}
    ends = 0
    for packet in packets:
        event = packet.track_event
        if event.type == TrackEvent.TYPE_SLICE_BEGIN:
            open_at.setdefault(event.track_uuid, []).append(packet.timestamp)
        elif event.type == TrackEvent.TYPE_SLICE_END:
            assert packet.timestamp >= open_at[event.track_uuid].pop()
            ends += 1
    assert ends >= len(trace.async_events)
