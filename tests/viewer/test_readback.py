"""Trace files read back: the same per-scope summary as the session they were written from."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from proton_ik import viewer
from proton_ik.viewer import Trace, readback
from proton_ik.viewer.perfetto import write_perfetto

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
    first, last = readback._nesting_order(track, begin, end)
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
