"""``lanes=on`` (``lowering.lane_staging``) on the GPU: a loop's pairs held in the warp's lanes and
stored 16 entries at once must give the trace that stores each pair straight to the buffer does:
the same outputs, the same records per warp and scope, the same ring wrap, and durations as
long."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import triton
import triton.language as tl

import proton_ik.language as pl

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).parent))
from profiling import profiled  # noqa: E402

CTAS, BLOCK, WARPS = 264, 256, 4


@triton.jit
def _nested_loop_kernel(x, out, iters_ptr, BLOCK: tl.constexpr):
    """A run-time trip count (no bound: a ring), nested pairs and several tags in the loop."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    iters = tl.load(iters_ptr)
    acc = tl.load(x + offsets)
    for _ in range(iters):
        with pl.scope("body"):
            with pl.scope("inner"):
                acc = acc * 1.0001 + 0.25
            acc = tl.sqrt(acc * acc + 1.0)
        with pl.scope("after"):
            acc = acc - 0.125
    tl.store(out + offsets, acc)


def _run(tmp_path, name: str, mode: str, iters: int):
    torch.manual_seed(0)
    x = torch.rand(CTAS * BLOCK, device="cuda")
    out = torch.empty_like(x)
    trips = torch.tensor([iters], dtype=torch.int32, device="cuda")

    def launch():
        return _nested_loop_kernel[(CTAS,)](x, out, trips, BLOCK=BLOCK, num_warps=WARPS)

    compiled, result = profiled(tmp_path / name, name, launch, mode=mode)
    return compiled, out, result


@pytest.mark.parametrize("iters", [5, 180], ids=["no-group-full", "ring-wraps"])
def test_lanes_give_the_trace_that_direct_stores_give(tmp_path, iters):
    """5 trips: 15 entries, all stored by the epilogue; 180 trips: 540 entries, 33 group stores
    and 12 entries at the epilogue, in a ring of 512 that keeps the newest: 28 overwritten, as
    with direct stores."""
    lanes_kernel, lanes_out, lanes = _run(tmp_path, "lanes", "instrumentation:lanes=on", iters)
    direct_kernel, direct_out, direct = _run(tmp_path, "direct", "instrumentation", iters)
    assert "%pik_lc" in lanes_kernel.asm["ptx"] and "%pik_lc" not in direct_kernel.asm["ptx"]
    assert torch.equal(lanes_out, direct_out)
    for result in (lanes, direct):
        units = result.trace.units
        assert len(units) == CTAS * WARPS and units.finished.all()
        assert (units["count"] == 3 * iters).all()
    assert lanes.trace.units.overwritten.tolist() == direct.trace.units.overwritten.tolist()
    keys = ["cta", "warp", "scope"]
    counts = {
        name: result.events.assign(scope=result.events.scope.astype(str)).groupby(keys).size()
        for name, result in (("lanes", lanes), ("direct", direct))
    }
    assert counts["lanes"].equals(counts["direct"])
    events = lanes.events.assign(scope=lanes.events.scope.astype(str))
    direct_events = direct.events.assign(scope=direct.events.scope.astype(str))
    for scope in ("body", "inner", "after"):
        ours = events[events.scope == scope].dur_cycles.to_numpy()
        theirs = direct_events[direct_events.scope == scope].dur_cycles.to_numpy()
        assert (ours > 0).all()
        # The same code between the same clock reads: medians within 10% (or 20 cycles).
        assert abs(np.median(ours) - np.median(theirs)) <= max(20, 0.1 * np.median(theirs)), scope
    # Records of one warp come in time order: each begin after the one before.
    ordered = events.sort_values(["cta", "warp", "begin_record"])
    steps = ordered.groupby(["cta", "warp"]).begin_cycles.diff().dropna()
    assert (steps >= 0).all()
