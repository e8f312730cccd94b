from collections import defaultdict
from dataclasses import dataclass, field

import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import (
    BUILTIN_CLOCK_BOOTTIME,
    TracePacket,
    TrackDescriptor,
    TrackEvent,
)

from proton_ik.viewer import Trace
from proton_ik.viewer.perfetto import INCREMENTAL_CLOCK_ID, SEQUENCE_ID, write_perfetto
from proton_ik.viewer.tracks import COUNTERS, LAUNCH_TOTALS, LIFETIME, TIMELINES


@dataclass
class Replay:
    """What trace processor would make of the packets: tracks, and slices with absolute times."""

    tracks: dict[int, TrackDescriptor] = field(default_factory=dict)
    slices: list[dict] = field(default_factory=list)
    snapshots: list[int] = field(default_factory=list)
    counters: dict[int, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))

    def path(self, uuid: int) -> list[str]:
        names = []
        while uuid:
            names.append(self.tracks[uuid].name)
            uuid = self.tracks[uuid].parent_uuid
        return names[::-1]


def replay(packets: list[TracePacket]) -> Replay:
    result = Replay()
    names, annotation_names, strings = {}, {}, {}
    track, last, extra = None, None, []
    stacks = defaultdict(list)
    assert packets[0].sequence_flags & TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    for packet in packets:
        if packet.HasField("track_descriptor"):
            result.tracks[packet.track_descriptor.uuid] = packet.track_descriptor
            continue
        assert packet.trusted_packet_sequence_id == SEQUENCE_ID
        names.update({entry.iid: entry.name for entry in packet.interned_data.event_names})
        annotation_names.update(
            {entry.iid: entry.name for entry in packet.interned_data.debug_annotation_names}
        )
        strings.update(
            {entry.iid: entry.str.decode() for entry in packet.interned_data.debug_annotation_string_values}
        )
        if packet.HasField("trace_packet_defaults"):
            assert packet.trace_packet_defaults.timestamp_clock_id == INCREMENTAL_CLOCK_ID
            track = packet.trace_packet_defaults.track_event_defaults.track_uuid
            extra = list(packet.trace_packet_defaults.track_event_defaults.extra_counter_track_uuids)
        if packet.HasField("clock_snapshot"):
            clocks = {clock.clock_id: clock for clock in packet.clock_snapshot.clocks}
            assert clocks[INCREMENTAL_CLOCK_ID].is_incremental
            assert clocks[BUILTIN_CLOCK_BOOTTIME].timestamp == clocks[INCREMENTAL_CLOCK_ID].timestamp
            last = clocks[INCREMENTAL_CLOCK_ID].timestamp
            result.snapshots.append(last)
            continue
        if not packet.HasField("track_event"):
            continue
        event = packet.track_event
        assert (
            packet.HasField("timestamp") and not event.HasField("track_uuid") and not event.HasField("name")
        )
        last += packet.timestamp
        for counter, value in zip(extra, event.extra_counter_values, strict=False):
            result.counters[counter].append((last, value))
        if event.type == TrackEvent.TYPE_COUNTER:
            result.counters[track].append((last, event.counter_value))
        elif event.type == TrackEvent.TYPE_SLICE_BEGIN:
            args = {annotation_names[a.name_iid]: a.int_value for a in event.debug_annotations}
            args |= {
                annotation_names[a.name_iid]: strings[a.string_value_iid]
                for a in event.debug_annotations
                if a.HasField("string_value_iid")
            }
            stacks[track].append({"track": track, "name": names[event.name_iid], "begin": last, "args": args})
        else:
            assert event.type == TrackEvent.TYPE_SLICE_END
            open_slice = stacks[track].pop()
            result.slices.append({**open_slice, "end": last, "depth": len(stacks[track])})
    assert not any(stacks.values()), "slices left open"
    return result


@pytest.mark.parametrize("timeline", TIMELINES)
def test_slices_tracks_and_times_match_the_events(tmp_path, busy_launch, pftrace_packets, timeline):
    trace = Trace.from_captures(
        {"name": "t", "time_shift_cycles": 40}, [busy_launch(launch=0), busy_launch(launch=1, num_ctas=3)]
    )
    assert (trace.events["begin_cycles"] > trace.events["begin_cycles_raw"]).all()
    path = write_perfetto(
        tmp_path / "t.pftrace",
        trace.events,
        trace.units,
        trace.launches,
        title="proton_ik: t",
        timeline=timeline,
    )
    result = replay(pftrace_packets(path))

    assert result.snapshots == sorted(result.snapshots)  # one clock's snapshots never go back
    launches = [s for s in result.slices if len(result.path(s["track"])) == 2]  # on a launch track
    slices = [s for s in result.slices if s not in launches]
    scopes = [s for s in slices if s["name"] != LIFETIME]
    lifetimes = [s for s in slices if s["name"] == LIFETIME]
    assert len(scopes) == len(trace.events)
    assert len(lifetimes) == int(trace.units["finished"].sum())

    got = {}
    # busy_launch runs an SM's CTAs one after another: with slots, all in its slot 0.
    place = "slot 0" if timeline == "slots" else "CTA {}"
    for s in scopes + lifetimes:
        root, launch, sm, where, warp = result.path(s["track"])
        assert root == "proton_ik: t"
        assert (sm, where, warp) == (
            f"SM {s['args']['sm']}",
            place.format(s["args"]["cta"]),
            f"warp {s['args']['warp']}",
        )
        assert s["args"]["kind"] == ("unit" if s["name"] == LIFETIME else "scope")
    for s in scopes:
        launch = result.path(s["track"])[1]
        number = int(launch.split(":")[0].removeprefix("launch "))
        got[(number, s["args"]["cta"], s["args"]["warp"], s["name"], s["begin"])] = (
            s["end"] - s["begin"],
            s["args"]["cycles"],
            s["args"]["line"],
            s["depth"],
        )
    expected = {
        (e.launch, e.cta, e.warp, e.scope, e.begin_ns): (e.dur_ns, e.dur_cycles, e.line, e.depth + 1)
        for e in trace.events.itertuples()
    }
    assert got == expected  # depth + 1: every scope nests in its warp's lifetime slice

    units = trace.units.set_index(["launch", "cta", "warp"])
    for s in lifetimes:
        launch = int(result.path(s["track"])[1].split(":")[0].removeprefix("launch "))
        unit = units.loc[(launch, s["args"]["cta"], s["args"]["warp"])]
        assert (s["begin"], s["end"], s["depth"]) == (unit["start_ns"], unit["end_ns"], 0)
        assert s["args"]["records"] == unit["count"]

    # Each launch's slice spans its units' and carries its totals as numbers.
    assert [s["name"] for s in launches] == [LIFETIME] * len(trace.launches)
    for s in launches:
        number = s["args"]["launch"]
        units = trace.units[trace.units["launch"] == number]
        assert (s["begin"], s["end"]) == (units["start_ns"].min(), units["end_ns"].max())
        row = trace.launches.set_index("launch").loc[number]
        assert {key: s["args"][key] for key in LAUNCH_TOTALS} == {key: row[key] for key in LAUNCH_TOTALS}
        assert s["args"]["kind"] == "launch"


def test_siblings_sort_numerically(tmp_path, busy_launch, pftrace_packets):
    trace = Trace.from_captures(
        {"name": "t"}, [busy_launch(launch=i, num_ctas=12, sms=11) for i in range(11)]
    )
    result = replay(pftrace_packets(trace.write_perfetto(tmp_path / "t.pftrace")))
    children = defaultdict(list)
    for descriptor in result.tracks.values():
        children[descriptor.parent_uuid].append(descriptor)
    for parent, kids in children.items():
        if not parent:
            continue
        assert result.tracks[parent].child_ordering == TrackDescriptor.EXPLICIT
        ordered = [kid.name for kid in sorted(kids, key=lambda kid: kid.sibling_order_rank)]
        if result.tracks[parent].name.startswith("SM "):  # its counters come first
            assert ordered[: len(COUNTERS)] == list(COUNTERS)
            ordered = ordered[len(COUNTERS) :]
        numbers = [int(name.split(":")[0].split()[1]) for name in ordered]
        assert numbers == sorted(numbers), ordered
    launches = [d.name for d in sorted(children[1], key=lambda d: d.sibling_order_rank)]
    assert launches[:3] == ["launch 0: kernel0", "launch 1: kernel1", "launch 2: kernel0"]
    assert launches[-1] == "launch 10: kernel0"


def test_overlapping_scopes_go_to_a_sibling_track(tmp_path, fake_launch, pftrace_packets):
    fake = fake_launch(units=1, capacity=8)
    fake.cta(0, smid=4)
    unit = fake.unit(0, 0, 0, 1_000)
    for scope, is_end, clock in [(0, False, 100), (1, False, 200), (0, True, 300), (1, True, 400)]:
        unit.record(scope, is_end, clock)
    unit.finish(60_000, 31_000)
    trace = Trace.from_captures({"name": "t"}, [fake.capture()])
    result = replay(pftrace_packets(trace.write_perfetto(tmp_path / "t.pftrace")))

    by_name = {s["name"]: s for s in result.slices}
    a, b = by_name["a"], by_name["b"]
    assert result.path(a["track"])[-1] == "warp 0"
    assert result.path(b["track"])[-1] == "warp 0 overlap 1"
    assert result.tracks[a["track"]].parent_uuid == result.tracks[b["track"]].parent_uuid
    assert a["begin"] < b["begin"] < a["end"] < b["end"]


def test_compressed_and_plain_traces_hold_the_same_packets(tmp_path, busy_launch, pftrace_packets):
    trace = Trace.from_captures({"name": "t"}, [busy_launch()])
    args = (trace.events, trace.units, trace.launches)
    packed = pftrace_packets(write_perfetto(tmp_path / "packed.pftrace", *args))
    plain = pftrace_packets(write_perfetto(tmp_path / "plain.pftrace", *args, compress=False))
    assert [p.SerializeToString() for p in packed] == [p.SerializeToString() for p in plain]
    assert not any(p.HasField("compressed_packets") for p in plain)


@pytest.mark.parametrize("hidden", [(), ("deflate",), ("deflate", "zlib_ng")])
def test_each_deflate_the_sink_may_use_writes_what_zlib_inflates(
    tmp_path, busy_launch, pftrace_packets, monkeypatch, hidden
):
    """libdeflate where installed, else zlib-ng, else zlib: each trace holds the plain one's packets."""
    import sys
    import zlib

    from proton_ik.viewer.perfetto import sink

    for name in hidden:
        monkeypatch.setitem(sys.modules, name, None)  # its import raises ImportError
    compress, level = sink._deflate()
    assert (compress is zlib.compress) == (len(hidden) == 2)
    monkeypatch.setattr(sink, "COMPRESS", compress)
    monkeypatch.setattr(sink, "COMPRESS_LEVEL", level)
    trace = Trace.from_captures({"name": "t"}, [busy_launch()])
    args = (trace.events, trace.units, trace.launches)
    packed = pftrace_packets(write_perfetto(tmp_path / "packed.pftrace", *args))
    plain = pftrace_packets(write_perfetto(tmp_path / "plain.pftrace", *args, compress=False))
    assert [p.SerializeToString() for p in packed] == [p.SerializeToString() for p in plain]


def framed(data: bytes) -> list[bytes]:
    """The bytes of each ``Trace.packet`` field of a trace, in order."""
    packets, at = [], 0
    while at < len(data):
        assert data[at] == 0x0A  # field 1, length-delimited
        length, shift, at = 0, 0, at + 1
        while True:
            byte, at = data[at], at + 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        packets.append(data[at : at + length])
        at += length
    return packets


def test_packets_are_encoded_exactly_as_protobuf_encodes_them(tmp_path, busy_launch):
    trace = Trace.from_captures({"name": "t"}, [busy_launch(launch=0), busy_launch(launch=1, num_ctas=3)])
    args = (trace.events, trace.units, trace.launches)
    packets = framed(write_perfetto(tmp_path / "t.pftrace", *args, compress=False).read_bytes())
    assert len(packets) > 2 * len(trace.events)
    for data in packets:
        assert TracePacket.FromString(data).SerializeToString() == data


def test_a_hundred_thousand_events_take_at_most_25_bytes_each(tmp_path, busy_launch):
    capture = busy_launch(num_ctas=50, units=8, iterations=84, capacity=512, sms=8)
    trace = Trace.from_captures({"name": "big"}, [capture])
    assert len(trace.events) == 100_800
    path = trace.write_perfetto(tmp_path / "big.pftrace")
    per_event = path.stat().st_size / len(trace.events)
    assert per_event <= 25, f"{per_event:.1f} bytes per event"


@pytest.mark.parametrize("progress", [True, False])
def test_the_progress_bar_can_be_forced(tmp_path, busy_launch, capsys, progress):
    trace = Trace.from_captures({"name": "t"}, [busy_launch()])
    trace.write_perfetto(tmp_path / "t.pftrace", progress=progress)
    assert ("perfetto" in capsys.readouterr().err) is progress
