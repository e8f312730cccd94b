"""Thread-block clusters: the CTA header's cluster fields decoded, carried into the tables and the
traces' args, summed up per cluster (``viewer.tables.clusters``), drawn as a clusters track, and left
at -1 where they were not recorded (older files, targets before sm_90)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from proton_ik.runtime.session_writer import SessionWriter
from proton_ik.viewer import Trace, cluster_table, load, render_session
from proton_ik.viewer.decode import decode_buffer
from proton_ik.viewer.readback import read_chrome, read_perfetto
from proton_ik.viewer.tables.clusters import CLUSTER_COLUMNS
from proton_ik.viewer.tracks import CLUSTER_TRACK

DATA = Path(__file__).parents[1] / "data"
T0 = 1_700_000_000_000_000_000
CLUSTER = 2  # CTAs per cluster
# CTA -> (first unit's start, last unit's end), cycles; one SM at 1 GHz with a 1 ns globaltimer,
# so nanoseconds equal cycles and every skew is exact.
CTA_TIMES = {0: (100, 5_000), 1: (130, 5_300), 2: (1_000, 9_000), 3: (1_010, 9_400), 4: (2_000, 3_000)}
UNITS = 2
UNIT_LAG = (0, 7)  # unit u starts this much after its CTA's first unit, and ends 3 * u before its last
SMS = {0: 5, 1: 9, 2: 5, 3: 11, 4: 2}


def cluster_launch(fake_launch, recorded: bool = True, cluster_ctas: int = CLUSTER):
    """Five CTAs in clusters of two ({0, 1}, {2, 3}, {4} alone, its partner never ran), each unit
    one pair; ``recorded=False``: the headers of a kernel for a target before sm_90 (zeros)."""
    fake = fake_launch(units=UNITS, capacity=16, num_ctas=6)
    for cta, (start, end) in CTA_TIMES.items():
        cluster = {"cluster": cta // CLUSTER, "cluster_rank": cta % CLUSTER, "cluster_ctas": cluster_ctas}
        fake.cta(cta, smid=SMS[cta], **(cluster if recorded else dict.fromkeys(cluster, 0)))
        for unit in range(UNITS):
            begin = start + UNIT_LAG[unit]
            recorder = fake.unit(cta, unit, begin, T0 + begin)
            recorder.pair(0, begin + 10, begin + 50)
            finish = end - 3 * unit
            recorder.finish(finish, T0 + finish)
    return fake


def test_the_decoder_reads_each_ctas_cluster_and_rank(fake_launch):
    fake = cluster_launch(fake_launch)
    decoded = decode_buffer(fake.buffer, fake.layout)
    ran = decoded.ctas.ran
    assert decoded.ctas.cluster[ran].tolist() == [0, 0, 1, 1, 2]
    assert decoded.ctas.cluster_rank[ran].tolist() == [0, 1, 0, 1, 0]
    assert decoded.ctas.cluster_ctas[ran].tolist() == [CLUSTER] * 5
    assert decoded.units.cluster.tolist() == np.repeat([0, 0, 1, 1, 2], UNITS).tolist()
    assert decoded.units.cluster_rank.tolist() == np.repeat([0, 1, 0, 1, 0], UNITS).tolist()


@pytest.mark.parametrize(
    "fields",
    [
        {
            "cluster": 0,
            "cluster_rank": 0,
            "cluster_ctas": 0,
        },  # before sm_90, or a file from before the fields
        {"cluster": 7, "cluster_rank": 2, "cluster_ctas": 2},  # a rank outside its cluster: not a header's
    ],
)
def test_a_cluster_not_recorded_reads_minus_one(fake_launch, fields):
    fake = fake_launch(units=1, capacity=16, num_ctas=1)
    fake.cta(0, smid=3, **fields)
    decoded = decode_buffer(fake.buffer, fake.layout)
    assert (decoded.ctas.cluster[0], decoded.ctas.cluster_rank[0], decoded.ctas.cluster_ctas[0]) == (
        -1,
        -1,
        -1,
    )
    assert decoded.ctas.valid[0]  # the rest of the header still counts


def test_the_tables_carry_each_rows_cluster(fake_launch):
    trace = Trace.from_captures({"name": "clusters"}, [cluster_launch(fake_launch).capture()])
    expected = {cta: (cta // CLUSTER, cta % CLUSTER) for cta in CTA_TIMES}
    for table in (trace.events, trace.units):
        assert {"cluster", "cluster_rank"} <= set(table.columns)
        for row in table.itertuples():
            assert (row.cluster, row.cluster_rank) == expected[row.cta]
            assert row.sm == SMS[row.cta]


def test_old_captures_decode_with_no_cluster():
    for name in ("add.pik", "events.pik"):
        trace = load(DATA / name)
        for table in (trace.events, trace.units, trace.async_events, trace.marks):
            if len(table):
                assert (table["cluster"] == -1).all() and (table["cluster_rank"] == -1).all(), name
        assert trace.clusters.empty and list(trace.clusters.columns) == CLUSTER_COLUMNS
        assert "clusters:" not in trace.summary_text()


def expected_clusters() -> pd.DataFrame:
    """Per cluster, from the script: a CTA starts with its first unit and ends with its last."""
    ctas = pd.DataFrame(
        [
            {
                "cluster": cta // CLUSTER,
                "rank": cta % CLUSTER,
                "cta": cta,
                "sm": SMS[cta],
                "start": T0 + start,
                "end": T0 + end,  # unit 0 ends last (unit u ends 3 * u before)
            }
            for cta, (start, end) in CTA_TIMES.items()
        ]
    ).sort_values(["cluster", "rank"])
    grouped = ctas.groupby("cluster")
    return pd.DataFrame(
        {
            "size": grouped.size(),
            "ctas": grouped["cta"].agg(tuple),
            "sms": grouped["sm"].agg(tuple),
            "start_ns": grouped["start"].min(),
            "end_ns": grouped["end"].max(),
            "start_skew_ns": grouped["start"].max() - grouped["start"].min(),
            "end_skew_ns": grouped["end"].max() - grouped["end"].min(),
        }
    )


def test_each_clusters_ctas_sms_and_skews(fake_launch):
    trace = Trace.from_captures({"name": "clusters"}, [cluster_launch(fake_launch).capture(launch=4)])
    clusters = trace.clusters
    assert list(clusters.columns) == CLUSTER_COLUMNS
    assert clusters["launch"].tolist() == [4, 4, 4] and clusters["cluster"].tolist() == [0, 1, 2]
    expected = expected_clusters()
    for column in expected.columns:
        assert clusters[column].tolist() == expected[column].tolist(), column
    # Clusters {0, 1}: started 30 ns apart, ended 300 ns apart; {2, 3}: 10 ns and 400 ns.
    assert clusters["start_skew_ns"].tolist()[:2] == [30, 10]
    assert clusters["end_skew_ns"].tolist()[:2] == [300, 400]
    assert cluster_table(trace.units).equals(clusters)


def test_a_cta_with_no_finished_unit_has_no_end(fake_launch):
    fake = cluster_launch(fake_launch)
    # CTA 3's units never reach their exit: the cluster's end is CTA 2's alone.
    for unit in range(UNITS):
        fake.unit(3, unit, 1_010, T0 + 1_010).header["end_magic"] = 0
    clusters = Trace.from_captures({"name": "clusters"}, [fake.capture()]).clusters.set_index("cluster")
    assert clusters.loc[1, "end_ns"] == T0 + 9_000 and clusters.loc[1, "end_skew_ns"] == 0
    assert clusters.loc[1, "ctas"] == (2, 3)


def test_show_names_the_worst_skews_only_where_clusters_hold_several_ctas(fake_launch):
    text = Trace.from_captures({"name": "c"}, [cluster_launch(fake_launch).capture(launch=4)]).summary_text()
    assert "clusters:" in text
    assert (
        "launch 4 (kernel): 3 clusters of up to 2 CTAs; start skew up to 30 ns (cluster 0: CTAs 0, 1 "
        "on SMs 5, 9), end skew up to 400 ns"
    ) in text
    alone = Trace.from_captures({"name": "c"}, [cluster_launch(fake_launch, cluster_ctas=1).capture()])
    # Clusters of one CTA each (as a kernel launched without clusters records them): no section.
    single = fake_launch(units=1, capacity=16, num_ctas=2)
    for cta in range(2):
        single.cta(cta, smid=cta, cluster=cta, cluster_rank=0, cluster_ctas=1)
        single.unit(cta, 0, 100, T0 + 100).finish(200, T0 + 200)
    trace = Trace.from_captures({"name": "c"}, [single.capture()])
    assert trace.clusters["size"].tolist() == [1, 1] and "clusters:" not in trace.summary_text()
    assert len(alone.clusters)


def test_trace_args_carry_the_cluster_and_read_back(tmp_path, fake_launch):
    trace = Trace.from_captures({"name": "clusters"}, [cluster_launch(fake_launch).capture()])
    trace.write_chrome(tmp_path / "t.json")
    trace.write_perfetto(tmp_path / "t.pftrace")
    for back in (
        read_chrome(tmp_path / "t.json", for_writing=True),
        read_perfetto(tmp_path / "t.pftrace", for_writing=True),
    ):
        for table in (back.trace.events, back.trace.units):
            assert (table["cluster"] == table["cta"] // CLUSTER).all()
            assert (table["cluster_rank"] == table["cta"] % CLUSTER).all()
        # The perfetto reader skips the clusters track: no cluster slice comes back as an event.
        assert back.trace.async_events.empty and len(back.trace.events) == len(trace.events)
    unrecorded = Trace.from_captures({"name": "old"}, [cluster_launch(fake_launch, recorded=False).capture()])
    unrecorded.write_chrome(tmp_path / "old.json")
    assert '"cluster"' not in (tmp_path / "old.json").read_text()
    back = read_chrome(tmp_path / "old.json", for_writing=True).trace
    assert back.events["cluster"].isna().all()


def cluster_slices(packets) -> tuple[dict[int, object], list]:
    tracks = {
        p.track_descriptor.uuid: p.track_descriptor
        for p in packets
        if p.HasField("track_descriptor") and p.track_descriptor.name == CLUSTER_TRACK
    }
    events = [p for p in packets if p.HasField("track_event") and p.track_event.track_uuid in tracks]
    return tracks, events


def test_the_perfetto_trace_draws_a_slice_per_cluster_under_its_launch(
    tmp_path, fake_launch, pftrace_packets
):
    trace = Trace.from_captures({"name": "clusters"}, [cluster_launch(fake_launch).capture(launch=4)])
    packets = pftrace_packets(trace.write_perfetto(tmp_path / "t.pftrace"))
    tracks, events = cluster_slices(packets)
    launch_tracks = {
        p.track_descriptor.uuid for p in packets if p.track_descriptor.name.startswith("launch 4:")
    }
    assert tracks and {t.parent_uuid for t in tracks.values()} == launch_tracks
    assert all(t.sibling_order_rank < 0 for t in tracks.values())  # above the launch's SM tracks
    begins = {p.track_event.name: p for p in events if p.track_event.type == p.track_event.TYPE_SLICE_BEGIN}
    ends = [p.timestamp for p in events if p.track_event.type == p.track_event.TYPE_SLICE_END]
    expected = expected_clusters()
    assert sorted(begins) == [f"cluster {c}" for c in expected.index]
    for cluster, row in expected.iterrows():
        begin = begins[f"cluster {cluster}"]
        args = {a.name: a for a in begin.track_event.debug_annotations}
        assert begin.timestamp == row["start_ns"] and row["end_ns"] in ends
        assert [a.int_value for a in args["ctas"].array_values] == list(row["ctas"])
        assert [a.int_value for a in args["sms"].array_values] == list(row["sms"])
        assert (args["start_skew_ns"].int_value, args["end_skew_ns"].int_value) == (
            row["start_skew_ns"],
            row["end_skew_ns"],
        )
    # The three clusters all run at 2 us: three tracks of one name, which the UI merges.
    assert len(tracks) == 3


def test_no_clusters_track_where_every_cluster_is_one_cta(tmp_path, fake_launch, pftrace_packets):
    fake = fake_launch(units=1, capacity=16, num_ctas=2)
    for cta in range(2):
        fake.cta(cta, smid=cta, cluster=cta, cluster_rank=0, cluster_ctas=1)
        fake.unit(cta, 0, 100, T0 + 100).finish(200, T0 + 200)
    trace = Trace.from_captures({"name": "c"}, [fake.capture()])
    assert cluster_slices(pftrace_packets(trace.write_perfetto(tmp_path / "t.pftrace"))) == ({}, [])


def test_a_launch_in_pieces_draws_each_cluster_once_as_a_whole(
    tmp_path, fake_launch, monkeypatch, pftrace_packets
):
    """Rendered CTA by CTA, a cluster's CTAs come in different chunks: its slice is the same."""
    session = tmp_path / "s.pik"
    with SessionWriter(session, {"name": "s", "time_shift_cycles": 0}) as writer:
        for launch in (0, 1):
            capture = cluster_launch(fake_launch).capture(launch=launch)
            writer.add_launch(capture.meta, capture.buffer)

    def drawn(path: Path) -> list[tuple]:
        tracks, events = cluster_slices(pftrace_packets(path))
        launch_of = {p.track_descriptor.uuid: p.track_descriptor.name for p in pftrace_packets(path)}
        return sorted(
            (
                launch_of[tracks[p.track_event.track_uuid].parent_uuid],
                p.track_event.name,
                p.timestamp,
                tuple(
                    (a.name, a.int_value, tuple(v.int_value for v in a.array_values))
                    for a in p.track_event.debug_annotations
                ),
            )
            for p in events
            if p.track_event.type == p.track_event.TYPE_SLICE_BEGIN
        )

    render_session(session, {"pftrace": tmp_path / "whole.pftrace"})
    monkeypatch.setattr("proton_ik.viewer.tables.runs.GROUP_BYTES", 1)  # every CTA its own chunk
    render_session(session, {"pftrace": tmp_path / "pieces.pftrace"})
    whole = drawn(tmp_path / "whole.pftrace")
    assert len(whole) == 2 * len(expected_clusters())  # each launch's three clusters
    assert drawn(tmp_path / "pieces.pftrace") == whole


def test_a_real_cluster_launch_names_each_ctas_cluster_and_rank():
    """tests/gpu/capture_clusters.py on an H200: a tl.dot matmul launched with num_ctas=2 on
    8 programs, so 16 hardware CTAs in 8 clusters of 2 (Triton's driver launches num_ctas
    times the grid in x, in clusters of (num_ctas, 1, 1))."""
    trace = load(DATA / "clusters.pik")
    units = trace.units
    ctas = units.groupby("cta")[["cluster", "cluster_rank"]].first()
    assert list(ctas.index) == list(range(16))
    assert (ctas["cluster"] == ctas.index // 2).all() and (ctas["cluster_rank"] == ctas.index % 2).all()
    clusters = trace.clusters
    assert len(clusters) == 8 and (clusters["ctas"].map(len) == 2).all()
    assert (clusters["start_skew_ns"] >= 0).all() and clusters["start_skew_ns"].max() < 10_000
    events = trace.events
    assert (events["cluster"] == events["cta"] // 2).all()
