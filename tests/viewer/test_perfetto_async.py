"""Events, marks and values in the Perfetto trace: async tracks under the CTA's place, flows from
the warp that started an event to the warp that ended it, marks as instants, values as args and
counters. The buffer is ``test_async_events.pipeline_capture``'s: a producer (warp 2) starts
four tiles of "tma" (two slots), two consumer warps end the first three; the last start has no
end, a "free" end has no start; the consumers mark each tile's phase, the producer a tile mark
without a value and three with one."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackDescriptor, TrackEvent

from proton_ik.runtime.session_writer import write_session
from proton_ik.viewer.readback import read_packets, read_perfetto
from proton_ik.viewer.render import render_session
from proton_ik.viewer.trace import Trace

sys.path.insert(0, str(Path(__file__).parent))
from test_async_events import pipeline_capture

MATCHED = 6  # three tiles, each ended by two consumer warps


def rendered(tmp_path: Path, fake_launch, timeline: str = "slots") -> list:
    session = write_session(tmp_path / "events.pik", {"name": "events"}, [pipeline_capture(fake_launch)])
    render_session(session, {"pftrace": tmp_path / "events.pftrace"}, timeline=timeline)
    return read_packets(tmp_path / "events.pftrace")


def tracks_of(packets) -> dict[int, TrackDescriptor]:
    return {p.track_descriptor.uuid: p.track_descriptor for p in packets if p.HasField("track_descriptor")}


def events_of(packets) -> list[tuple[int, TrackEvent]]:
    return [
        (p.timestamp, p.track_event)
        for p in packets
        if p.HasField("track_event") and p.track_event.track_uuid
    ]


@pytest.mark.parametrize(("timeline", "place"), [("slots", "slot 0"), ("ctas", "CTA 0")])
def test_each_event_has_async_tracks_under_its_place(tmp_path, fake_launch, timeline, place):
    packets = rendered(tmp_path, fake_launch, timeline)
    tracks = tracks_of(packets)
    async_tracks = {uuid: t for uuid, t in tracks.items() if t.name == "tma"}
    assert async_tracks and {tracks[t.parent_uuid].name for t in async_tracks.values()} == {place}
    merge = TrackDescriptor.SIBLING_MERGE_BEHAVIOR_BY_TRACK_NAME
    assert all(t.sibling_merge_behavior == merge for t in async_tracks.values())
    begins = [e for _, e in events_of(packets) if e.type == TrackEvent.TYPE_SLICE_BEGIN]
    ends = [e for _, e in events_of(packets) if e.type == TrackEvent.TYPE_SLICE_END]
    assert len(begins) == len(ends) == MATCHED and {e.track_uuid for e in begins} == set(async_tracks)
    args = {a.name: a.int_value for a in begins[0].debug_annotations}
    assert args["start_warp"] == 2 and args["end_warp"] in (0, 1) and args["cta"] == 0


def test_overlapping_events_never_share_a_track(tmp_path, fake_launch):
    open_on: dict[int, int] = Counter()
    for _, event in sorted(
        events_of(rendered(tmp_path, fake_launch)), key=lambda te: (te[0], te[1].type != 2)
    ):
        if event.type == TrackEvent.TYPE_SLICE_BEGIN:
            open_on[event.track_uuid] += 1
            assert open_on[event.track_uuid] == 1, "two events open at once on one async track"
        elif event.type == TrackEvent.TYPE_SLICE_END:
            open_on[event.track_uuid] -= 1


def test_flows_go_from_the_starting_warp_to_each_ending_warp(tmp_path, fake_launch):
    packets = rendered(tmp_path, fake_launch)
    tracks = tracks_of(packets)
    warp = {uuid: t.name for uuid, t in tracks.items() if t.name.startswith("warp ")}
    starts = {f: (ts, warp[e.track_uuid]) for ts, e in events_of(packets) for f in e.flow_ids}
    ends = {f: (ts, warp[e.track_uuid]) for ts, e in events_of(packets) for f in e.terminating_flow_ids}
    assert len(starts) == len(ends) == MATCHED and set(starts) == set(ends)
    assert {name for _, name in starts.values()} == {"warp 2"}
    assert Counter(name for _, name in ends.values()) == {"warp 0": 3, "warp 1": 3}
    assert all(starts[f][0] <= ends[f][0] for f in starts)


def test_unmatched_records_are_shown_as_instants(tmp_path, fake_launch):
    packets = rendered(tmp_path, fake_launch)
    warp = {uuid: t.name for uuid, t in tracks_of(packets).items()}
    instants = Counter(
        (e.name, warp[e.track_uuid]) for _, e in events_of(packets) if e.type == TrackEvent.TYPE_INSTANT
    )
    assert instants[("tma: no end", "warp 2")] == 1 and instants[("free: no start", "warp 2")] == 1
    assert instants[("tma: start", "warp 2")] == MATCHED
    assert instants[("phase", "warp 0")] == instants[("phase", "warp 1")] == 4
    assert instants[("tile", "warp 2")] == 4  # one without a value, three with one


def test_values_are_args_and_counters_where_they_change(tmp_path, fake_launch):
    packets = rendered(tmp_path, fake_launch)
    tracks = tracks_of(packets)
    counters = {uuid: t for uuid, t in tracks.items() if t.HasField("counter")}
    named = Counter((t.name, tracks[t.parent_uuid].name) for t in counters.values())
    assert named[("phase", "warp 0")] == named[("phase", "warp 1")] == 1 and named[("tile", "warp 2")] == 1
    tile = next(uuid for uuid, t in counters.items() if t.name == "tile")
    tile_points = sorted((ts, e.double_counter_value) for ts, e in events_of(packets) if e.track_uuid == tile)
    assert [v for _, v in tile_points] == [-7.0, float(0xFFFFFFF0), 0.25]
    valued = [e for _, e in events_of(packets) if e.name == "tile" and e.type == TrackEvent.TYPE_INSTANT]
    assert sorted(a.double_value for e in valued for a in e.debug_annotations if a.name == "value") == [
        -7.0,
        0.25,
        float(0xFFFFFFF0),
    ]


def test_scope_slices_read_back_without_the_events_among_them(tmp_path, fake_launch):
    rendered(tmp_path, fake_launch)
    trace = read_perfetto(tmp_path / "events.pftrace", for_writing=True).trace
    assert len(trace.events) == 0 and len(trace.units) == 3
    assert trace.problems == []


def test_a_trace_writes_its_tables_events_included(tmp_path, fake_launch):
    trace = Trace.from_captures({"name": "t"}, [pipeline_capture(fake_launch)])
    trace.write_perfetto(tmp_path / "t.pftrace")
    packets = read_packets(tmp_path / "t.pftrace")
    flows = [f for _, e in events_of(packets) for f in e.flow_ids]
    assert len(flows) == MATCHED
