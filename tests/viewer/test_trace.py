import json
import platform
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from proton_ik.runtime.session_writer import write_session
from proton_ik.viewer import LaunchCapture, Rendered, Trace, load, render

T0 = 1_700_000_000_000_000_000


def test_a_session_file_loads_and_renders_both_traces(tmp_path, busy_launch, pftrace_packets):
    captures = [busy_launch(launch=0), busy_launch(launch=1, num_ctas=2)]
    path = write_session(tmp_path / "s.pik", {"name": "s", "device": "NVIDIA H200"}, captures)

    trace = load(path)
    rendered = render(path, tmp_path / "out" / "s")

    assert rendered == Rendered(tmp_path / "out" / "s.pftrace", tmp_path / "out" / "s.json")
    assert pftrace_packets(rendered.perfetto)
    assert json.loads(rendered.chrome.read_text())["traceEvents"]
    assert trace.device == "NVIDIA H200"
    assert trace.record_count == 768 + 384
    pd.testing.assert_frame_equal(trace.events, Trace.from_captures(trace.info, captures).events)
    assert trace.events["launch"].tolist() == [0] * 384 + [1] * 192
    assert (trace.events["begin_rel_ns"] == trace.events["begin_ns"] - trace.units["start_ns"].min()).all()


def test_launches_decoded_together_or_one_by_one_give_the_same_tables(busy_launch, monkeypatch):
    # Two kernels, interleaved: each kernel's launches are decoded together, then put in launch order.
    captures = [busy_launch(launch=i, num_ctas=2 + i % 3) for i in range(6)]
    together = Trace.from_captures({"name": "t"}, captures)
    monkeypatch.setattr("proton_ik.viewer.tables.runs.GROUP_BYTES", 0)
    alone = Trace.from_captures({"name": "t"}, captures)

    assert together.events["launch"].tolist() == sorted(together.events["launch"])
    assert together.events["kernel"].tolist()[:3] == ["kernel0"] * 3
    for table in ("events", "units", "unmatched", "launches"):
        pd.testing.assert_frame_equal(getattr(together, table), getattr(alone, table))


def broken_launch(fake_launch):
    """CTA 0: a finished unit with an unknown scope id, and a crashed one; CTA 1: both crashed; CTA 2 never ran."""
    fake = fake_launch(units=2, capacity=8, num_ctas=3)
    fake.cta(0, smid=0)
    unit = fake.unit(0, 0, 0, T0)
    unit.begin(0, 100)
    unit.end(0, 200)
    unit.begin(9, 300)  # an id the scope table lacks
    unit.end(9, 400)
    unit.finish(40_000, T0 + 40_000)
    fake.unit(0, 1, 0, T0).begin(1, 50)  # never finishes, never stores its count
    fake.cta(1, smid=1)  # CTA 1's units both crash; CTA 2 never runs
    for u in range(2):
        fake.unit(1, u, 0, T0).begin(1, 50)
    return fake.capture(num_ctas=3)


def test_what_went_wrong_is_reported_not_raised(tmp_path, fake_launch):
    trace = Trace.from_captures({"name": "t"}, [broken_launch(fake_launch)])

    (launch,) = trace.launches.itertuples()
    assert (launch.ctas, launch.ctas_missing, launch.units_unfinished, launch.units_skipped) == (3, 1, 3, 3)
    assert set(trace.events["scope"]) == {"a", "<scope 9>"}
    assert trace.units["start_ns"].isna().tolist() == [False, False, True, True]  # SM 1 has no clock anchors
    text = trace.summary_text()
    assert "launch 0 (kernel): 1 of 3 CTAs have no header" in text
    assert "scope ids missing from the kernel's scope table: [9]" in text
    assert trace.write_perfetto(tmp_path / "t.pftrace").stat().st_size > 0
    assert trace.write_chrome(tmp_path / "t.json").stat().st_size > 0


def test_a_launch_decoded_in_pieces_gives_the_same_tables_and_problems(fake_launch, monkeypatch):
    captures = [broken_launch(fake_launch), broken_launch(fake_launch)]
    whole = Trace.from_captures({"name": "t"}, captures)
    monkeypatch.setattr("proton_ik.viewer.tables.runs.GROUP_BYTES", 1)  # one CTA per piece
    pieces = Trace.from_captures({"name": "t"}, captures)

    assert whole.problems == pieces.problems and len(whole.problems) == 2 * 4
    for table in ("events", "units", "unmatched", "launches"):
        pd.testing.assert_frame_equal(getattr(whole, table), getattr(pieces, table))


def test_a_launch_whose_buffer_does_not_match_its_grid_is_reported(busy_launch):
    capture = busy_launch(num_ctas=2)
    trace = Trace.from_captures({}, [LaunchCapture({**capture.meta, "grid": [4, 1, 1]}, capture.buffer)])
    assert "the buffer holds 2 CTAs but the launch had 4" in trace.problems[0]


def test_warpgroup_units_name_their_warps(tmp_path, fake_launch, pftrace_packets):
    fake = fake_launch(units=2, capacity=8)
    fake.cta(0, smid=0)
    for u in range(2):
        unit = fake.unit(0, u, 0, T0)
        unit.begin(0, 100)
        unit.end(0, 200)
        unit.finish(40_000, T0 + 40_000)
    trace = Trace.from_captures({}, [fake.capture(warps_per_unit=4)])

    assert trace.events["warp"].tolist() == [0, 4]
    names = {p.track_descriptor.name for p in pftrace_packets(trace.write_perfetto(tmp_path / "t.pftrace"))}
    assert {"warps 0-3", "warps 4-7"} <= names
    assert '"slot 0 warps 4-7"' in trace.write_chrome(tmp_path / "t.json").read_text()  # CTA 0's slot


def test_a_layout_from_another_version_names_the_launch(fake_launch):
    fake = fake_launch()
    capture = fake.capture(kernel="matmul")
    capture.meta["profile"]["layout"]["version"] = 99
    with pytest.raises(ValueError, match=r"launch 0 \(matmul\): buffer layout version 99"):
        Trace.from_captures({}, [capture])


def test_an_empty_session_writes_empty_traces(tmp_path, pftrace_packets):
    trace = Trace.from_captures({"name": "none"}, [])
    assert len(trace.events) == 0 and trace.record_count == 0
    packets = pftrace_packets(trace.write_perfetto(tmp_path / "t.pftrace"))
    assert [p.track_descriptor.name for p in packets if p.HasField("track_descriptor")] == ["proton_ik: none"]
    assert json.loads(trace.write_chrome(tmp_path / "t.json").read_text())["traceEvents"] == []


@pytest.mark.parametrize("name", ["add.pik", "ring.pik", "events.pik", "clusters.pik", "diff_a.pik"])
def test_a_session_loaded_for_its_summary_summarizes_as_the_whole_load(name, monkeypatch):
    """``load_for_summary`` keeps only the columns the summary reads, chunk by chunk (one CTA a
    chunk here): the same summary, text and tables."""
    from proton_ik.viewer import load_for_summary

    path = Path(__file__).parents[1] / "data" / name
    whole = load(path).summary()
    monkeypatch.setattr("proton_ik.viewer.tables.runs.GROUP_BYTES", 1)
    lean_trace = load_for_summary(path)
    lean = lean_trace.summary()
    assert str(lean) == str(whole)
    pd.testing.assert_frame_equal(lean.scopes, whole.scopes)
    pd.testing.assert_frame_equal(lean.kernels, whole.kernels)
    assert set(lean_trace.events.columns) < set(load(path).events.columns)


def test_joining_the_chunks_takes_each_column_out_of_them_as_it_goes(monkeypatch):
    """Memory holds a table of millions of rows about once while its chunks are joined: each
    column leaves the chunks as it is joined, and the heap's freed pages are handed back; the
    rows still come out in launch order."""
    from proton_ik.viewer import trace as trace_module

    trims: list[int] = []
    monkeypatch.setattr(trace_module, "release_freed_memory", lambda: trims.append(1))
    parts = [
        {"order": np.array([2, 2]), "value": np.array([20, 21])},
        {"order": np.array([0, 1]), "value": np.array([0, 10])},
    ]
    joined = trace_module._in_launch_order(parts)
    assert parts == [{}, {}] and len(trims) == 2
    assert joined["order"].tolist() == [0, 1, 2, 2] and joined["value"].tolist() == [0, 10, 20, 21]


def test_freed_memory_goes_back_where_the_c_library_can_give_it():
    from proton_ik.viewer.arrays import freed, release_freed_memory

    release_freed_memory()  # never raises; glibc's malloc_trim where there is one
    if sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc":
        assert freed._TRIM is not None


def _same_summary(path: Path) -> None:
    from proton_ik.viewer import summarize_session

    whole = load(path).summary()
    gathered = summarize_session(path)
    assert gathered.info == dict(load(path).info)
    lean = gathered.summary
    assert str(lean) == str(whole)
    for name in ("scopes", "kernels", "clusters", "events", "aggregates"):
        pd.testing.assert_frame_equal(getattr(lean, name), getattr(whole, name))
    assert (lean.problems, lean.warnings) == (whole.problems, whole.warnings)


@pytest.mark.parametrize(
    "name",
    ["add.pik", "ring.pik", "events.pik", "clusters.pik", "diff_a.pik", "slots.pik", "torch_profiler.pik"],
)
@pytest.mark.parametrize("chunk_bytes", [1, None])
def test_a_session_summarized_chunk_by_chunk_summarizes_as_the_whole_load(name, chunk_bytes, monkeypatch):
    """``summarize_session`` (what ``proton-ik show`` runs) keeps no events table: the same
    summary, text and tables, whether a chunk holds one CTA or many launches."""
    if chunk_bytes is not None:
        monkeypatch.setattr("proton_ik.viewer.tables.runs.GROUP_BYTES", chunk_bytes)
    _same_summary(Path(__file__).parents[1] / "data" / name)


def test_host_scopes_and_launch_names_summarize_chunk_by_chunk_as_whole(tmp_path, busy_launch, monkeypatch):
    from .test_host_scopes import write_host_scoped

    monkeypatch.setattr("proton_ik.viewer.tables.runs.GROUP_BYTES", 1)  # launches across chunks
    _same_summary(write_host_scoped(tmp_path / "h.pik", busy_launch))


def test_a_session_with_no_launch_summarizes_as_whole(tmp_path):
    path = write_session(tmp_path / "empty.pik", {"name": "empty"}, [])
    _same_summary(path)


def test_the_gathered_events_take_twenty_bytes_each():
    """An event's pair number and two durations, not the events table's columns."""
    from proton_ik.viewer.session_file import read_session
    from proton_ik.viewer.summary import ScopeSample
    from proton_ik.viewer.tables import Pipeline, time_shift_cycles

    session = read_session(Path(__file__).parents[1] / "data" / "add.pik")
    sample = ScopeSample()
    events = 0
    for chunk in Pipeline(session.launches, time_shift_cycles(session.info)).chunks():
        sample.add(chunk)
        events += len(chunk.events["launch"])
    held = sum(part.nbytes for parts in (sample._pair, sample._ns, sample._cycles) for part in parts)
    assert events and held == 20 * events
