"""Every header is written at each unit's exit (issue 10), and the runtime clears the headers of
each drained launch: a unit that never reaches its exit must read as unfinished in a reused
pool chunk, not as the earlier launch that wrote there. Only a GPU shows it."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import triton
import triton.language as tl

import proton_ik
import proton_ik.language as pl
from proton_ik.contract.layout import CTA_ALIGN

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).parent))
import kernels  # noqa: E402  (beside this file; --import-mode=importlib adds no path)
from profiling import profiled  # noqa: E402

GRID, BLOCK = 8192, 128  # one element per thread: warp w holds elements 32 w to 32 w + 31


@triton.jit
def _leaving_kernel(x_ptr, out_ptr, leave, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    with pl.scope("load"):
        x = tl.load(x_ptr + offsets)
    # With ``leave``, every warp but warp 0 ends here (PTX ``exit``), after its record and
    # before the kernel's end: it never reaches the epilogue that writes its unit header.
    gone = ((tl.arange(0, BLOCK) >= 32) & (leave != 0)).to(tl.int32)
    kept = tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.s32 p, $1, 0; @p exit; mov.b32 $0, $1; }",
        "=r,r",
        [gone],
        dtype=tl.int32,
        is_pure=False,
        pack=1,
    )
    tl.store(out_ptr + offsets, x + kept.to(tl.float32))


def test_a_unit_that_never_reaches_its_exit_is_unfinished_not_an_earlier_launch(tmp_path):
    x = torch.randn(GRID * BLOCK, device="cuda")
    out = torch.empty_like(x)
    proton_ik.start("sizing", mode="instrumentation", out_dir=tmp_path / "sizing")
    try:
        compiled = _leaving_kernel[(GRID,)](x, out, 0, BLOCK=BLOCK, num_warps=4)
    finally:
        proton_ik.finalize()
    launch_bytes = -(-GRID * compiled.metadata.profile_scratch_size // CTA_ALIGN) * CTA_ALIGN
    assert launch_bytes * 3 // 2 >= 1 << 20  # the smallest pool proton_ik.start takes
    # Room for one launch, not two: the second launch waits for the first to be drained and
    # takes the same chunk (an empty ring starts over at its beginning).
    proton_ik.start("leaving", mode="instrumentation", out_dir=tmp_path, pool_bytes=launch_bytes * 3 // 2)
    try:
        _leaving_kernel[(GRID,)](x, out, 0, BLOCK=BLOCK, num_warps=4)
        _leaving_kernel[(GRID,)](x, out, 1, BLOCK=BLOCK, num_warps=4)
        torch.cuda.synchronize()
    finally:
        result = proton_ik.finalize()
    assert torch.equal(out[::BLOCK], x[::BLOCK])  # warp 0 stored, and it added 0
    units = result.trace.units
    first, second = units[units.launch == 0], units[units.launch == 1]
    assert len(first) == len(second) == GRID * 4
    assert first.finished.all() and (first["count"] == 2).all()
    stayed = second[second.warp == 0]
    left = second[second.warp > 0]
    assert stayed.finished.all() and (stayed["count"] == 2).all()
    assert not left.finished.any() and (left["count"] == 0).all()
    events = result.events.groupby("launch").size()
    assert events.tolist() == [GRID * 4, GRID]


@pytest.mark.parametrize("mode", ["instrumentation", "instrumentation:stage=off"])
def test_back_to_back_pairs_are_measured_within_twenty_cycles(tmp_path, mode):
    """Two straight-line scopes in a row, each one pair entry: staged in shared memory by default
    (``lowering.staging``), stored straight to the buffer with stage=off. Each scope's measured
    duration is within 20 cycles of its own clock64 span, in both."""
    ctas = 132
    spans = torch.zeros(2 * ctas, dtype=torch.int64, device="cuda")
    compiled, result = profiled(
        tmp_path,
        "pairs",
        lambda: kernels.sequential_pairs_kernel[(ctas,)](spans, CHAIN=64, num_warps=1),
        mode=mode,
    )
    staged = "cp.async.bulk.global" in compiled.asm["ptx"]
    assert staged == (mode == "instrumentation")
    reference = spans.cpu().numpy().reshape(ctas, 2)
    events = result.events.assign(scope=result.events["scope"].astype(str))
    for index, scope in enumerate(("first", "second")):
        rows = events[events.scope == scope].sort_values("cta")
        assert len(rows) == ctas
        error = rows.dur_cycles.to_numpy() - reference[rows.cta.to_numpy(), index]
        assert abs(np.median(error)) <= 20 and np.percentile(np.abs(error), 95) <= 20, (
            f"{scope}: median error {np.median(error):+.0f}, p95 |error| {np.percentile(np.abs(error), 95):.0f}"
        )


def test_a_short_tma_kernel_returns_what_it_returns_unprofiled(tmp_path):
    """Staged, a static shared array of ours moves the kernel's dynamic shared memory, and its
    TMA tiles with it: by a multiple of 1024 bytes, which keeps their alignment
    (``lowering.staging``)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    block, tiles = 64, 264
    x = torch.randn(tiles * block, block, device="cuda", dtype=torch.float16)
    desc = TensorDescriptor.from_tensor(x, [block, block])
    plain = torch.empty_like(x)
    kernels.tma_tile_kernel[(tiles,)](desc, plain, BLOCK=block, num_warps=4)
    traced = torch.empty_like(x)
    compiled, result = profiled(
        tmp_path, "tma", lambda: kernels.tma_tile_kernel[(tiles,)](desc, traced, BLOCK=block, num_warps=4)
    )
    assert torch.equal(plain, x * 2) and torch.equal(traced, plain)
    assert compiled.metadata.shared > 0 and "pik_stage" in compiled.asm["ptx"]
    assert len(result.events) == tiles * 4 * 2
