"""Events, marks, values and predicates on a GPU: exact counts, cross-warp pairs that follow the
program, predicates that write nothing when false, traces whose flows parse back, and numerics
unchanged. The warp-specialized example needs Hopper (TMA); the others run on any GPU."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from proton_ik.viewer.pairing.async_events import CLOCK_SKEW_CYCLES

sys.path.insert(0, str(Path(__file__).parent))
from kernels import barrier_kernel
from profiling import profiled

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
EXAMPLES = Path(__file__).parents[2] / "examples"


CTAS, WARPS, ITERS, BLOCK = 8, 4, 6, 512


def _barrier_run(tmp_path):
    x = torch.randn(CTAS * BLOCK, device="cuda")

    def run():
        out = torch.empty_like(x)
        barrier_kernel[(CTAS,)](x, out, ITERS=ITERS, BLOCK=BLOCK, num_warps=WARPS)
        return out

    plain = run()
    out, result = profiled(tmp_path, "barrier", run, formats=("pftrace",))
    assert torch.equal(plain, out)
    return out, result.trace


def test_cross_warp_pairs_follow_the_barrier(tmp_path):
    ctas, warps, iters = CTAS, WARPS, ITERS
    _, trace = _barrier_run(tmp_path)
    events = trace.async_events
    # Each instance: a batch of 4 starts, then (after the barrier) a batch of 4 ends: 16 events.
    assert (events["status"] == "matched").all()
    assert len(events) == ctas * iters * warps * warps
    per_pair = events.groupby(["cta", "start_warp", "end_warp"]).size()
    assert len(per_pair) == ctas * warps * warps and (per_pair == iters).all()
    for _, cta in events.groupby("cta"):
        for _, group in cta.groupby("start_record"):
            # The barrier: every warp's end comes after every warp's start of that iteration, up
            # to the skew between the SM's sub-partitions' clocks.
            assert group["start_cycles"].max() <= group["end_cycles"].min() + CLOCK_SKEW_CYCLES


def test_counts_values_predicates_and_numerics(tmp_path):
    ctas, warps, iters, block = CTAS, WARPS, ITERS, BLOCK
    out, trace = _barrier_run(tmp_path)
    assert trace.problems == []
    events = trace.async_events
    assert sorted(set(events["index"])) == [0, 1]
    values = trace.values
    iteration = values[values["mark"] == "iter"].sort_values(["cta", "warp", "cycles"])
    assert len(iteration) == ctas * warps * iters
    sequences = iteration.groupby(["cta", "warp"])["value"].apply(list)
    assert all(seq == list(map(float, range(iters))) for seq in sequences)
    total = values[values["mark"] == "total"]
    assert set(total["cta"]) == {0} and len(total) == warps
    assert total["value"].iloc[0] == pytest.approx(float(out[:block].sum()), rel=1e-4)
    marks = trace.marks
    assert set(marks["mark"]) == {"odd"}
    assert sorted(set(marks["cta"])) == [c for c in range(ctas) if c % 2] and len(marks) == ctas // 2 * warps
    # A false predicate writes nothing and counts nothing: per warp, a start, an end and a value
    # per iteration, and "odd" and "total" only where their predicates held.
    assert int(trace.launches["records"].sum()) == ctas * warps * 3 * iters + len(marks) + len(total)
    stats = trace.summary().events.set_index("event")
    assert stats.loc["handoff", "count"] == len(events) and stats.loc["handoff", "no_end"] == 0


@pytest.fixture
def example():
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the warp-specialized example uses Hopper's TMA")
    sys.path.insert(0, str(EXAMPLES))
    try:
        import gluon_ws_pipeline
    finally:
        sys.path.remove(str(EXAMPLES))
    return gluon_ws_pipeline


def test_the_warp_specialized_example(tmp_path, example):
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    rows, cols = 1024, 4096
    stages = example.NUM_STAGES.value
    tiles = cols // example.BLOCK_N
    ctas = rows // example.BLOCK_M
    x = torch.randn(rows, cols, device="cuda")

    def run():
        out = torch.empty(rows, device="cuda")
        desc = TensorDescriptor.from_tensor(x, [example.BLOCK_M, example.BLOCK_N], example.shared_layout())
        example.row_sum_kernel[(ctas,)](
            desc, out, cols, BLOCK_M=example.BLOCK_M, BLOCK_N=example.BLOCK_N,
            CONSUMER_WARPS=example.CONSUMER_WARPS, num_warps=example.CONSUMER_WARPS,
        )  # fmt: skip
        return out

    plain = run()
    out, result = profiled(tmp_path, "ws", run)
    assert torch.equal(plain, out)
    torch.testing.assert_close(out, x.sum(dim=1), rtol=1e-4, atol=1e-2)
    trace = result.trace
    assert trace.problems == []
    events = trace.async_events
    assert (events["status"] == "matched").all()
    load, free = events[events["event"] == "tma_load"], events[events["event"] == "slot_free"]
    producers = set(load["start_warp"])
    consumers = set(load["end_warp"])
    assert len(producers) == 1 and len(consumers) == example.CONSUMER_WARPS and not producers & consumers
    assert set(free["start_warp"]) == consumers and set(free["end_warp"]) == producers
    # Each tile: the producer's start, an end per consumer warp. Slots freed: all but the last
    # `stages` tiles (the predicate is false there, and nothing is written).
    assert len(load) == ctas * tiles * example.CONSUMER_WARPS
    assert len(free) == ctas * (tiles - stages) * example.CONSUMER_WARPS
    assert (load["dur_cycles"] >= 0).all() and (free["dur_cycles"] >= 0).all()
    phases = trace.values.sort_values(["cta", "warp", "cycles"]).groupby(["cta", "warp"])["value"].apply(list)
    assert all(seq == [float(i // stages & 1) for i in range(tiles)] for seq in phases)
    reduce = trace.events[trace.events["scope"] == "reduce"]
    assert len(reduce) == ctas * tiles * example.CONSUMER_WARPS


def test_flows_in_the_perfetto_trace_parse_back(tmp_path):
    from proton_ik.viewer.readback import read_packets, read_perfetto

    ctas, warps, iters = 2, 4, 3
    x = torch.randn(ctas * 512, device="cuda")
    out = torch.empty_like(x)
    _, result = profiled(
        tmp_path,
        "flows",
        lambda: barrier_kernel[(ctas,)](x, out, ITERS=iters, BLOCK=512, num_warps=warps),
        formats=("pftrace",),
    )
    path = Path(result.paths["pftrace"])
    packets = read_packets(path)
    ours = [p.track_event for p in packets if p.HasField("track_event") and p.track_event.track_uuid]
    warp_tracks = {
        p.track_descriptor.uuid: p.track_descriptor.name
        for p in packets
        if p.HasField("track_descriptor") and p.track_descriptor.name.startswith("warp ")
    }
    starts = {f: warp_tracks[e.track_uuid] for e in ours for f in e.flow_ids}
    ends = {f: warp_tracks[e.track_uuid] for e in ours for f in e.terminating_flow_ids}
    events = result.trace.async_events
    assert len(starts) == len(ends) == len(events) and set(starts) == set(ends)
    # Every warp starts each iteration's instance and every warp ends it: flows between all pairs.
    pairs = {(starts[f], ends[f]) for f in starts}
    assert len(pairs) == warps * warps
    assert {e.name for e in ours} >= {"handoff", "handoff: start", "handoff: end", "iter", "odd"}
    counters = [
        p.track_descriptor
        for p in packets
        if p.HasField("track_descriptor") and p.track_descriptor.HasField("counter")
    ]
    assert sum(c.name == "iter" for c in counters) == ctas * warps  # its value changes every iteration
    again = read_perfetto(path).trace  # the scope reader skips what it does not hold
    assert again.problems == [] and len(again.units) == ctas * warps
    assert np.isfinite(result.trace.values["value"]).all()
