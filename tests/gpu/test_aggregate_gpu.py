"""Aggregate mode (``aggregate=on``) on a GPU: one kernel run traced and then aggregated tells the
same story, scope by scope and warp by warp, in a buffer that does not grow with trip counts.

Run with ``pytest -m gpu tests/gpu/test_aggregate_gpu.py``; without CUDA every test skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import triton
import triton.language as tl

import proton_ik.language as pl

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from profiling import profiled  # noqa: E402  (beside this file; --import-mode=importlib adds no path)

AGGREGATE = "instrumentation:aggregate=on"
TRACE = "instrumentation"
CHAIN = 16  # dependent FMAs per step: a scope of fixed, register-only work


@triton.jit
def steps_kernel(x, out, iters_ptr, BLOCK: tl.constexpr, CHAIN: tl.constexpr):
    """Per warp: "outer" around a run-time number of "step" scopes of register-only work (so a
    step takes the same cycles in both modes: nothing is recorded inside it)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    iters = tl.load(iters_ptr)
    acc = tl.load(x + offsets)
    pl.enter_scope("outer")
    for _ in range(iters):
        with pl.scope("step"):
            for _ in tl.static_range(CHAIN):
                acc = acc * 1.0001 + 0.25
    pl.exit_scope("outer")
    tl.store(out + offsets, acc)


@triton.jit
def half_kernel(x, out, BLOCK: tl.constexpr):
    """The scope "half" begins only in even CTAs and ends in all: odd CTAs end it with nothing open."""
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offsets)
    if pid % 2 == 0:
        pl.enter_scope("half")
        v = v * 2.0
    pl.exit_scope("half")
    tl.store(out + offsets, v)


def _trace(tmp_path, name, mode, launch):
    """The session's trace, read back (no trace files written)."""
    return profiled(tmp_path, name, launch, mode=mode, formats=())[1].trace


def _sms() -> int:
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def test_aggregate_counts_equal_the_traces_and_step_times_agree(tmp_path):
    """One CTA of 4 warps per SM (one warp per scheduler, so a step's cycles repeat run to run),
    run traced and aggregated: every (CTA, warp, scope) counts the same, exactly, and a step's
    cycles, summed over all its runs, agree within a few cycles per step."""
    ctas, iters, block = _sms(), 40, 512
    x = torch.randn(ctas * block, device="cuda")
    out = torch.empty_like(x)
    trip = torch.tensor([iters], dtype=torch.int32, device="cuda")

    def launch():
        # Twice, and the second launch compared: a session's first launch writes into a pool
        # that is still cold (zeroed, out of L2), and there the statistics' atomics cost a step
        # up to 15 more cycles than in a warm one; a trace's stores do not wait on the memory.
        for _ in range(2):
            steps_kernel[(ctas,)](x, out, trip, BLOCK=block, CHAIN=CHAIN, num_warps=4)

    traced = _trace(tmp_path, "traced", TRACE, launch)
    aggregated = _trace(tmp_path, "aggregated", AGGREGATE, launch)
    assert len(aggregated.events) == 0 and int(traced.launches["overwritten"].sum()) == 0

    warm_events = traced.events[traced.events["launch"] == traced.events["launch"].max()]
    events = warm_events.assign(
        scope=warm_events["scope"].astype(str),
        raw=warm_events["end_cycles"] - warm_events["begin_cycles_raw"],
    )
    from_trace = events.groupby(["cta", "warp", "scope"])["raw"].agg(["size", "sum"])
    warm_table = aggregated.aggregates[
        aggregated.aggregates["launch"] == aggregated.aggregates["launch"].max()
    ]
    table = warm_table.assign(scope=warm_table["scope"].astype(str))
    from_aggregate = table.set_index(["cta", "warp", "scope"])[["count", "sum_cycles_raw"]]
    joined = from_trace.join(from_aggregate, how="outer")
    assert len(joined) == ctas * 4 * 2 and joined.notna().all().all()
    assert (joined["size"] == joined["count"]).all()
    counts = table.groupby("scope")["count"]
    assert (
        (counts.min() == counts.max()).all() and counts.max()["step"] == iters and counts.max()["outer"] == 1
    )

    # Both modes time a step the same way: a bare clock read at its begin, one at its end.
    steps = joined.xs("step", level="scope")
    per_step = (steps["sum_cycles_raw"] - steps["sum"]).to_numpy() / iters
    # A few cycles per step: the calibrated cost of an empty scope, or 8 where that is less.
    tolerance = max(8, 2 * aggregated.time_shift_cycles.pair)
    assert abs(np.median(per_step)) <= tolerance, (
        f"median difference {np.median(per_step):+.1f} cycles per step, tolerance {tolerance}"
    )
    assert np.percentile(np.abs(per_step), 90) <= 2 * tolerance
    mean_trace = steps["sum"].sum() / steps["size"].sum()
    mean_aggregate = steps["sum_cycles_raw"].sum() / steps["count"].sum()
    assert abs(mean_trace - mean_aggregate) <= tolerance

    # The histogram holds every step, and the min and max bound the mean.
    assert (table[[f"hist_{b}" for b in range(32)]].sum(axis=1) == table["count"]).all()
    step_rows = table[table["scope"] == "step"]
    assert (step_rows["min_cycles_raw"] <= step_rows["sum_cycles_raw"] / iters).all()
    assert (step_rows["sum_cycles_raw"] / iters <= step_rows["max_cycles_raw"]).all()
    summary = aggregated.summary()
    assert "estimates at the resolution of log2 histogram bins" in str(summary)
    assert set(summary.aggregates["scope"]) == {"outer", "step"}


def test_the_buffer_does_not_grow_with_the_trip_count(tmp_path):
    ctas, block = 8, 512
    x = torch.randn(ctas * block, device="cuda")
    out = torch.empty_like(x)
    sizes, counts = {}, {}
    for iters in (3, 3000):
        trip = torch.tensor([iters], dtype=torch.int32, device="cuda")
        compiled = []

        def launch(trip=trip, compiled=compiled):
            compiled.append(steps_kernel[(ctas,)](x, out, trip, BLOCK=block, CHAIN=2, num_warps=4))

        trace = _trace(tmp_path, f"trip{iters}", AGGREGATE, launch)
        sizes[iters] = compiled[0].metadata.profile_scratch_size
        step = trace.aggregates[trace.aggregates["scope"].astype(str) == "step"]
        counts[iters] = step["count"].tolist()
    assert sizes[3] == sizes[3000]
    assert counts[3] == [3] * (ctas * 4) and counts[3000] == [3000] * (ctas * 4)


def test_an_end_with_nothing_open_counts_nothing(tmp_path):
    ctas, block = 16, 256
    x = torch.randn(ctas * block, device="cuda")
    out = torch.empty_like(x)
    trace = _trace(
        tmp_path, "half", AGGREGATE, lambda: half_kernel[(ctas,)](x, out, BLOCK=block, num_warps=4)
    )
    table = trace.aggregates
    even = table["cta"] % 2 == 0
    assert (table.loc[even, "count"] == 1).all() and (table.loc[~even, "count"] == 0).all()
    assert table.loc[~even, "min_cycles_raw"].isna().all()
    assert torch.equal(
        out, torch.where((torch.arange(ctas * block, device="cuda") // block) % 2 == 0, x * 2, x)
    )


# Aggregate kernels with profile buffers of exactly the requested size, uninitialised (no pool,
# no caching allocator): a reduction outside its unit's statistics, or on bytes the prologue
# did not zero, shows under memcheck or initcheck.
SANITIZED = """
import sys
sys.path.insert(0, {here!r})
import torch
from triton.runtime._allocation import set_profile_allocator
import proton_ik
import test_aggregate_gpu as t

buffers = []

def exact(size, alignment, stream):
    buffers.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
    return buffers[-1]

set_profile_allocator(exact)
x = torch.randn(16 * 512, device="cuda")
out = torch.empty_like(x)
trip = torch.tensor([50], dtype=torch.int32, device="cuda")
for granularity, warps in (("warp", 4), ("warpgroup", 8), ("cta", 4)):
    with proton_ik.instrumented(f"instrumentation:granularity={{granularity}}:aggregate=on"):
        t.steps_kernel[(16,)](x, out, trip, BLOCK=512, CHAIN=2, num_warps=warps)
        t.half_kernel[(16,)](x, out, BLOCK=512, num_warps=warps)
torch.cuda.synchronize()
print("aggregate ok", len(buffers))
"""


@pytest.mark.parametrize("tool", ["memcheck", "initcheck"])
def test_compute_sanitizer_is_clean_in_aggregate_mode(tmp_path, tool):
    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None:
        pytest.skip("compute-sanitizer is not installed")
    script = tmp_path / "sanitized.py"
    script.write_text(SANITIZED.format(here=str(HERE)))
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    run = subprocess.run(
        [sanitizer, "--tool", tool, "--error-exitcode", "3", sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "ERROR SUMMARY: 0 errors" in run.stdout + run.stderr
    assert "aggregate ok 6" in run.stdout
