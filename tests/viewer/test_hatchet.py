"""The ``.hatchet`` tree, read back by Triton's own ``proton-viewer`` code from the installed wheel."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from proton_ik.runtime.session_writer import SessionWriter
from proton_ik.viewer import load, read_session, render_session

DATA = Path(__file__).parents[1] / "data"
# proton-viewer needs hatchet (`pip install llnl-hatchet`), which the triton wheel does not require.
pytest.importorskip("hatchet", reason="Triton's proton-viewer needs llnl-hatchet")
viewer = pytest.importorskip("triton.profiler.viewer")


def normalized(trace, launch_units: int) -> dict[str, float]:
    """Each scope's cycles summed over its events, over the units of its launch."""
    return (trace.events.groupby("scope", observed=True)["dur_cycles"].sum() / launch_units).to_dict()


@pytest.mark.parametrize(
    ("capture", "kernel", "scopes"),
    [
        ("add", "add_kernel", {"load", "compute", "store"}),
        ("clusters", "cluster_matmul_kernel", {"k_step"}),  # two CTAs per cluster (num_ctas=2)
    ],
)
def test_proton_viewer_prints_each_scope_with_its_normalized_cycles(tmp_path, capture, kernel, scopes):
    render_session(DATA / f"{capture}.pik", {"hatchet": tmp_path / "add.hatchet"})
    trace = load(DATA / f"{capture}.pik")
    expected = normalized(trace, int(trace.launches["units"].sum()))
    assert set(expected) == scopes

    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "triton.profiler.viewer",
            "-m",
            "normalized_cycles",
            str(tmp_path / "add.hatchet"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = {line.split()[-1]: float(line.split()[-2]) for line in run.stdout.splitlines() if line.strip()}
    assert rows[kernel] == pytest.approx(sum(expected.values()), abs=1e-3)
    for scope, value in expected.items():
        assert rows[scope] == pytest.approx(value, abs=1e-3)  # the viewer prints three decimals


def test_the_viewer_reads_every_metric_per_scope(tmp_path):
    render_session(DATA / "ring.pik", {"hatchet": tmp_path / "ring.hatchet"})
    trace = load(DATA / "ring.pik")
    gf, metrics = viewer.parse(["cycles", "time/ns", "count"], str(tmp_path / "ring.hatchet"))
    frame = gf.dataframe.set_index("name")
    events = trace.events.groupby("scope", observed=True)
    # "step" runs inside "outer": inclusive metrics of outer hold step's too, as in Proton's trees.
    step = frame.loc["step"]
    assert step[metrics[0]] == events["dur_cycles"].sum()["step"]
    assert step[metrics[1]] == events["dur_ns"].sum()["step"]
    assert step[metrics[2]] == events.size()["step"]
    assert frame.loc["outer", metrics[0]] == events["dur_cycles"].sum().sum()


def test_host_scopes_are_parents_and_launch_names_are_frames(tmp_path, busy_launch):
    path = tmp_path / "h.pik"
    plan = [
        (["train", "fwd"], "add_256"),
        (["train", "fwd"], "add_512"),
        (["train", "fwd"], "add_256"),
        ([], None),
    ]
    with SessionWriter(path, {"name": "h", "time_shift_cycles": 0}) as writer:
        for number, (host, name) in enumerate(plan):
            capture = busy_launch(launch=number, num_ctas=2, iterations=2)
            meta = {
                **capture.meta,
                "kernel": "add_kernel",
                "host_scope": host,
                **({"name": name} if name else {}),
            }
            writer.add_launch(meta, capture.buffer)
    render_session(path, {"hatchet": tmp_path / "h.hatchet"})
    root, devices = json.loads((tmp_path / "h.hatchet").read_text())
    assert root["frame"]["name"] == "ROOT" and set(devices) == {"CUDA"}

    def tree(node):
        return {child["frame"]["name"]: tree(child) for child in node["children"]}

    scopes = {"a": {"b": {}}, "c": {}}  # busy_launch: a holds b, then c
    assert tree(root) == {"train": {"fwd": {"add_256": scopes, "add_512": scopes}}, "add_kernel": scopes}

    trace = load(path)
    units = trace.launches.set_index("launch")["units"]
    fwd = root["children"][0]["children"][0]
    add_256 = next(child for child in fwd["children"] if child["frame"]["name"] == "add_256")
    b = add_256["children"][0]["children"][0]
    events = trace.events[(trace.events["scope"] == "b") & trace.events["launch"].isin([0, 2])]
    assert b["metrics"]["cycles"] == events["dur_cycles"].sum()
    assert b["metrics"]["count"] == len(events)
    per_launch = events.groupby("launch")["dur_cycles"].sum() / units.loc[[0, 2]]
    assert b["metrics"]["normalized_cycles"] == pytest.approx(per_launch.sum())


def test_a_launch_in_pieces_sums_as_one(tmp_path, monkeypatch):
    whole = tmp_path / "whole.hatchet"
    render_session(DATA / "add.pik", {"hatchet": whole})
    monkeypatch.setattr("proton_ik.viewer.tables.runs.GROUP_BYTES", 1)  # every CTA its own chunk
    render_session(DATA / "add.pik", {"hatchet": tmp_path / "pieces.hatchet"})
    assert len(read_session(DATA / "add.pik").launches) == 1  # so the pieces are of one launch
    assert json.loads((tmp_path / "pieces.hatchet").read_text()) == json.loads(whole.read_text())


def test_the_viewer_derives_util_from_the_device_and_the_launch_metrics(tmp_path):
    """-m util: the device's memory clock and bus width as the session recorded them (an H100's
    here), the launch's bytes and flops as hook="triton" kept them."""
    stored = read_session(DATA / "add.pik")
    info = {**stored.info, "arch": "90", "sm_count": 132, "memory_clock_rate": 2_619_000, "bus_width": 5120}
    path = tmp_path / "util.pik"
    with SessionWriter(path, info) as writer:
        for launch in stored:
            meta = {**launch.meta, "launch_metrics": {"bytes": 3 * 4 * 65536, "flops32": 65536}}
            writer.add_launch(meta, launch.buffer, trimmed_on_device=launch.trimmed)
    render_session(path, {"hatchet": tmp_path / "util.hatchet"})
    devices = json.loads((tmp_path / "util.hatchet").read_text())[1]["CUDA"]
    assert {d["memory_clock_rate"] for d in devices.values()} == {2_619_000}
    assert {d["bus_width"] for d in devices.values()} == {5120}
    gf, metrics = viewer.parse(["util"], str(tmp_path / "util.hatchet"))
    frame = gf.dataframe.set_index("name")
    util = frame.loc["add_kernel", metrics[0]]
    peak = 2 * 2_619_000 * 1e3 * 5120 / 8  # bytes per second: DDR, kHz, bits
    time = next(c for c in frame.columns if str(c).startswith("time (ns)") and "inc" in str(c))
    time_s = frame.loc["add_kernel", time] * 1e-9  # the launch's scopes' time, as the viewer sums it
    assert util == pytest.approx((3 * 4 * 65536 / peak) / time_s, rel=0.05)
    assert 0 < util < 1
