"""Launch metadata the runtime writes (device, CUDA graph replays, autotuner configs, the ring's
size and why): in the launch table, the Perfetto launch slice and the summary; old files still read."""

from pathlib import Path

import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent

from proton_ik import viewer
from proton_ik.runtime.session_writer import SessionWriter
from proton_ik.viewer import LaunchCapture, Trace, load, readback, render_session
from proton_ik.viewer.tables import config_text
from proton_ik.viewer.tracks import LIFETIME

DATA = Path(__file__).parents[1] / "data"
CAPACITY = {"entries": 64, "source": "bound", "bound": 48, "reason": "8 iterations of 6 records per warp"}
CONFIG = {"kwargs": {"BLOCK_M": 128, "BLOCK_N": 64}, "num_warps": 4, "num_stages": 3}
UNRECORDED = [
    {"kernel": "kernel1", "reason": "captured in a CUDA graph this runtime does not follow", "count": 3}
]


def launches(busy_launch) -> list[LaunchCapture]:
    """kernel0 launched directly with an autotuned config, then replayed twice from graph 7;
    kernel1 on device 1 with another config."""
    captures = []
    extra = [
        {"device": 0, "config": CONFIG},
        {"device": 1, "config": {**CONFIG, "kwargs": {"BLOCK_M": 64}}},
        {"device": 0, "graph": 7, "replay": 0},
        {"device": 1, "config": {**CONFIG, "kwargs": {"BLOCK_M": 64}}},
        {"device": 0, "graph": 7, "replay": 1},
    ]
    for launch, more in enumerate(extra):
        capture = busy_launch(launch=launch, num_ctas=2)
        meta = {**capture.meta, **more}
        meta["profile"] = {**meta["profile"], "capacity": CAPACITY}
        captures.append(LaunchCapture(meta, capture.buffer))
    return captures


@pytest.fixture
def session(tmp_path, busy_launch) -> Path:
    path = tmp_path / "meta.pik"
    with SessionWriter(path, {"name": "meta", "unrecorded": UNRECORDED}, trim=True) as writer:
        for capture in launches(busy_launch):
            writer.add_launch(capture.meta, capture.buffer)
    return path


def test_the_launch_table_has_the_metadata(session):
    table = load(session).launches.set_index("launch")
    assert table["device"].tolist() == [0, 1, 0, 1, 0]
    assert table["graph"].tolist()[2::2] == [7, 7] and table["replay"].tolist()[2::2] == [0, 1]
    assert table.loc[0, "config"] == "BLOCK_M=128 BLOCK_N=64 num_warps=4 num_stages=3"
    assert table.loc[1, "config"] == "BLOCK_M=64 num_warps=4 num_stages=3"
    assert table.loc[1, "config_args"] == {**CONFIG, "kwargs": {"BLOCK_M": 64}}
    assert (table["capacity"] == 64).all() and (table["capacity_reason"] == CAPACITY["reason"]).all()


def test_sessions_from_before_the_metadata_still_read():
    table = load(DATA / "add.pik").launches
    assert table[["device", "graph", "replay", "config", "capacity_source"]].isna().all().all()
    assert table["capacity"].tolist() == [8]
    assert "ring: 8 slots per unit\n" in load(DATA / "add.pik").summary_text() + "\n"


def test_the_summary_says_why_the_ring_is_that_large_and_what_tells_launches_apart(session):
    text = load(session).summary_text()
    assert (
        "  ring: 64 slots per unit (from the bound, bound 48 slots): 8 iterations of 6 records per warp"
        in text
    )
    assert (
        "  launches: 1 direct, from CUDA graphs: graph 7: 2 replay(s) 0-1; "
        "configs: BLOCK_M=128 BLOCK_N=64 num_warps=4 num_stages=3 (1 launch(es))"
    ) in text
    assert "  launches: configs: BLOCK_M=64 num_warps=4 num_stages=3 (2 launch(es))" in text
    assert (
        "warning: 3 launch(es) of kernel1 ran but were not recorded: "
        "captured in a CUDA graph this runtime does not follow"
    ) in text


def test_devices_and_streams_are_named_when_a_kernel_ran_on_several(busy_launch):
    captures = [busy_launch(launch=i) for i in (0, 2)]
    for device, capture in enumerate(captures):
        capture.meta.update(device=device, stream=10 + device)
    text = Trace.from_captures({}, captures).summary_text()
    assert "  launches: devices 0, 1; streams 10, 11" in text


def test_the_perfetto_launch_slice_carries_the_metadata_as_args(session, tmp_path, pftrace_packets):
    path = tmp_path / "meta.pftrace"
    render_session(session, {"pftrace": path})
    names, annotation_names, args = {}, {}, []
    for packet in pftrace_packets(path):
        names.update({e.iid: e.name for e in packet.interned_data.event_names})
        annotation_names.update({e.iid: e.name for e in packet.interned_data.debug_annotation_names})
        event = packet.track_event
        if packet.HasField("track_event") and event.type == TrackEvent.TYPE_SLICE_BEGIN:
            named = {annotation_names[a.name_iid]: a for a in event.debug_annotations}
            if "kernel" in named:  # only a launch's lifetime names its kernel
                assert names[event.name_iid] == LIFETIME
                args.append(named)
    args.sort(key=lambda named: named["launch"].int_value)  # written in order of their start
    assert [a["launch"].int_value for a in args] == [0, 1, 2, 3, 4]
    first, replay = args[0], args[4]
    assert first["device"].int_value == 0 and "graph" not in first
    config = {entry.name: entry for entry in first["config"].dict_entries}
    assert {e.name: e.int_value for e in config["kwargs"].dict_entries} == CONFIG["kwargs"]
    assert config["num_stages"].int_value == 3
    assert (replay["graph"].int_value, replay["replay"].int_value) == (7, 1)
    assert first["capacity_reason"].string_value == CAPACITY["reason"]
    assert first["mhz"].double_value == pytest.approx(1755, rel=1e-3)


@pytest.mark.parametrize("suffix", [".pftrace", ".json"])
def test_trace_files_read_back_to_the_same_summary(session, tmp_path, suffix):
    path = tmp_path / f"meta{suffix}"
    render_session(session, {suffix[1:]: path})
    read = readback.read_perfetto if suffix == ".pftrace" else readback.read_chrome
    got = read(path).summary_text()
    expected = load(session).summary_text()
    if suffix == ".pftrace":  # the session info, and so the warning, stays in the session file
        expected = "\n".join(line for line in expected.splitlines() if not line.startswith("warning:"))
    assert got == expected


@pytest.mark.parametrize(
    ("config", "text"),
    [
        (None, None),
        ({}, None),
        ({"kwargs": {"BLOCK": 32}}, "BLOCK=32"),
        ({"num_warps": 8, "num_stages": None}, "num_warps=8"),
    ],
)
def test_a_config_in_one_line(config, text):
    assert config_text(config) == text


def test_the_perfetto_root_track_names_unrecorded_launches(session, tmp_path, pftrace_packets):
    viewer.render(session, tmp_path / "meta")
    (root,) = [
        p.track_descriptor for p in pftrace_packets(tmp_path / "meta.pftrace") if p.track_descriptor.uuid == 1
    ]
    assert "3 launch(es) of kernel1 ran but were not recorded" in root.description
