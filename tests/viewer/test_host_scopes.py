"""Host scopes and launch names (``proton_ik.scope``, ``launch_metadata``): tables, summary, Perfetto."""

from collections import defaultdict

import numpy as np
import pandas as pd
import pytest

from proton_ik.contract.layout import UNIT_HEADER_DTYPE, BufferLayout
from proton_ik.runtime.session_writer import SessionWriter
from proton_ik.viewer import LaunchCapture, Trace, load, render_session
from proton_ik.viewer.perfetto import INCREMENTAL_CLOCK_ID
from proton_ik.viewer.readback import read_packets
from proton_ik.viewer.tracks import HOST_TRACK, LIFETIME

# Launch by launch: host scopes open (outermost first) and the launch_metadata name (None: none).
PLAN = [
    (["train", "fwd"], "add_256"),
    (["train", "fwd"], "add_512"),
    (["train", "bwd"], "add_256"),
    (["train"], None),
    ([], None),
    (["eval"], "add_512"),
]


def later(capture: LaunchCapture, ns: int) -> LaunchCapture:
    """The launch run ``ns`` later: every unit's %globaltimer readings moved."""
    layout = BufferLayout.from_dict(capture.meta["profile"]["layout"])
    buffer = capture.buffer.copy()
    for cta in range(len(buffer) // layout.cta_bytes):
        for unit in range(layout.units):
            header = np.ndarray(
                (), UNIT_HEADER_DTYPE, buffer, cta * layout.cta_bytes + layout.unit_offset(unit)
            )
            header["start_time"] += ns
            header["end_time"] += ns
    return LaunchCapture(capture.meta, buffer)


def captures(busy_launch) -> list[LaunchCapture]:
    """Launches one after another (1 ms apart), as on one stream."""
    result = []
    for number, (host, name) in enumerate(PLAN):
        capture = later(busy_launch(launch=number, num_ctas=2, iterations=2), number * 1_000_000)
        meta = {**capture.meta, "kernel": "add_kernel", "host_scope": host}
        if name is not None:
            meta |= {"name": name, "launch_metrics": {"flops": 1024.0 * number, "bytes": 8}}
        result.append(LaunchCapture(meta, capture.buffer))
    return result


def write_host_scoped(path, busy_launch):
    """The session of ``PLAN``, written to ``path``."""
    with SessionWriter(path, {"name": "h", "time_shift_cycles": 0}) as writer:
        for capture in captures(busy_launch):
            writer.add_launch(capture.meta, capture.buffer)
    return path


@pytest.fixture
def session(tmp_path, busy_launch):
    return write_host_scoped(tmp_path / "h.pik", busy_launch)


def test_events_and_launches_carry_the_host_scope_path_and_the_name(session):
    trace = load(session)
    by_launch = {
        launch: set(scopes.astype(str)) for launch, scopes in trace.events.groupby("launch")["host_scope"]
    }
    assert by_launch == {i: {"/".join(host)} for i, (host, _) in enumerate(PLAN)}
    launches = trace.launches.set_index("launch")
    assert launches["host_scope"].tolist() == ["/".join(host) for host, _ in PLAN]
    assert launches["name"].tolist() == [name or "add_kernel" for _, name in PLAN]
    assert launches.loc[1, "launch_metrics"] == {"flops": 1024.0, "bytes": 8}
    assert launches.loc[3, "launch_metrics"] is None


def test_summary_groups_scopes_by_host_scope_then_launch_name(session):
    trace = load(session)
    summary = trace.summary()
    kernels = summary.kernels.set_index(["host_scope", "kernel"])["launches"]
    assert kernels.to_dict() == {
        ("", "add_kernel"): 1,
        ("eval", "add_kernel"): 1,
        ("train", "add_kernel"): 1,
        ("train/bwd", "add_kernel"): 1,
        ("train/fwd", "add_kernel"): 2,
    }
    fwd = summary.scopes[summary.scopes["host_scope"] == "train/fwd"]
    counts = fwd.set_index(["name", "scope"])["count"]
    per_launch = trace.events[trace.events["launch"] == 0].groupby("scope", observed=True).size()
    assert counts.loc[("add_256", "c")] == per_launch["c"]
    assert counts.loc[("add_512", "c")] == trace.events.query("launch == 1 and scope == 'c'").shape[0]
    # The share's denominator is the lifetime of the launches of that name under that host scope.
    lifetime = trace.units.query("launch == 0 and finished")["dur_ns"].sum()
    total = trace.events.query("launch == 0 and scope == 'a'")["dur_ns"].sum()
    row = fwd.set_index(["name", "scope"]).loc[("add_256", "a")]
    assert row["share"] == pytest.approx(total / lifetime)

    text = str(summary)
    lines = text.splitlines()
    assert lines[0] == "outside host scopes:"
    for host in ("eval", "train", "train/bwd", "train/fwd"):
        assert f"host scope {host}:" in lines
    assert "  add_kernel: 2 launch(es)" in text
    start = lines.index("host scope train/fwd:")
    header = next(line for line in lines[start:] if {"scope", "line", "count"} <= set(line.split()))
    assert header.split()[:2] == ["name", "scope"]
    assert any(line.split()[:2] == ["add_512", "a"] for line in lines[start:])


def test_a_summary_without_host_scopes_or_names_is_unchanged(busy_launch):
    trace = Trace.from_captures({"name": "s"}, [busy_launch(launch=0), busy_launch(launch=2)])
    text = trace.summary_text()
    assert text.startswith("kernel0: 2 launch(es)")
    assert "host scope" not in text
    header = next(line for line in text.splitlines() if {"scope", "line", "count"} <= set(line.split()))
    assert header.split()[0] == "scope"


def host_slices(path) -> list[tuple[str, int, int, int, dict]]:
    """The host track's slices: (name, depth, begin, end, args), replayed from its packets."""
    packets = read_packets(path)
    host = next(p.track_descriptor for p in packets if p.track_descriptor.name == HOST_TRACK)
    assert host.parent_uuid == 1
    names: dict[int, dict[int, str]] = defaultdict(dict)
    keys: dict[int, str] = {}
    slices, stack, now, on_host = [], [], 0, False
    for p in packets:
        sequence = p.trusted_packet_sequence_id
        names[sequence].update({e.iid: e.name for e in p.interned_data.event_names})
        keys.update({e.iid: e.name for e in p.interned_data.debug_annotation_names})
        if p.HasField("trace_packet_defaults"):
            on_host = p.trace_packet_defaults.track_event_defaults.track_uuid == host.uuid
            now = next(c.timestamp for c in p.clock_snapshot.clocks if c.clock_id == INCREMENTAL_CLOCK_ID)
        if not (p.HasField("track_event") and on_host):
            continue
        now += p.timestamp
        event = p.track_event
        if event.name_iid:
            args = {keys[a.name_iid]: a.int_value for a in event.debug_annotations}
            stack.append((names[sequence][event.name_iid], len(stack), now, args))
        else:
            name, depth, begin, args = stack.pop()
            slices.append((name, depth, begin, now, args))
    assert not stack
    return sorted(slices, key=lambda s: (s[2], s[1]))


def test_the_host_track_spans_each_scope_instance_over_its_launches(session, tmp_path):
    trace = load(session)
    render_session(session, {"pftrace": tmp_path / "h.pftrace"})
    lives = trace.units[trace.units["finished"]]
    begin = pd.concat(
        [trace.events.groupby("launch")["begin_ns"].min(), lives.groupby("launch")["start_ns"].min()]
    )
    end = pd.concat([trace.events.groupby("launch")["end_ns"].max(), lives.groupby("launch")["end_ns"].max()])
    begin, end = begin.groupby(level=0).min(), end.groupby(level=0).max()

    def span(first: int, last: int) -> tuple[int, int]:
        return int(begin.loc[first:last].min()), int(end.loc[first:last].max())

    # Instances: runs of consecutive launches under the same scope; launch 4 had none.
    expected = [
        ("train", 0, *span(0, 3), {"launches": 4, "first_launch": 0, "last_launch": 3}),
        ("fwd", 1, *span(0, 1), {"launches": 2, "first_launch": 0, "last_launch": 1}),
        ("bwd", 1, *span(2, 2), {"launches": 1, "first_launch": 2, "last_launch": 2}),
        ("eval", 0, *span(5, 5), {"launches": 1, "first_launch": 5, "last_launch": 5}),
    ]
    assert host_slices(tmp_path / "h.pftrace") == sorted(expected, key=lambda s: (s[2], s[1]))


def test_launch_slices_are_named_after_their_launch(session, tmp_path):
    render_session(session, {"pftrace": tmp_path / "h.pftrace"})
    packets = read_packets(tmp_path / "h.pftrace")
    launch_tracks = {
        p.track_descriptor.uuid: p.track_descriptor.name
        for p in packets
        if p.track_descriptor.parent_uuid == 1 and p.track_descriptor.name.startswith("launch ")
    }
    names, track, named = {}, 0, {}
    for p in packets:
        names.update({e.iid: e.name for e in p.interned_data.event_names})
        if p.HasField("trace_packet_defaults"):
            track = p.trace_packet_defaults.track_event_defaults.track_uuid
        if p.HasField("track_event") and track in launch_tracks and p.track_event.name_iid:
            named[launch_tracks[track]] = names[p.track_event.name_iid]
    assert named == {f"launch {i}: add_kernel": name or LIFETIME for i, (_, name) in enumerate(PLAN)}


@pytest.mark.parametrize("fmt", ["pftrace", "json"])
def test_show_reads_back_a_trace_with_host_scopes(session, tmp_path, fmt):
    from proton_ik.viewer.readback import read_chrome, read_perfetto

    out = tmp_path / f"h.{fmt}"
    render_session(session, {fmt: out})
    again = (read_perfetto if fmt == "pftrace" else read_chrome)(out)
    expected = load(session)
    assert len(again.trace.events) == len(expected.events)
    # One kernel under several host scopes: the summary still adds up its losses per kernel.
    assert "add_kernel" in again.summary_text()
