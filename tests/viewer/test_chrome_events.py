"""Events, marks and values in the Chrome JSON trace: async slices on the CTA's process, flows
from the warp that started an event to the warp that ended it, instants for marks and for
starts and ends left unmatched, values as args and counters.

The main buffer is ``test_async_events.pipeline_capture``'s: a producer (warp 2) starts four
tiles of "tma" (two slots), two consumer warps end the first three (warp 0 after 200 cycles,
warp 1 after 300); the last start has no end, a "free" end has no start; the consumers mark each
tile's phase (0, 0, 1, 1), the producer a tile mark without a value and three with one.
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from dataclasses import replace
from decimal import Decimal
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proton_ik.runtime.session_writer import write_session
from proton_ik.viewer.chrome import ChromeWriter, write_chrome
from proton_ik.viewer.chrome.events import lanes
from proton_ik.viewer.readback import read_chrome
from proton_ik.viewer.render import render_session
from proton_ik.viewer.tables import chunk_from_tables, parts_of
from proton_ik.viewer.trace import Trace

sys.path.insert(0, str(Path(__file__).parent))
from test_async_events import CLOCK0, FREE, PHASE, TABLE, TMA, Cta, event, mark, pipeline_capture

MATCHED = 6  # three tiles, each ended by two consumer warps


def rendered(tmp_path: Path, captures: list, timeline: str = "slots") -> list[dict]:
    session = write_session(tmp_path / "events.pik", {"name": "events"}, captures)
    render_session(session, {"json": tmp_path / "events.json"}, timeline=timeline)
    return json.loads((tmp_path / "events.json").read_text(), parse_float=Decimal)["traceEvents"]


def two_sm_capture(fake_launch):
    """Launch 1: CTA 0 on SM 0 and CTA 1 on SM 1, two warps each: warp 1 starts three "tma" that warp 0
    ends; in CTA 1, warp 0 also ends a "free" that nothing started, and warp 1 marks a value
    that never changes."""
    launch = fake_launch(units=2, capacity=32, num_ctas=2)
    ctas = [Cta(launch, 0, sm=0), Cta(launch, 1, sm=1)]
    for cta in ctas:
        for i in range(3):
            event(cta.units[1], TMA, False, CLOCK0 + 1000 * i)
            event(cta.units[0], TMA, True, CLOCK0 + 1000 * i + 500)
    event(ctas[1].units[0], FREE, True, CLOCK0 + 4000)
    for i in range(3):
        mark(ctas[1].units[1], PHASE, CLOCK0 + 1000 * i + 700, value=5)
    for cta in ctas:
        cta.finish()
    capture = launch.capture(launch=1)
    capture.meta["profile"]["scopes"] = TABLE
    return capture


def names(events: list[dict]) -> tuple[dict, dict]:
    """Process names by pid, thread names by (pid, tid)."""
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    return processes, threads


def ns(ts: Decimal) -> int:
    """Microseconds with three decimals, as nanoseconds: exact, or the test fails."""
    exact = ts * 1000
    assert exact == exact.to_integral_value(), f"ts {ts} is not a whole number of nanoseconds"
    return int(exact)


def async_slices(events: list[dict]) -> list[tuple[dict, dict]]:
    """Each "b" with its "e": the next one of the same process, category, id and name."""
    open_by: dict[tuple, list[dict]] = defaultdict(list)
    pairs = []
    for e in events:
        if e["ph"] not in "be":
            continue
        key = (e["pid"], e["cat"], e["id2"]["local"], e["name"])
        if e["ph"] == "b":
            open_by[key].append(e)
        else:
            assert open_by[key], f"an async end with no begin: {e}"
            pairs.append((open_by[key].pop(), e))
    assert not any(open_by.values()), "an async begin with no end"
    return pairs


@pytest.mark.parametrize("timeline", ["slots", "ctas"])
def test_each_event_is_an_async_slice_on_its_ctas_process(tmp_path, fake_launch, timeline):
    capture = pipeline_capture(fake_launch)
    events = rendered(tmp_path, [capture], timeline)
    processes, _ = names(events)
    pairs = async_slices(events)
    assert len(pairs) == MATCHED
    assert {processes[b["pid"]] for b, _ in pairs} == {"launch 0: kernel / SM 0"}
    assert {(b["name"], b["cat"]) for b, _ in pairs} == {("tma", "kernel")}
    table = Trace.from_captures({"name": "t"}, [capture]).async_events
    matched = table[table["status"] == "matched"]
    expected = sorted(
        (int(s), int(e), int(w), int(c))
        for s, e, w, c in zip(
            matched["start_rel_ns"],
            matched["end_rel_ns"],
            matched["end_warp"],
            matched["dur_cycles"],
            strict=True,
        )
    )
    got = sorted((ns(b["ts"]), ns(e["ts"]), b["args"]["end_warp"], b["args"]["cycles"]) for b, e in pairs)
    assert got == expected
    assert {(b["args"]["cta"], b["args"]["start_warp"], b["args"]["status"]) for b, _ in pairs} == {
        (0, 2, "matched")
    }
    assert sorted(b["args"]["index"] for b, _ in pairs) == [0, 0, 0, 0, 1, 1]


def test_events_that_overlap_never_share_an_id(tmp_path, fake_launch):
    """The two consumers' events of a tile overlap: two lanes, each used by three events in turn."""
    by_lane = defaultdict(list)
    for b, e in async_slices(rendered(tmp_path, [pipeline_capture(fake_launch)])):
        by_lane[(b["pid"], b["cat"], b["id2"]["local"])].append((ns(b["ts"]), ns(e["ts"])))
    assert sorted(len(spans) for spans in by_lane.values()) == [3, 3]
    for spans in by_lane.values():
        spans.sort()
        assert all(end < next_begin for (_, end), (next_begin, _) in pairwise(spans))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 30), st.integers(0, 10)), min_size=0, max_size=60)
)
def test_lanes_are_as_few_as_the_most_intervals_open_at_once(intervals):
    group = np.array([g for g, _, _ in intervals], np.int64)
    begin = np.array([b for _, b, _ in intervals], np.int64)
    end = begin + np.array([d for _, _, d in intervals], np.int64)
    dense = np.unique(group, return_inverse=True)[1].reshape(-1)
    lane, per_group = lanes(dense, begin, end)
    for g in range(len(per_group)):
        rows = np.flatnonzero(dense == g)
        # Touching counts as overlapping: one lane's "b"/"e" must never meet at one time.
        most = max(int(((begin[rows] <= t) & (t <= end[rows])).sum()) for t in begin[rows])
        assert per_group[g] == most
        assert set(lane[rows].tolist()) == set(range(most))
        for i in rows:
            for j in rows:
                if i < j and lane[i] == lane[j]:
                    assert end[i] < begin[j] or end[j] < begin[i], "two intervals share a lane"


def test_flows_go_from_the_starting_warps_thread_to_each_ending_warps(tmp_path, fake_launch):
    events = rendered(tmp_path, [pipeline_capture(fake_launch)])
    _, threads = names(events)
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert len(starts) == len(ends) == MATCHED and set(starts) == set(ends)
    for flow, start in starts.items():
        end = ends[flow]
        assert (start["cat"], start["name"]) == (end["cat"], end["name"]) == ("kernel", "tma")
        assert start["pid"] == end["pid"] and end["bp"] == "e" and ns(start["ts"]) <= ns(end["ts"])
    assert {threads[(s["pid"], s["tid"])] for s in starts.values()} == {"slot 0 warp 2"}
    assert Counter(threads[(f["pid"], f["tid"])] for f in ends.values()) == {
        "slot 0 warp 0": 3,
        "slot 0 warp 1": 3,
    }
    # Each flow event follows the instant it binds to in Perfetto: the slice last begun there.
    for at, e in enumerate(events):
        if e["ph"] in "sf":
            instant = events[at - 1]
            side = "start" if e["ph"] == "s" else "end"
            assert instant["ph"] == "i" and instant["name"] == f"tma: {side}"
            assert (instant["pid"], instant["tid"], instant["ts"]) == (e["pid"], e["tid"], e["ts"])


def test_flows_of_each_process_stay_in_it(tmp_path, fake_launch):
    events = rendered(tmp_path, [two_sm_capture(fake_launch)])
    processes, threads = names(events)
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    drawn = Counter(
        (processes[s["pid"]], threads[(s["pid"], s["tid"])], threads[(f["pid"], f["tid"])])
        for s in events
        if s["ph"] == "s"
        for f in [ends[s["id"]]]
    )
    assert drawn == {
        ("launch 1: kernel / SM 0", "slot 0 warp 1", "slot 0 warp 0"): 3,
        ("launch 1: kernel / SM 1", "slot 0 warp 1", "slot 0 warp 0"): 3,
    }


def test_unmatched_starts_and_ends_are_instants_with_their_status(tmp_path, fake_launch):
    events = rendered(tmp_path, [pipeline_capture(fake_launch), two_sm_capture(fake_launch)])
    processes, threads = names(events)
    lost = sorted(
        (processes[e["pid"]], threads[(e["pid"], e["tid"])], e["name"], e["s"], e["args"]["status"])
        for e in events
        if e["ph"] == "i" and e["name"].endswith(("no end", "no start"))
    )
    assert lost == [
        ("launch 0: kernel / SM 0", "slot 0 warp 2", "free: no start", "t", "no start"),
        ("launch 0: kernel / SM 0", "slot 0 warp 2", "tma: no end", "t", "no end"),
        ("launch 1: kernel / SM 1", "slot 0 warp 0", "free: no start", "t", "no start"),
    ]


def test_marks_land_on_their_warps_thread_and_values_are_args(tmp_path, fake_launch):
    events = rendered(tmp_path, [pipeline_capture(fake_launch)])
    _, threads = names(events)
    marks = [e for e in events if e["ph"] == "i" and e["name"] in ("tile", "phase")]
    assert all(e["s"] == "t" and e["args"]["warp"] == int(threads[(e["pid"], e["tid"])][-1]) for e in marks)
    on = Counter((e["name"], threads[(e["pid"], e["tid"])]) for e in marks)
    assert on == {("phase", "slot 0 warp 0"): 4, ("phase", "slot 0 warp 1"): 4, ("tile", "slot 0 warp 2"): 4}
    tiles = sorted((ns(e["ts"]), e["args"].get("value")) for e in marks if e["name"] == "tile")
    assert [value for _, value in tiles] == [None, -7, 0xFFFFFFF0, Decimal("0.25")]
    phases = sorted((ns(e["ts"]), e["args"]["value"]) for e in marks if e["args"]["warp"] == 0)
    assert [value for _, value in phases] == [0, 0, 1, 1]


def test_counters_carry_the_values_that_change(tmp_path, fake_launch):
    events = rendered(tmp_path, [pipeline_capture(fake_launch), two_sm_capture(fake_launch)])
    processes, threads = names(events)
    series = defaultdict(list)
    for e in events:
        if e["ph"] == "C":
            assert e["id"] == threads[(e["pid"], e["tid"])]
            series[(processes[e["pid"]], e["name"], e["id"])].append((ns(e["ts"]), e["args"]["value"]))
    # The second launch's phase is 5 throughout: an arg, not a counter.
    assert set(series) == {
        ("launch 0: kernel / SM 0", "phase", "slot 0 warp 0"),
        ("launch 0: kernel / SM 0", "phase", "slot 0 warp 1"),
        ("launch 0: kernel / SM 0", "tile", "slot 0 warp 2"),
    }
    assert [v for _, v in sorted(series[("launch 0: kernel / SM 0", "tile", "slot 0 warp 2")])] == [
        -7,
        0xFFFFFFF0,
        Decimal("0.25"),
    ]
    assert [v for _, v in sorted(series[("launch 0: kernel / SM 0", "phase", "slot 0 warp 1")])] == [
        0,
        0,
        1,
        1,
    ]
    constant = [e for e in events if e["ph"] == "i" and e["name"] == "phase" and e["args"]["cta"] == 1]
    assert [e["args"]["value"] for e in constant] == [5, 5, 5]


def test_chrome_scope_slices_read_back_without_the_events_among_them(tmp_path, fake_launch):
    rendered(tmp_path, [pipeline_capture(fake_launch)])
    trace = read_chrome(tmp_path / "events.json", for_writing=True).trace
    assert len(trace.events) == 0 and len(trace.units) == 3
    assert trace.problems == []


def test_write_chrome_draws_a_traces_tables(tmp_path, fake_launch):
    trace = Trace.from_captures({"name": "t"}, [pipeline_capture(fake_launch)])
    parts = parts_of(trace.async_events, trace.marks, trace.values)
    path = write_chrome(
        tmp_path / "t.json", trace.events, trace.units, trace.launches, {}, async_parts=[parts]
    )
    events = json.loads(path.read_text())["traceEvents"]
    assert len({e["id"] for e in events if e["ph"] == "s"}) == MATCHED
    assert sum(e["ph"] == "C" for e in events) == 3 + 4 + 4  # tile on warp 2, phase on warps 0 and 1


def test_ids_are_never_reused_across_chunks(tmp_path, fake_launch):
    """Two launches written as two chunks: no lane or flow id comes back."""
    trace = Trace.from_captures(
        {"name": "t"}, [pipeline_capture(fake_launch, launch=0), pipeline_capture(fake_launch, launch=1)]
    )
    with ChromeWriter(tmp_path / "t.json", {}) as writer:
        for number in (0, 1):
            events, units, launches, async_events, marks, values = (
                table[table["launch"] == number]
                for table in (
                    trace.events,
                    trace.units,
                    trace.launches,
                    trace.async_events,
                    trace.marks,
                    trace.values,
                )
            )
            parts = parts_of(async_events, marks, values)
            writer.add(replace(chunk_from_tables(events, units, launches), async_parts=(parts,)))
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    lanes_by_pid = defaultdict(set)
    for e in events:
        if e["ph"] == "b":
            lanes_by_pid[e["pid"]].add(e["id2"]["local"])
    assert len(lanes_by_pid) == 2 and not set.intersection(*lanes_by_pid.values())
    assert len({e["id"] for e in events if e["ph"] == "s"}) == 2 * MATCHED
