"""A session and a torch.profiler trace of the same steps on one time axis (issue 27).

The capture (tests/gpu/capture_torch_profiler.py, on an H200): a compiled LayerNorm + GELU
(Inductor's kernel, recorded with ``unscoped=kernel``) and a scoped user kernel of 10 us to
10 ms, three steps on the default stream and two launches on a side stream, under
``torch.profiler.profile(activities=[CPU, CUDA])``.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest

import proton_ik
from proton_ik.cli import main
from proton_ik.contract.session_format import host_offset_ns
from proton_ik.viewer.readback.packets import read_packets
from proton_ik.viewer.torch_profiler.kineto import TorchTraceError, read_kineto
from proton_ik.viewer.torch_profiler.timeline import align_launches, launch_spans, merge_torch_trace

DATA = Path(__file__).parents[1] / "data"
SESSION = DATA / "torch_profiler.pik"
TORCH_TRACE = DATA / "torch_profiler_trace.json.gz"


@pytest.fixture(scope="module")
def kineto():
    return read_kineto(TORCH_TRACE)


@pytest.fixture(scope="module")
def spans():
    return launch_spans(SESSION)


@pytest.mark.parametrize("name", ["torch_profiler.pik", "clusters.pik", "events.pik", "ring.pik"])
def test_launch_spans_from_the_headers_are_the_units_tables(name):
    """The span pass reads unit headers only; its spans are those of the decoded units table."""
    spans, _ = launch_spans(DATA / name)
    trace = proton_ik.viewer.load(DATA / name)
    units = trace.units[trace.units["finished"]]
    expected = units.groupby("launch").agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"))
    assert spans["launch"].tolist() == expected.index.tolist()
    assert spans["start_ns"].tolist() == expected["start_ns"].tolist()
    assert spans["end_ns"].tolist() == expected["end_ns"].tolist()
    launches = trace.launches.set_index("launch").loc[spans["launch"]]
    assert spans["kernel"].tolist() == launches["kernel"].astype(str).tolist()


def test_kineto_kernels_are_on_the_hosts_realtime_clock(kineto):
    kernels = kineto.kernels
    busy = kernels[kernels["name"] == "busy_kernel"]
    assert len(busy) == 14 and set(busy["stream"]) == {7, 13}
    assert (kernels["end_ns"] >= kernels["begin_ns"]).all()
    # baseTimeNanoseconds + ts: within a second of the session's start (host realtime ns).
    started = json.loads(gzip.decompress(TORCH_TRACE.read_bytes()))["baseTimeNanoseconds"]
    assert 0 < busy["begin_ns"].min() - started < 10**16  # ts counts microseconds from the base
    assert abs(busy["begin_ns"].min() - spans_start_ns()) < 10**9


def spans_start_ns() -> int:
    table, _ = launch_spans(SESSION)
    return int(table["start_ns"].min())


def test_every_launch_matches_its_cupti_kernel_within_two_microseconds(kineto, spans):
    table, info = spans
    alignment = align_launches(table, kineto.kernels, host_offset_ns(info))
    assert alignment.unmatched == []
    matches = alignment.matches
    assert list(matches["launch"]) == list(range(17))
    assert (matches["kernel"] == [kineto.events[e]["name"] for e in matches["event"]]).all()
    # Our default stream (handle 0) is CUPTI's stream 7, the side stream its 13.
    assert alignment.streams[0] == 7 and len(alignment.streams) == 2
    assert set(alignment.streams.values()) == {7, 13}
    errors = alignment.errors()
    assert errors["kernels"] == 14
    assert errors["begin_median_ns"] < 2000 and errors["end_median_ns"] < 2000
    # The last warp never exits after CUPTI's end, nor the first starts before its begin, by
    # more than the alignment's spread.
    assert (matches["end_error_ns"] > -2000).all() and (matches["begin_error_ns"] > -2000).all()
    assert "17 of 17 launches matched" in alignment.describe()


def test_alignment_needs_no_clock_pairs(kineto, spans):
    table, info = spans
    with_pairs = align_launches(table, kineto.kernels, host_offset_ns(info))
    without = align_launches(table, kineto.kernels, None)
    assert without.matches["event"].tolist() == with_pairs.matches["event"].tolist()
    assert without.offset_ns == with_pairs.offset_ns


def test_launches_outside_the_profilers_window_stay_unmatched(kineto, spans):
    table, info = spans
    kernels = kineto.kernels
    first_busy = kernels.index[kernels["name"] == "busy_kernel"][:4]
    partial = kernels.drop(first_busy)  # the profiler started after the first four
    alignment = align_launches(table, partial, host_offset_ns(info))
    assert alignment.unmatched == [1, 2, 3, 4]
    full = align_launches(table, kernels, host_offset_ns(info))
    kept = full.matches[~full.matches["launch"].isin([1, 2, 3, 4])]
    assert alignment.matches["event"].tolist() == kept["event"].tolist()


def test_a_session_of_other_kernels_matches_nothing(kineto, spans):
    table, info = spans
    renamed = table.assign(kernel="some_other_kernel")
    alignment = align_launches(renamed, kineto.kernels, host_offset_ns(info))
    assert alignment.offset_ns is None and alignment.unmatched == list(range(17))
    assert "nothing to align on" in alignment.describe()


def _balanced_per_track(packets) -> dict[int, int]:
    """Slices per track, checking that every begin has its end, in time order."""
    depth: dict[int, list[int]] = defaultdict(list)
    count: Counter[int] = Counter()
    for packet in packets:
        if not packet.HasField("track_event") or packet.trusted_packet_sequence_id < 2**20:
            continue
        event = packet.track_event
        if event.type == event.TYPE_SLICE_BEGIN:
            depth[event.track_uuid].append(packet.timestamp)
            count[event.track_uuid] += 1
        elif event.type == event.TYPE_SLICE_END:
            assert depth[event.track_uuid], "an end with no begin"
            assert packet.timestamp >= depth[event.track_uuid].pop()
    assert not any(depth.values())
    return count


def test_the_merged_trace_holds_both_with_flows_and_the_match_in_the_kernels_args(tmp_path, kineto):
    output, (alignment,) = merge_torch_trace([SESSION], kineto, tmp_path / "one.pftrace")
    packets = read_packets(output)
    descriptors = [p.track_descriptor for p in packets if p.HasField("track_descriptor")]
    uuids = Counter(d.uuid for d in descriptors)
    assert max(uuids.values()) == 1
    assert all(d.parent_uuid in uuids for d in descriptors if d.HasField("parent_uuid"))
    roots = [d.name for d in descriptors if not d.HasField("parent_uuid")]
    assert len(roots) == 2 and roots[1].startswith("torch.profiler")
    assert {d.name for d in descriptors} >= {"stream 7", "stream 13", "GPU 0 (python3)"}
    torch_events = [p for p in packets if p.HasField("track_event") and p.trusted_packet_sequence_id > 2**20]
    declared = {d.uuid for d in descriptors}
    assert all(p.track_event.track_uuid in declared for p in torch_events)
    per_track = _balanced_per_track(packets)
    drawn = sum(1 for e in kineto.events if e.get("ph") == "X")
    assert sum(per_track.values()) == drawn
    # A flow from each launch call to its kernel: every flow id begun once and ended once.
    begun = Counter(f for p in torch_events for f in p.track_event.flow_ids)
    ended = Counter(f for p in torch_events for f in p.track_event.terminating_flow_ids)
    assert set(begun) >= set(ended) and max(begun.values()) == 1 and max(ended.values()) == 1
    assert len(ended) >= len(kineto.kernels)
    matched = [
        p for p in torch_events if any(a.name == "proton_ik launch" for a in p.track_event.debug_annotations)
    ]
    assert len(matched) == len(alignment.matches) == 17


def test_the_session_is_drawn_on_the_profilers_clock(tmp_path, kineto, clock_anchors):
    output, (alignment,) = merge_torch_trace([SESSION], kineto, tmp_path / "one.pftrace")
    alone = proton_ik.merge([SESSION], tmp_path / "alone.pftrace")
    shift = alignment.offset_ns - (host_offset_ns(read_info()) or 0)
    # The same anchors of the session's incremental clocks, moved by the alignment's offset less
    # the clock pairs' offset that the plain merge applies.
    mine = clock_anchors(output)
    plain = clock_anchors(alone)
    assert mine == [t + shift for t in plain]


def read_info() -> dict:
    return launch_spans(SESSION)[1]


def test_the_command_line_merges_and_says_how_well_it_aligned(tmp_path, capsys):
    output = tmp_path / "with_torch.pftrace"
    assert main(["merge", str(SESSION), "--torch-trace", str(TORCH_TRACE), "-o", str(output)]) == 0
    said = capsys.readouterr().out
    assert "1 session and torch_profiler_trace.json.gz on one time axis" in said
    assert "17 of 17 launches matched" in said and "us after CUPTI's begin" in said
    assert proton_ik.merge(SESSION, tmp_path / "api.pftrace", torch_trace=TORCH_TRACE).exists()


def test_the_merged_trace_converts_to_the_sessions_own_with_the_profilers_part_left_out(tmp_path, capsys):
    """`proton-ik convert` of a trace merged with torch.profiler's: the session's launches and
    scopes, as converting its .pik gives them; the profiler's tracks are named as left out."""
    merged = proton_ik.merge(SESSION, tmp_path / "with_torch.pftrace", torch_trace=TORCH_TRACE)
    assert main(["convert", str(merged), "--to", "chrome", "-o", str(tmp_path / "merged.json")]) == 0
    warned = capsys.readouterr().err
    assert re.search(r"proton-ik convert: warning: .*not proton_ik's .*torch.profiler's.* left out", warned)
    assert main(["convert", str(SESSION), "--to", "chrome", "-o", str(tmp_path / "session.json")]) == 0
    capsys.readouterr()
    merged_summary = proton_ik.viewer.readback.read_chrome(tmp_path / "merged.json").summary().scopes
    session_summary = proton_ik.viewer.load(SESSION).summary().scopes
    key = ["kernel", "scope"]
    got = merged_summary.set_index(key).sort_index()["count"]
    assert got.to_dict() == session_summary.set_index(key).sort_index()["count"].to_dict()


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"", "not JSON"),
        (b"\x00\x01garbage", "not JSON"),
        (b'{"schemaVersion": 1}', "no traceEvents list"),
        (b'{"traceEvents": [], "baseTimeNanoseconds": "soon"}', "baseTimeNanoseconds"),
        (gzip.compress(b"[1, 2]"), "no traceEvents list"),
    ],
)
def test_a_file_that_is_no_torch_trace_gets_a_clear_message(tmp_path, capsys, content, said):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    with pytest.raises(TorchTraceError, match=said):
        read_kineto(bad)
    output = tmp_path / "out.pftrace"
    assert main(["merge", str(SESSION), "--torch-trace", str(bad), "-o", str(output)]) == 2
    assert said in capsys.readouterr().err and not output.exists()


def test_hostile_events_are_skipped_not_fatal(tmp_path, kineto):
    document = json.loads(gzip.decompress(TORCH_TRACE.read_bytes()))
    document["traceEvents"] += [
        {"ph": "X", "cat": "kernel", "name": "busy_kernel", "ts": "later", "dur": 1, "args": {}},
        {"ph": "X", "cat": "kernel", "name": "busy_kernel", "ts": 1.0, "dur": -5, "args": {}},
        {"ph": "X", "cat": "cpu_op", "name": "x", "ts": float("nan"), "dur": 1},
        "not an event",
        {"ph": "X", "cat": "cpu_op", "name": "big", "ts": 1.0, "dur": 1.0, "args": {"n": 2**70}},
    ]
    hostile = tmp_path / "hostile.json"
    hostile.write_text(json.dumps(document))
    trace = read_kineto(hostile)
    assert len(trace.kernels) == len(kineto.kernels)
    _, (alignment,) = merge_torch_trace([SESSION], trace, tmp_path / "h.pftrace")
    assert len(alignment.matches) == 17


def test_two_launches_that_want_one_kernel_get_one_each():
    """Two streams start a kernel of one name within nanoseconds: the nearer launch takes the
    kernel both lie nearest, and the other the next one, rather than staying unmatched."""
    import pandas as pd

    others = [(i, "other", 0, 7, 100_000 * (i + 1), 100_000 * (i + 1) + 5_000) for i in range(5)]
    spans = pd.DataFrame(
        [*others, (5, "busy", 0, 0, 10_000, 90_000), (6, "busy", 0, 1, 10_005, 90_005)],
        columns=["launch", "kernel", "device", "stream", "start_ns", "end_ns"],
    )
    kernels = pd.DataFrame(
        [
            *[("other", 0, 7, s, e + 300, i, i) for i, _, _, _, s, e in others],
            ("busy", 0, 13, 9_700, 90_500, 20, 20),  # the one both lie further from
            ("busy", 0, 7, 10_010, 90_400, 21, 21),  # the one both lie nearest
        ],
        columns=["name", "device", "stream", "begin_ns", "end_ns", "correlation", "event"],
    )
    alignment = align_launches(spans, kernels, prior_ns=None)
    assert alignment.unmatched == []
    busy = alignment.matches.set_index("launch").loc[[5, 6], "event"].to_dict()
    assert busy == {6: 21, 5: 20}  # launch 6 lies nearer kernel 21 (5 ns against 10)


def test_launches_of_one_name_on_two_streams_at_once_keep_their_launch_order():
    """A default-stream launch and a side stream's, of one kernel, run together: each lies inside
    both CUPTI kernels, and the launch made first starts nearest the later kernel's begin. The
    matching follows launch order (CUPTI's correlation ids), so each stream maps to its own."""
    import pandas as pd

    others = [(i, "other", 0, 0, 100_000 * (i + 1), 100_000 * (i + 1) + 5_000) for i in range(5)]
    spans = pd.DataFrame(
        [*others, (5, "busy", 0, 0, 520, 9_699_000), (6, "busy", 0, 1, 900, 9_700_000)],
        columns=["launch", "kernel", "device", "stream", "start_ns", "end_ns"],
    )
    kernels = pd.DataFrame(
        [
            *[("other", 0, 7, s, e + 300, i, i) for i, _, _, _, s, e in others],
            ("busy", 0, 7, 0, 9_700_000, 20, 20),  # launch 5's, made first
            ("busy", 0, 82, 500, 9_700_600, 21, 21),  # launch 6's, on the side stream
        ],
        columns=["name", "device", "stream", "begin_ns", "end_ns", "correlation", "event"],
    )
    alignment = align_launches(spans, kernels, prior_ns=None)
    assert alignment.unmatched == []
    assert alignment.matches.set_index("launch").loc[[5, 6], "event"].to_dict() == {5: 20, 6: 21}
    assert alignment.streams == {0: 7, 1: 82}
    # Where CUPTI gave no correlation ids, the nearest begins stand (no order to follow).
    unordered = align_launches(spans, kernels.assign(correlation=-1), prior_ns=None)
    assert unordered.matches.set_index("launch").loc[[5, 6], "event"].to_dict() == {5: 21, 6: 20}
