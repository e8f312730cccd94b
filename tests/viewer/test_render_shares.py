"""A large launch drawn in shares of its SMs (``render.plan.share_out``, ``tables.SmShare``): on
a host with cores to spare, a part that is one large launch is cut into shares, each drawing
the SMs whose id is its share modulo the shares, under one launch track that share 0 describes.
The trace reads back as the one written whole, the same bytes on one process or several; a
launch whose clusters cross SMs is drawn whole by share 0."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from proton_ik.runtime.session_writer import SessionWriter
from proton_ik.viewer import render_session
from proton_ik.viewer.readback.perfetto import read_perfetto
from proton_ik.viewer.render import plan as render_plan
from proton_ik.viewer.render import session as render_session_module
from proton_ik.viewer.render.plan import PartPlan, share_out
from proton_ik.viewer.tables import SmShare

from .conftest import read_packets
from .test_async_events import CLOCK0, FREE, PHASE, TABLE, TILE, TMA, Cta, event, mark
from .test_clusters import cluster_launch

MIB = 1 << 20


def test_one_large_launch_in_its_part_is_cut_into_shares_where_cores_are_spare():
    sizes = [16 * MIB, 16 * MIB, MIB, MIB]
    parts = [(0, 1), (1, 2), (2, 4)]
    plan = share_out(parts, sizes, cores=32)
    assert plan[:8] == [PartPlan(0, 1, share, 8) for share in range(8)]  # 32 // 3 cores a part, 16 MiB
    assert plan[8:16] == [PartPlan(1, 2, share, 8) for share in range(8)]
    assert plan[16:] == [PartPlan(2, 4)]  # two launches: a part as cut
    assert share_out(parts, sizes, cores=6) == [
        PartPlan(0, 1, 0, 2),
        PartPlan(0, 1, 1, 2),
        PartPlan(1, 2, 0, 2),
        PartPlan(1, 2, 1, 2),
        PartPlan(2, 4),
    ]
    # Below the cores that render in workers, a share would only add its decoding.
    assert share_out(parts, sizes, cores=3) == [PartPlan(*part) for part in parts]
    assert share_out([(0, 1)], [11 * MIB], cores=32) == [PartPlan(0, 1)]  # renders sooner alone
    assert share_out([], [], cores=32) == []
    # more parts than cores: none to spare
    assert share_out([(0, 1)] * 5, [16 * MIB] * 5, cores=4) == [PartPlan(0, 1)] * 5


def _shared(monkeypatch) -> None:
    """Every launch a part of its own, cut into as many shares as 16 cores allow."""
    monkeypatch.setattr(render_plan, "PART_BYTES", 1)
    monkeypatch.setattr(render_plan, "SHARE_BYTES", 1)
    monkeypatch.setattr(render_plan, "SHARED_LAUNCH_BYTES", 1)
    monkeypatch.setattr(render_session_module, "default_workers", lambda: 16)


def _tables(path):
    trace = read_perfetto(path).trace
    events = trace.events[["launch", "kernel", "scope", "cta", "sm", "warp", "dur_cycles", "dur_ns", "line"]]
    launches = trace.launches.drop(columns=[c for c in ("problems", "config") if c in trace.launches])
    units = trace.units[["launch", "cta", "sm", "warp", "start_ns", "end_ns"]]
    return [
        table.astype(str).sort_values(list(table.columns)).reset_index(drop=True)
        for table in (events, launches, units)
    ]


def _sm_tracks(path) -> Counter:
    """How many tracks each (launch track, name) has: a launch's SM drawn twice would show."""
    packets = read_packets(path)
    named = {
        p.track_descriptor.uuid: p.track_descriptor.name for p in packets if p.HasField("track_descriptor")
    }
    return Counter(
        (named.get(p.track_descriptor.parent_uuid), p.track_descriptor.name)
        for p in packets
        if p.HasField("track_descriptor") and p.track_descriptor.name.startswith("SM ")
    )


def _compare(path, tmp_path, monkeypatch):
    whole = tmp_path / "whole.pftrace"
    expected = render_session(path, {"pftrace": whole}, workers=1)
    _shared(monkeypatch)
    here, spread = tmp_path / "here.pftrace", tmp_path / "spread.pftrace"
    stats = render_session(path, {"pftrace": here}, workers=1)
    render_session(path, {"pftrace": spread}, workers=3)
    assert here.read_bytes() == spread.read_bytes()
    assert (stats.launches, stats.records, stats.events) == (
        expected.launches,
        expected.records,
        expected.events,
    )
    for got, want in zip(_tables(here), _tables(whole), strict=True):
        pd.testing.assert_frame_equal(got, want)
    assert _sm_tracks(here) == _sm_tracks(whole)
    return here, whole


def test_shares_draw_each_sm_once_under_one_launch_track(tmp_path, monkeypatch, busy_launch):
    path = tmp_path / "s.pik"
    with SessionWriter(path, {"name": "s", "time_shift_cycles": 0}) as writer:
        for launch in range(3):
            capture = busy_launch(num_ctas=48, units=4, iterations=4, sms=12, launch=launch)
            writer.add_launch(capture.meta, capture.buffer)
    here, _ = _compare(path, tmp_path, monkeypatch)
    tracks = _sm_tracks(here)
    assert len(tracks) == 3 * 12 and set(tracks.values()) == {1}  # 12 SMs a launch, each drawn once


def test_a_clustered_launch_is_drawn_whole_by_its_first_share(tmp_path, monkeypatch, fake_launch):
    path = tmp_path / "c.pik"
    with SessionWriter(path, {"name": "c", "time_shift_cycles": 0}) as writer:
        capture = cluster_launch(fake_launch).capture(launch=0)
        writer.add_launch(capture.meta, capture.buffer)
    here, whole = _compare(path, tmp_path, monkeypatch)

    def cluster_tracks(trace):
        return sorted(
            p.track_descriptor.parent_uuid
            for p in read_packets(trace)
            if p.track_descriptor.name == "clusters"
        )

    assert len(cluster_tracks(here)) == len(cluster_tracks(whole)) > 0
    assert len(set(cluster_tracks(here))) == 1  # under the one launch track


def test_events_marks_and_values_go_with_their_sm(tmp_path, monkeypatch, fake_launch):
    """Events pair within a CTA, and marks and values are a warp's: each share draws its SMs'."""
    launch = fake_launch(units=3, capacity=64, num_ctas=4)
    for number in range(4):  # a CTA on each of four SMs: a producer warp, two consumers
        cta = Cta(launch, number, sm=number)
        event(cta.units[2], TMA, False, CLOCK0 + 1000)
        for w in range(2):
            event(cta.units[w], TMA, True, CLOCK0 + 1200 + 100 * w)
            mark(cta.units[w], PHASE, CLOCK0 + 1500, value=number)
        mark(cta.units[2], TILE, CLOCK0 + 1600)
        event(cta.units[2], FREE, True, CLOCK0 + 3000)
        cta.finish()
    capture = launch.capture()
    capture.meta["profile"]["scopes"] = TABLE
    path = tmp_path / "e.pik"
    with SessionWriter(path, {"name": "e", "time_shift_cycles": 0}) as writer:
        writer.add_launch(capture.meta, capture.buffer)
    here, whole = _compare(path, tmp_path, monkeypatch)
    shared, expected = read_perfetto(here).trace, read_perfetto(whole).trace
    for table in ("async_events", "marks", "values"):
        got, want = getattr(shared, table), getattr(expected, table)
        columns = [c for c in want.columns if c not in ("sm", "cluster", "cluster_rank")]
        assert len(want) > 0
        pd.testing.assert_frame_equal(
            got[columns].astype(str).sort_values(columns).reset_index(drop=True),
            want[columns].astype(str).sort_values(columns).reset_index(drop=True),
        )

    def flow_sequences(trace):
        return {
            p.trusted_packet_sequence_id
            for p in read_packets(trace)
            if p.HasField("track_event") and (p.track_event.flow_ids or p.track_event.terminating_flow_ids)
        }

    sharing = {share for share in range(16) for sm in range(4) if SmShare(share, 16).holds(np.array([sm]))[0]}
    assert len(flow_sequences(whole)) == 1 and len(flow_sequences(here)) == len(sharing) > 1


@pytest.mark.parametrize("cores", [1, 2, 3])
def test_few_cores_draw_no_shares(cores):
    assert share_out([(0, 1)], [64 * MIB], cores) == [PartPlan(0, 1)]


@settings(max_examples=300, deadline=None)
@example(sizes=[1, 1, 1, 12 * MIB, 0], part_bytes=1, cores=4)  # more parts than cores
@given(
    sizes=st.lists(st.integers(0, 64 * MIB), max_size=40),
    part_bytes=st.integers(1, 32 * MIB),
    cores=st.integers(1, 64),
)
def test_every_launch_is_drawn_by_exactly_one_part_or_all_shares_of_one(sizes, part_bytes, cores):
    parts = render_plan.plan_parts(sizes, part_bytes)
    plan = share_out(parts, sizes, cores)
    assert len(plan) < render_plan.MAX_PARTS
    drawn = [launch for part in plan if part.share == 0 for launch in range(part.first, part.past)]
    assert drawn == list(range(len(sizes)))  # in order, each once by its part or its share 0
    for part in plan:
        assert 0 <= part.share < part.shares
        if part.shares > 1:
            assert part.past == part.first + 1 and sizes[part.first] >= render_plan.SHARED_LAUNCH_BYTES
            assert [p.share for p in plan if p.first == part.first] == list(range(part.shares))
    if cores < 4:
        assert all(part.shares == 1 for part in plan)


@pytest.mark.parametrize("shares", [1, 2, 3, 6, 16])
def test_each_sm_is_in_one_share_and_share_0_has_half_as_many(shares):
    sms = np.arange(132 * (2 * shares - 1))  # whole rounds of the classes
    held = np.array([SmShare(share, shares).holds(sms) for share in range(shares)])
    assert (held.sum(axis=0) == 1).all()
    counts = held.sum(axis=1)
    assert counts[0] * 2 == counts[1:].min() == counts[1:].max() if shares > 1 else counts[0] == len(sms)
