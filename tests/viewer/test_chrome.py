import json
from collections import defaultdict
from decimal import Decimal

import pytest

from proton_ik.viewer import Trace
from proton_ik.viewer.chrome import write_chrome
from proton_ik.viewer.tracks import LIFETIME, TIMELINES


def read(path):
    data = json.loads(path.read_text(), parse_float=Decimal)
    events = data["traceEvents"]
    for event in events:
        if event["ph"] == "X":
            event["ts_ns"] = int(event["ts"] * 1000)
            event["dur_ns"] = int(event["dur"] * 1000)
    return data, events


def assert_nested_per_thread(slices):
    threads = defaultdict(list)
    for s in slices:
        threads[(s["pid"], s["tid"])].append(s)
    for thread in threads.values():
        stack = []
        for s in sorted(thread, key=lambda s: (s["ts_ns"], -s["dur_ns"])):
            while stack and stack[-1] <= s["ts_ns"]:
                stack.pop()
            end = s["ts_ns"] + s["dur_ns"]
            assert not stack or end <= stack[-1], f"{s['name']} overlaps its parent on {s['pid']}/{s['tid']}"
            stack.append(end)


def test_slices_nest_per_thread_and_keep_exact_durations(tmp_path, busy_launch):
    trace = Trace.from_captures(
        {"name": "t", "device": "H100", "time_shift_cycles": 40},
        [busy_launch(launch=0), busy_launch(launch=1)],
    )
    data, events = read(trace.write_chrome(tmp_path / "t.json"))

    assert data["displayTimeUnit"] == "ns"
    assert data["otherData"]["proton_ik"]["device"] == "H100"
    slices = [e for e in events if e["ph"] == "X"]
    scopes = [e for e in slices if e["name"] != LIFETIME]
    assert len(scopes) == len(trace.events)
    assert sum(e["name"] == LIFETIME for e in slices) == int(trace.units["finished"].sum())
    assert_nested_per_thread(slices)

    got = sorted(
        (
            e["cat"],
            e["args"]["cta"],
            e["args"]["warp"],
            e["name"],
            e["ts_ns"],
            e["dur_ns"],
            e["args"]["cycles"],
        )
        for e in scopes
    )
    expected = sorted(
        (e.kernel, e.cta, e.warp, e.scope, e.begin_rel_ns, e.dur_ns, e.dur_cycles)
        for e in trace.events.itertuples()
    )
    assert got == expected
    assert min(e["ts_ns"] for e in slices) == 0  # times count from the session's first unit start


@pytest.mark.parametrize("timeline", TIMELINES)
def test_processes_and_threads_are_named_and_sorted(tmp_path, busy_launch, timeline):
    trace = Trace.from_captures({"name": "t"}, [busy_launch(launch=0, num_ctas=4, sms=2)])
    path = write_chrome(tmp_path / "t.json", trace.events, trace.units, trace.launches, {}, timeline=timeline)
    _, events = read(path)
    meta = defaultdict(dict)
    for e in events:
        if e["ph"] == "M":
            meta[e["name"]][(e["pid"], e["tid"])] = e["args"]
    processes = {pid: args["name"] for (pid, _), args in meta["process_name"].items()}
    assert processes == {1: "launch 0: kernel0 / SM 0", 2: "launch 0: kernel0 / SM 1"}
    assert {pid: a["sort_index"] for (pid, _), a in meta["process_sort_index"].items()} == {1: 1, 2: 2}
    threads = {key: args["name"] for key, args in meta["thread_name"].items()}
    assert all(meta["thread_sort_index"][key]["sort_index"] == key[1] for key in threads)
    # SM 0 ran CTAs 0 and 2, one after the other: with slots, both in its slot 0.
    ctas = defaultdict(set)
    for e in events:
        if e["ph"] == "X":
            ctas[(e["pid"], e["tid"])].add(e["args"]["cta"])
    if timeline == "ctas":
        assert threads[(1, 1)] == "CTA 0 warp 0" and threads[(1, 5)] == "CTA 2 warp 0"
        assert ctas[(1, 1)] == {0} and ctas[(1, 5)] == {2}
    else:
        assert [threads[(1, tid)] for tid in range(1, 5)] == [f"slot 0 warp {w}" for w in range(4)]
        assert len(threads) == 8 and ctas[(1, 1)] == {0, 2}


def test_overlapping_scopes_get_their_own_thread(tmp_path, fake_launch):
    fake = fake_launch(units=1, capacity=8)
    fake.cta(0, smid=0)
    unit = fake.unit(0, 0, 0, 0)
    for scope, is_end, clock in [(0, False, 100), (1, False, 200), (0, True, 300), (1, True, 400)]:
        unit.record(scope, is_end, clock)
    unit.finish(50_000, 30_000)
    trace = Trace.from_captures({"name": "t"}, [fake.capture()])
    _, events = read(trace.write_chrome(tmp_path / "t.json"))

    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    by_scope = {e["name"]: e for e in events if e["ph"] == "X"}
    assert names[(by_scope["a"]["pid"], by_scope["a"]["tid"])] == "slot 0 warp 0"
    assert names[(by_scope["b"]["pid"], by_scope["b"]["tid"])] == "slot 0 warp 0 overlap 1"
    assert_nested_per_thread([e for e in events if e["ph"] == "X"])


def test_names_are_escaped(tmp_path, fake_launch):
    fake = fake_launch(units=1, capacity=8)
    fake.cta(0, smid=0)
    unit = fake.unit(0, 0, 0, 0)
    for scope, is_end, clock in [(0, False, 100), (0, True, 200), (1, False, 300), (1, True, 400)]:
        unit.record(scope, is_end, clock)
    unit.finish(50_000, 30_000)
    names = ['say "hi"', "tab\tback\\slash \u00fcn\u00efcode"]
    trace = Trace.from_captures({"name": "t"}, [fake.capture(kernel='k"1', scopes=names)])
    _, events = read(trace.write_chrome(tmp_path / "t.json"))

    assert {e["name"] for e in events if e["ph"] == "X"} == {LIFETIME, *names}
    assert {e["cat"] for e in events if e["ph"] == "X"} == {'k"1'}
    assert [e["args"]["name"] for e in events if e["name"] == "process_name"] == ['launch 0: k"1 / SM 0']
