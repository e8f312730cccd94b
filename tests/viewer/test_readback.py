"""Trace files read back: the same per-scope summary as the session they were written from."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from proton_ik import viewer
from proton_ik.runtime.session_writer import SessionWriter
from proton_ik.viewer import LaunchCapture, Trace, readback, render_session
from proton_ik.viewer.perfetto import write_perfetto
from proton_ik.viewer.readback.nesting_order import nesting_order

DATA = Path(__file__).parents[1] / "data"
CAPTURES = sorted(DATA.glob("*.pik"))
STATS = ["line", "count", "mean_ns", "median_ns", "p90_ns", "mean_cycles", "median_cycles", "p90_cycles"]
READERS = {
    ".json": (Trace.write_chrome, readback.read_chrome),
    ".pftrace": (Trace.write_perfetto, readback.read_perfetto),
}


def read_back(trace: Trace, suffix: str, tmp_path: Path) -> readback.TraceFile:
    write, read = READERS[suffix]
    return read(write(trace, tmp_path / f"trace{suffix}"))


@pytest.mark.parametrize("suffix", READERS)
@pytest.mark.parametrize("capture", CAPTURES, ids=lambda path: path.stem)
def test_per_scope_statistics_match_the_session(capture, suffix, tmp_path):
    session = viewer.load(capture)
    expected = session.summary().scopes.set_index(["kernel", "scope"]).sort_index()
    got = read_back(session, suffix, tmp_path).summary().scopes.set_index(["kernel", "scope"]).sort_index()
    assert list(got.index) == list(expected.index)
    pd.testing.assert_frame_equal(got[STATS], expected[STATS], check_dtype=False)
    assert got["share"].to_numpy() == pytest.approx(expected["share"].to_numpy(), rel=1e-12)


@pytest.mark.parametrize("suffix", READERS)
@pytest.mark.parametrize("capture", CAPTURES, ids=lambda path: path.stem)
def test_the_summary_text_is_the_sessions(capture, suffix, tmp_path):
    session = viewer.load(capture)
    assert read_back(session, suffix, tmp_path).summary_text() == session.summary_text()


@pytest.mark.parametrize("suffix", READERS)
def test_per_scope_unmatched_counts_are_unknown_where_the_kernel_lost_records(suffix, fake_launch, tmp_path):
    fake = fake_launch(units=1, capacity=16)
    fake.cta(0, smid=3)
    unit = fake.unit(0, 0, start_clock=1_000, start_time=1_000_000)
    unit.begin(0, 1_100)
    unit.end(0, 1_300)
    unit.begin(1, 1_400)  # never ends
    unit.finish(2_000, 2_000_000)
    session = Trace.from_captures({"name": "t"}, [fake.capture()])
    assert session.summary().kernels["unmatched_begin"].tolist() == [1]
    summary = read_back(session, suffix, tmp_path).summary()
    assert summary.kernels["unmatched_begin"].tolist() == [1]
    row = summary.scopes.set_index("scope").loc["a"]
    assert row["count"] == 1
    assert pd.isna(row["unmatched_begin"])
    assert "<NA>" in str(summary)


def test_a_json_file_from_elsewhere_is_refused_with_the_reason(tmp_path):
    path = tmp_path / "other.json"
    path.write_text('{"traceEvents": []}')
    with pytest.raises(ValueError, match="not a Chrome trace written by proton_ik"):
        readback.read_chrome(path)


def _write_packets(path: Path, packets) -> None:
    with open(path, "wb") as file:
        for packet in packets:
            body = packet.SerializeToString()
            file.write(b"\x0a" + _varint(len(body)) + body)


def test_launch_totals_are_read_from_the_launch_slice_and_one_missing_is_refused(tmp_path):
    session = viewer.load(DATA / "add.pik")
    path = write_perfetto(
        tmp_path / "t.pftrace", session.events, session.units, session.launches, compress=False
    )
    assert readback.read_perfetto(path).summary().kernels["launches"].tolist() == [1]
    packets = readback.read_packets(path)
    iid = next(
        e.iid for p in packets for e in p.interned_data.debug_annotation_names if e.name == "lost_to_ring"
    )
    (launch,) = [p for p in packets if any(a.name_iid == iid for a in p.track_event.debug_annotations)]
    kept = [a for a in launch.track_event.debug_annotations if a.name_iid != iid]
    del launch.track_event.debug_annotations[:]
    launch.track_event.debug_annotations.extend(kept)
    _write_packets(path, packets)
    with pytest.raises(ValueError, match=re.escape("launch 0's lost_to_ring is None, not a whole number")):
        readback.read_perfetto(path)


def test_a_launch_track_with_no_slice_is_refused_with_what_to_do(tmp_path):
    """A launch track and no launch slice: how a proton_ik before the slot timeline wrote totals."""
    session = viewer.load(DATA / "add.pik")
    path = write_perfetto(
        tmp_path / "t.pftrace", session.events, session.units, session.launches, compress=False
    )
    packets = readback.read_packets(path)
    (launch,) = [
        p.track_descriptor.uuid for p in packets if p.track_descriptor.name == "launch 0: add_kernel"
    ]
    track, kept = 0, []
    for packet in packets:
        if packet.HasField("trace_packet_defaults"):
            track = packet.trace_packet_defaults.track_event_defaults.track_uuid
        if not (track == launch and packet.HasField("track_event")):
            kept.append(packet)
    assert len(kept) == len(packets) - 2  # the launch slice's begin and end
    _write_packets(path, kept)
    with pytest.raises(viewer.SessionFileError, match="has no slice with its totals"):
        readback.read_perfetto(path)


def test_any_reader_error_is_a_session_file_error_with_the_path(tmp_path):
    for name, data in {
        "a.json": b"[" * 100_000,
        "b.json": b'{"otherData": {"proton_ik": {}, "launches": [1]}, "traceEvents": []}',
        "c.pftrace": b"\x0a\xff\xff\xff\xff\x0f",
        "d.pftrace": b"\x12\x00",
    }.items():
        path = tmp_path / name
        path.write_bytes(data)
        reader = readback.read_chrome if name.endswith(".json") else readback.read_perfetto
        with pytest.raises(viewer.SessionFileError, match=re.escape(str(path))):
            reader(path)


def test_a_track_that_is_its_own_parent_is_refused_not_looped_on(tmp_path):
    session = viewer.load(DATA / "add.pik")
    path = write_perfetto(
        tmp_path / "t.pftrace", session.events, session.units, session.launches, compress=False
    )
    packets = readback.read_packets(path)
    launches = {p.track_descriptor.uuid for p in packets if p.track_descriptor.parent_uuid == 1}
    below = next(p for p in packets if p.track_descriptor.parent_uuid in launches)
    below.track_descriptor.parent_uuid = below.track_descriptor.uuid
    _write_packets(path, packets)
    with pytest.raises(viewer.SessionFileError, match="parents form a loop"):
        readback.read_perfetto(path)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes([*out, value])


def test_names_with_nul_and_bidi_characters_read_back(tmp_path):
    session = viewer.read_session(DATA / "add.pik")
    captures = []
    for launch in session:
        profile = {**launch.meta["profile"]}
        profile["scopes"] = [{**scope, "name": f"{scope['name']}\x00\u202e"} for scope in profile["scopes"]]
        captures.append(viewer.LaunchCapture({**launch.meta, "profile": profile}, launch.buffer))
    trace = Trace.from_captures(session.info, captures)
    scopes = readback.read_perfetto(trace.write_perfetto(tmp_path / "t.pftrace")).summary().scopes
    assert sorted(scopes["scope"]) == ["compute\x00\u202e", "load\x00\u202e", "store\x00\u202e"]


def test_nesting_order_begins_outermost_first_and_ends_innermost_first():
    """A Chrome trace keeps only times: slices that nest, touch or are empty replay as a stack."""
    # Track 0: [0, 10] holds [0, 4], the empty [4, 4] and [4, 10];
    # track 1: two identical slices.
    begin = np.array([0, 0, 4, 4, 5, 5])
    end = np.array([10, 4, 10, 4, 9, 9])
    track = np.array([0, 0, 0, 0, 1, 1])
    first, last = nesting_order(track, begin, end)
    markers = sorted(
        [(p, i, "begin") for i, p in enumerate(first)] + [(p, i, "end") for i, p in enumerate(last)]
    )
    stack: list[int] = []
    for _, i, kind in markers:
        if kind == "begin":
            stack.append(i)
        else:
            assert stack.pop() == i
    assert not stack
    assert [i for _, i, kind in markers if kind == "begin"][:2] == [0, 1]  # outermost first


@pytest.mark.parametrize("suffix", [".pftrace", ".json"])
def test_show_keeps_only_what_the_summary_needs_and_convert_asks_for_the_rest(suffix, tmp_path):
    out = tmp_path / f"add{suffix}"
    trace = viewer.load(DATA / "add.pik")
    (trace.write_perfetto if suffix == ".pftrace" else trace.write_chrome)(out)
    read = readback.read_perfetto if suffix == ".pftrace" else readback.read_chrome
    summary_only, writable = read(out), read(out, for_writing=True)
    assert "begin_record" not in summary_only.trace.events  # show: no writer columns held
    assert summary_only.summary_text() == writable.summary_text()
    with pytest.raises(ValueError, match="for_writing=True"):
        summary_only.write_chrome(tmp_path / "again.json")
    writable.write_chrome(tmp_path / "again.json")
    assert readback.read_chrome(tmp_path / "again.json").summary_text() == writable.summary_text()


# Per launch, the source file of scopes a, b and c (lines 10, 11, 12); None: the table has none.
FILES = {0: ["a.py", "a.py", None], 1: ["b.py", None, "lib.py"]}


def _launch_with_files(fake_launch, launch: int, files: list[str | None]) -> LaunchCapture:
    """One unit that runs scopes a, b and c once each, whose scope table names ``files``."""
    fake = fake_launch(units=1, capacity=16)
    fake.cta(0, smid=1)
    unit = fake.unit(0, 0, start_clock=1_000, start_time=1_000_000)
    for scope in range(3):
        unit.begin(scope, 1_100 + 300 * scope)
        unit.end(scope, 1_200 + 300 * scope)
    unit.finish(2_500, 2_500_000)
    meta = fake.meta(launch=launch, kernel=f"kernel{launch}")
    for scope, file in zip(meta["profile"]["scopes"], files, strict=True):
        if file is not None:
            scope["file"] = file
    return LaunchCapture(meta, fake.buffer.copy())


@pytest.mark.parametrize("route", ["tables", "render"])
def test_each_scope_slice_carries_its_source_file_and_reads_back(
    route, fake_launch, pftrace_packets, tmp_path, monkeypatch
):
    captures = [_launch_with_files(fake_launch, launch, files) for launch, files in FILES.items()]
    outputs = {"pftrace": tmp_path / "t.pftrace", "json": tmp_path / "t.json"}
    if route == "tables":
        trace = Trace.from_captures({"name": "t"}, captures)
        trace.write_perfetto(outputs["pftrace"])
        trace.write_chrome(outputs["json"])
    else:
        with SessionWriter(tmp_path / "t.pik", {"name": "t"}) as writer:
            for capture in captures:
                writer.add_launch(capture.meta, capture.buffer)
        monkeypatch.setattr("proton_ik.viewer.tables.runs.GROUP_BYTES", 1)  # a packet sequence per launch
        render_session(tmp_path / "t.pik", outputs)
        trace = viewer.load(tmp_path / "t.pik")
    expected = Counter(
        (name, file, 10 + i)
        for files in FILES.values()
        for i, (name, file) in enumerate(zip("abc", files, strict=True))
    )

    # Perfetto: a scope's begin names its interned source location (file and line) where its file
    # is known, and its line as an arg only where not.
    replayed: Counter = Counter()
    names, arg_names, locations = {}, {}, {}  # each sequence starts with its interned data
    for packet in pftrace_packets(outputs["pftrace"]):
        if packet.HasField("interned_data"):
            names = {entry.iid: entry.name for entry in packet.interned_data.event_names}
            arg_names = {entry.iid: entry.name for entry in packet.interned_data.debug_annotation_names}
            locations = {
                loc.iid: (loc.file_name, loc.line_number) for loc in packet.interned_data.source_locations
            }
        event = packet.track_event
        if packet.HasField("track_event") and names.get(event.name_iid) in ("a", "b", "c"):
            args = {arg_names[a.name_iid]: a.int_value for a in event.debug_annotations}
            location = locations.get(event.source_location_iid)
            assert (location is None) == ("line" in args)
            file, line = location or (None, args["line"])
            replayed[names[event.name_iid], file, line] += 1
    assert replayed == expected

    # Chrome JSON: a scope's args name its file where known (no null where not), and its line.
    events = json.loads(outputs["json"].read_text())["traceEvents"]
    scopes = [e for e in events if e["ph"] == "X" and e["name"] in ("a", "b", "c")]
    assert all(e["args"].get("file", "absent") is not None for e in scopes)
    assert Counter((e["name"], e["args"].get("file"), e["args"]["line"]) for e in scopes) == expected

    # Both read back, into the tables and into show's file:line.
    by_scope = {
        (f"kernel{launch}", name): file
        for launch, files in FILES.items()
        for name, file in zip("abc", files, strict=True)
    }
    for read, output in ((readback.read_perfetto, "pftrace"), (readback.read_chrome, "json")):
        got = read(outputs[output])
        events = got.trace.events
        assert {
            (str(kernel), str(scope)): None if pd.isna(file) else file
            for kernel, scope, file in zip(events["kernel"], events["scope"], events["file"], strict=True)
        } == by_scope
        assert got.summary_text() == trace.summary_text()
    text = trace.summary_text()
    assert "a.py:10" in text and "lib.py:12" in text


def test_a_session_from_before_files_were_recorded_writes_no_file(pftrace_packets, tmp_path):
    trace = viewer.load(DATA / "add.pik")
    assert trace.events["file"].isna().all()
    trace.write_perfetto(tmp_path / "t.pftrace")
    trace.write_chrome(tmp_path / "t.json")
    packets = pftrace_packets(tmp_path / "t.pftrace")
    assert not any(p.interned_data.source_locations or p.track_event.source_location_iid for p in packets)
    assert '"file"' not in (tmp_path / "t.json").read_text()


def test_load_refuses_a_trace_and_names_what_reads_it(tmp_path):
    session = viewer.load(DATA / "add.pik")
    for suffix, kind in ((".pftrace", "perfetto"), (".json", "chrome")):
        written = READERS[suffix][0](session, tmp_path / f"trace{suffix}")
        with pytest.raises(viewer.SessionFileError, match=f"is a {kind} trace.*read_trace"):
            viewer.load(written)
        back = readback.read_trace(str(written), readback.file_kind(written)).trace
        assert len(back.events) == len(session.events)
    with pytest.raises(ValueError, match="one of"):
        readback.read_trace(tmp_path / "trace.json", "session")


def _with_a_unit_track_moved(tmp_path, parent: int, foreign_root: bool) -> Path:
    """The add capture's trace, with one warp track re-parented to ``parent`` (a new root track
    of another tool's where ``foreign_root``)."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace as ProtoTrace
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket

    written = viewer.load(DATA / "add.pik").write_perfetto(tmp_path / "add.pftrace")
    packets = readback.read_packets(written)
    unit = next(
        p for p in packets if p.HasField("track_descriptor") and p.track_descriptor.name.startswith("warp")
    )
    unit.track_descriptor.parent_uuid = parent
    extra = [TracePacket(track_descriptor={"uuid": parent, "name": "python thread"})] if foreign_root else []
    moved = tmp_path / "moved.pftrace"
    moved.write_bytes(ProtoTrace(packet=[*extra, *packets]).SerializeToString())
    return moved


def test_a_warp_track_under_no_launch_of_the_session_is_refused(tmp_path):
    moved = _with_a_unit_track_moved(tmp_path, 1, foreign_root=False)
    with pytest.raises(viewer.SessionFileError, match="a track of the session belongs to no launch track"):
        readback.read_perfetto(moved)


def test_another_tools_tracks_are_left_out_with_a_warning(tmp_path):
    moved = _with_a_unit_track_moved(tmp_path, 987_654_321, foreign_root=True)
    with pytest.warns(UserWarning, match="not proton_ik's"):
        back = readback.read_perfetto(moved)
    whole = readback.read_perfetto(tmp_path / "add.pftrace")
    assert 0 < len(back.trace.events) < len(whole.trace.events)
