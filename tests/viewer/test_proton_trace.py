"""NAME.chrome_trace in Triton Proton's schema, as Proton's own tests read it
(third_party/proton/test/test_instrumentation.py: test_trace, test_timeline, test_gmem_buffer,
test_event_args, test_globaltime, test_tensor_descriptor), checked field by field."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from proton_ik import viewer
from proton_ik.viewer.render import render_session

DATA = Path(__file__).parents[1] / "data"
PID = re.compile(r"^(?P<kernel>\w+) Core(?P<sm>\d+) CTA(?P<cta>\d+)$")
TID = re.compile(r"^warp (?P<warp>\d+) \(line (?P<line>\d+)\)$")
ARGS = ("call_stack", "Init Time (ns)", "Post Final Time (ns)", "Finalization Time (ns)")


def _proton_trace(name: str, tmp_path: Path) -> list[dict]:
    path = tmp_path / f"{name}.chrome_trace"
    render_session(DATA / f"{name}.pik", {"chrome_trace": path})
    return json.loads(path.read_text())["traceEvents"]


@pytest.mark.parametrize("name", ["add", "ring", "spin", "events", "clusters"])
def test_every_scope_instance_is_one_complete_event_in_protons_fields(name, tmp_path):
    events = _proton_trace(name, tmp_path)
    trace = viewer.load(DATA / f"{name}.pik")
    assert len(events) == len(trace.events)  # only "X" events: no metadata events first
    assert all(event["ph"] == "X" and event["dur"] >= 0 for event in events)
    for event in events:
        pid, tid = PID.match(event["pid"]), TID.match(event["tid"])
        assert pid and tid, (event["pid"], event["tid"])
        assert event["cat"] == pid["kernel"]
        assert all(key in event["args"] and (key == "call_stack" or event["args"][key] >= 0) for key in ARGS)
        assert event["args"]["call_stack"][-1] == event["cat"]
    assert sorted(e["name"] for e in events) == sorted(trace.events["scope"].astype(str))


def test_events_come_in_launch_cta_warp_order_each_warps_in_the_order_they_began(tmp_path):
    events = _proton_trace("add", tmp_path)
    keys = [
        (e["args"]["launch"], int(PID.match(e["pid"])["cta"]), int(TID.match(e["tid"])["warp"]), e["ts"])
        for e in events
    ]
    assert keys == sorted(keys)
    # Proton's test_gmem_buffer: each warp's scopes, found by "warp N" in the tid.
    warp0 = [e for e in events if "warp 0" in e["tid"] and e["pid"].endswith(" CTA0")]
    assert [e["name"] for e in warp0] == ["load", "compute", "store"]


def test_a_launch_cut_into_pieces_comes_out_in_cta_order(tmp_path, monkeypatch):
    whole = _proton_trace("add", tmp_path)
    monkeypatch.setattr("proton_ik.viewer.tables.runs.GROUP_BYTES", 1)  # every CTA its own chunk
    (tmp_path / "pieces").mkdir()
    assert _proton_trace("add", tmp_path / "pieces") == whole


def test_host_scopes_come_before_the_kernel_in_the_call_stack(tmp_path):
    from proton_ik.runtime.session_writer import SessionWriter
    from proton_ik.viewer.session_file import read_session

    stored = read_session(DATA / "add.pik")
    with SessionWriter(tmp_path / "scoped.pik", stored.info) as writer:
        for launch in stored:
            writer.add_launch(
                {**launch.meta, "host_scope": ["test"]}, launch.buffer, trimmed_on_device=launch.trimmed
            )
    render_session(tmp_path / "scoped.pik", {"chrome_trace": tmp_path / "scoped.chrome_trace"})
    events = json.loads((tmp_path / "scoped.chrome_trace").read_text())["traceEvents"]
    assert all(
        e["args"]["call_stack"][-2:] == ["test", "add_kernel"] for e in events
    )  # Proton's test_timeline


def test_each_warps_events_take_rows_as_protons_writer_gives_them():
    """Proton's "line": by start, each event on the first row of its warp where it overlaps no
    event already there (as Triton 3.6's Proton wrote body 0, load_ops 1, load_x 2, load_y 2,
    store 1 for these nested scopes); rows start again with each warp."""
    from proton_ik.viewer.proton.chrome_trace import proton_rows

    spans = [(0, 100), (10, 40), (12, 20), (22, 30), (50, 90), (100, 120), (5, 6), (6, 9), (9, 9)]
    warp = [0] * 6 + [1] * 3
    begin, end = (np.array(column) for column in zip(*spans, strict=True))
    zeros = np.zeros(len(spans), dtype=np.int64)
    rows = proton_rows(zeros, zeros, np.array(warp), begin, end)
    # warp 0: nested scopes, then one that starts as the outer one ends (no overlap: row 0);
    # warp 1: one after another on row 0, an empty event at another's end too
    assert rows == [0, 1, 2, 2, 1, 0, 0, 0, 0]
    # an empty event at the start of one still open overlaps nothing, as Proton tests it
    assert proton_rows(zeros[:2], zeros[:2], zeros[:2], np.array([5, 5]), np.array([9, 5])) == [0, 0]
