"""render_session: a session file straight to trace files, run by run, in bounded memory."""

import json
import tracemalloc
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackDescriptor

from proton_ik import viewer
from proton_ik.contract.layout import BufferLayout
from proton_ik.runtime.session_writer import SessionWriter
from proton_ik.viewer import LaunchCapture, RenderStats, load, readback, render_session
from proton_ik.viewer.decode import decode_headers, decode_views

DATA = Path(__file__).parents[1] / "data"
SLICE_COLUMNS = ["kernel", "launch", "scope", "cta", "sm", "warp", "dur_ns", "dur_cycles", "line"]


def write(path: Path, captures, info=None, trim: bool = True) -> Path:
    with SessionWriter(path, info or {"name": "s", "time_shift_cycles": 20}, trim=trim) as writer:
        for capture in captures:
            writer.add_launch(capture.meta, capture.buffer)
    return path


def slices(trace: readback.TraceFile) -> pd.DataFrame:
    """Every scope event and unit lifetime a trace file holds, in one order."""
    events = trace.trace.events[SLICE_COLUMNS].astype({"kernel": str, "scope": str})
    return events.sort_values(SLICE_COLUMNS).reset_index(drop=True)


@pytest.fixture
def session(tmp_path, busy_launch):
    """Two kernels, interleaved, launches of 1 to 5 CTAs."""
    captures = [busy_launch(launch=i, num_ctas=1 + i % 5, iterations=4 + i % 3) for i in range(9)]
    return write(tmp_path / "s.pik", captures)


@pytest.mark.parametrize("group_bytes", [32 << 20, 6000, 1], ids=["one-run", "runs", "cta-by-cta"])
def test_traces_hold_the_events_that_load_gives(session, tmp_path, monkeypatch, group_bytes):
    trace = load(session)
    expected_perfetto = readback.read_perfetto(trace.write_perfetto(tmp_path / "table.pftrace"))
    expected_chrome = readback.read_chrome(trace.write_chrome(tmp_path / "table.json"))
    # Small runs split launches into pieces across runs, and so across packet sequences.
    monkeypatch.setattr("proton_ik.viewer.tables.runs.GROUP_BYTES", group_bytes)
    outputs = {"pftrace": tmp_path / "s.pftrace", "json": tmp_path / "s.json"}
    stats = render_session(session, outputs)

    perfetto = readback.read_perfetto(outputs["pftrace"])
    chrome = readback.read_chrome(outputs["json"])
    pd.testing.assert_frame_equal(slices(perfetto), slices(expected_perfetto))
    pd.testing.assert_frame_equal(slices(chrome), slices(expected_chrome))
    assert len(perfetto.trace.events) == len(trace.events)
    assert perfetto.summary_text() == expected_perfetto.summary_text()
    assert chrome.summary_text() == trace.summary_text()
    assert stats == RenderStats(
        launches=9, records=trace.record_count, events=len(trace.events), problems=tuple(trace.problems)
    )


def test_a_launch_in_pieces_keeps_one_track_per_launch_and_sm(
    session, tmp_path, monkeypatch, pftrace_packets
):
    monkeypatch.setattr("proton_ik.viewer.tables.runs.GROUP_BYTES", 1)  # every CTA its own run
    render_session(session, {"pftrace": tmp_path / "s.pftrace"})
    tracks = [
        p.track_descriptor for p in pftrace_packets(tmp_path / "s.pftrace") if p.HasField("track_descriptor")
    ]
    by_uuid = {track.uuid: track for track in tracks}
    assert len(by_uuid) == len(tracks)  # no track is described twice
    launches = [track for track in tracks if track.parent_uuid == 1]
    assert sorted(track.sibling_order_rank for track in launches) == list(range(9))
    sms = Counter(
        (by_uuid[track.parent_uuid].name, track.name) for track in tracks if track.name.startswith("SM ")
    )
    assert set(sms.values()) == {1}
    assert all(track.child_ordering == TrackDescriptor.EXPLICIT for track in tracks)


def test_chrome_processes_of_a_launch_in_pieces_are_not_split(session, tmp_path, monkeypatch):
    monkeypatch.setattr("proton_ik.viewer.tables.runs.GROUP_BYTES", 1)
    render_session(session, {"json": tmp_path / "s.json"})
    objects = json.loads((tmp_path / "s.json").read_text())["traceEvents"]
    names = Counter(o["args"]["name"] for o in objects if o["name"] == "process_name")
    threads = Counter((o["pid"], o["tid"]) for o in objects if o["name"] == "thread_name")
    assert set(names.values()) == {1} and set(threads.values()) == {1}
    assert len(names) == len(load(session).events.groupby(["launch", "sm"]))


def test_peak_memory_does_not_grow_with_the_number_of_launches(tmp_path, busy_launch, monkeypatch):
    monkeypatch.setattr("proton_ik.viewer.tables.runs.GROUP_BYTES", 128 << 10)  # runs of about 4 launches
    capture = busy_launch(num_ctas=8, units=4, iterations=32, capacity=256)

    def peak(launches: int) -> int:
        captures = [LaunchCapture({**capture.meta, "launch": i}, capture.buffer) for i in range(launches)]
        path = write(tmp_path / f"{launches}.pik", captures)
        tracemalloc.start()
        try:
            stats = render_session(path, {"pftrace": tmp_path / f"{launches}.pftrace"})
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            assert stats.launches == launches

    small, large = peak(20), peak(200)
    # What may grow is each launch's metadata (kilobytes: the manifest, the launch slice), never
    # its events (about 3000, in 20 columns of 8 bytes): 180 more launches held would add
    # `held`. The share allowed covers interpreters that allocate more per launch (seen on a
    # GPU host: 13 kB a launch).
    held = 180 * len(load(tmp_path / "20.pik").events) / 20 * 20 * 8
    assert large - small < held / 20, f"{small / 1e6:.1f} MB for 20 launches, {large / 1e6:.1f} MB for 200"


def test_an_empty_session_renders_empty_traces(tmp_path, pftrace_packets):
    path = write(tmp_path / "empty.pik", [], {"name": "none"})
    stats = render_session(path, {"pftrace": tmp_path / "e.pftrace", "json": tmp_path / "e.json"})
    assert stats == RenderStats(launches=0, records=0, events=0)
    packets = pftrace_packets(tmp_path / "e.pftrace")
    assert [p.track_descriptor.name for p in packets if p.HasField("track_descriptor")] == ["proton_ik: none"]
    assert json.loads((tmp_path / "e.json").read_text())["traceEvents"] == []


def test_an_unknown_output_is_refused(session, tmp_path):
    with pytest.raises(ValueError, match=r"cannot render \['svg'\]: the trace formats are"):
        render_session(session, {"svg": tmp_path / "s.svg"})


def test_render_writes_both_traces_next_to_the_stem(session, tmp_path):
    rendered = viewer.render(session, tmp_path / "out" / "s")
    assert rendered.perfetto.stat().st_size > 0
    assert len(readback.read_chrome(rendered.chrome).trace.events) == len(load(session).events)


@pytest.mark.parametrize("name", ["add", "ring", "spin"])
def test_trimmed_launches_decode_where_they_lie(name, tmp_path):
    source = viewer.read_session(DATA / f"{name}.pik")
    path = write(tmp_path / "t.pik", source.launches, dict(source.info))
    for raw, stored in zip(source.launches, viewer.read_session(path).launches, strict=True):
        layout = BufferLayout.from_dict(raw.meta["profile"]["layout"])
        from_raw, from_stored = (
            decode_views([raw.view(layout)], layout),
            decode_views([stored.view(layout)], layout),
        )
        for field in ("unit_row", "index", "tag", "clock", "paired"):
            assert np.array_equal(getattr(from_raw.records, field), getattr(from_stored.records, field))
        # Headers alone: the front of the stored launch, with the same unit tables.
        _, units = decode_headers([stored.view(layout, headers_only=True)], layout)
        assert stored.view(layout, headers_only=True).slots.size == 0
        for field in ("start_clock", "end_clock", "entries", "finished"):
            assert np.array_equal(getattr(units, field), getattr(from_raw.units, field))
