"""Kernels with known scope structure, for the GPU tests and the captured test data."""

from __future__ import annotations

import triton
import triton.language as tl

import proton_ik.language as pl


@triton.jit
def read_clock64():
    return tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    with pl.scope("load"):
        a = tl.load(x + offsets, mask=mask)
        b = tl.load(y + offsets, mask=mask)
    with pl.scope("compute"):
        c = a * b + a
    with pl.scope("store"):
        tl.store(out + offsets, c, mask=mask)


@triton.jit
def loop_kernel(x, out, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    """Per warp: one "outer" scope around ITERS "step" scopes, so 2 + 2 * ITERS records."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    pl.enter_scope("outer")
    acc = tl.load(x + offsets)
    for _ in range(ITERS):
        with pl.scope("step"):
            acc = acc * 1.0001 + 0.25
    tl.store(out + offsets, acc)
    pl.exit_scope("outer")


@triton.jit
def softmax_kernel(x, out, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    with pl.scope("row"):
        v = tl.load(x + row * stride + cols, mask=mask, other=-float("inf"))
        v = v - tl.max(v, axis=0)
        e = tl.exp(v)
        tl.store(out + row * stride + cols, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def spin_kernel(out, CYCLES: tl.constexpr):
    """A scope around a spin of at least CYCLES cycles. Launch with num_warps=1: ``out[cta]``
    gets the spin's own clock64 span, the reference for the scope's measured duration."""
    pl.enter_scope("spin")
    start = read_clock64()
    now = start
    while now - start < CYCLES:
        now = read_clock64()
    end = read_clock64()
    pl.exit_scope("spin")
    tl.store(out + tl.program_id(0), end - start)


@triton.jit
def four_scopes_kernel(x, out, n, BLOCK: tl.constexpr):
    """Four straight-line scopes per warp: each warp writes exactly four pair entries."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    with pl.scope("load"):
        a = tl.load(x + offsets, mask=mask)
    with pl.scope("scale"):
        b = a * 2.0 + 1.0
    with pl.scope("square"):
        c = b * b
    with pl.scope("store"):
        tl.store(out + offsets, c, mask=mask)


def tuned_configs():
    """Two configs far apart in speed on a large elementwise add: one warp of 64 elements per
    CTA against four warps of 2048."""
    return [
        triton.Config({"BLOCK": 64}, num_warps=1),
        triton.Config({"BLOCK": 2048}, num_warps=4),
    ]


@triton.jit
def tuned_add_body(x, y, out, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    with pl.scope("add"):
        tl.store(out + offsets, tl.load(x + offsets, mask=mask) + tl.load(y + offsets, mask=mask), mask=mask)


def make_tuned_add():
    """A fresh autotuned kernel (its own tuning cache) for each test that needs one."""
    return triton.autotune(configs=tuned_configs(), key=["n"])(tuned_add_body)


@triton.jit
def runtime_loop_kernel(x, out, iters_ptr, BLOCK: tl.constexpr):
    """Like loop_kernel, with a trip count read at run time: no compile-time bound."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    iters = tl.load(iters_ptr)
    pl.enter_scope("outer")
    acc = tl.load(x + offsets)
    for _ in range(iters):
        with pl.scope("step"):
            acc = acc * 1.0001 + 0.25
    tl.store(out + offsets, acc)
    pl.exit_scope("outer")


@triton.jit
def grid3d_kernel(out, NX: tl.constexpr, NY: tl.constexpr):
    """One scope per warp; each CTA writes its own linear id (x + y * NX + z * NX * NY)."""
    with pl.scope("cell"):
        x, y, z = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        tl.store(out + x + y * NX + z * NX * NY, x + y * NX + z * NX * NY)


HANDOFF = pl.event("handoff", instances=2)


@triton.jit
def barrier_kernel(x, out, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    """Per CTA and iteration: every warp starts instance i % 2 of "handoff", all warps meet at a
    barrier, every warp ends it. Marks: "iter" with the iteration as a value in every warp,
    "odd" only in odd CTAs (a runtime predicate), "never" nowhere (a constant False)."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    acc = tl.load(x + offs)
    for i in range(ITERS):
        pl.start_event(HANDOFF, index=i % 2)
        acc = acc * 1.5 + 0.25
        tl.debug_barrier()
        pl.end_event(HANDOFF, index=i % 2)
        pl.mark("iter", value=i)
    pl.mark("odd", predicate=pid % 2 == 1)
    pl.mark("total", value=tl.sum(acc, 0), predicate=pid == 0)
    pl.mark("never", predicate=False)
    tl.store(out + offs, acc)


@triton.jit
def released_kernel(out, ITERS: tl.constexpr):
    """Every warp marks the release of each of ITERS barriers: the clocks of one release, read by
    warps on different sub-partitions of the SM, show how far apart their clocks run."""
    for _ in range(ITERS):
        tl.debug_barrier()
        pl.mark("released")
    tl.store(out + tl.program_id(0), ITERS)


@triton.jit
def read_clock64_after(x):
    """%clock64, read once ``x`` has been computed (the asm takes it as an input)."""
    return tl.inline_asm_elementwise(
        "mov.u64 $0, %clock64;", "=l,f", [x], dtype=tl.int64, is_pure=False, pack=1
    )


@triton.jit
def sequential_pairs_kernel(out, CHAIN: tl.constexpr):
    """Two scopes back to back, each around CHAIN dependent FMAs between two clock64 reads, in
    straight-line code, so that each scope is one pair entry. Launch with num_warps=1:
    ``out[2 * cta + i]`` gets scope i's own span, the reference for its measured duration."""
    x = tl.program_id(0).to(tl.float32)
    with pl.scope("first"):
        start = read_clock64()
        x = x + start.to(tl.float32) * 0.0
        for _ in tl.static_range(CHAIN):
            x = x * 1.0001 + 0.5
        end = read_clock64_after(x)
    with pl.scope("second"):
        start2 = read_clock64_after(x)
        y = x + start2.to(tl.float32) * 0.0
        for _ in tl.static_range(CHAIN):
            y = y * 1.0001 + 0.5
        end2 = read_clock64_after(y)
    tl.store(out + 2 * tl.program_id(0), end - start)
    tl.store(out + 2 * tl.program_id(0) + 1, end2 - start2)


@triton.jit
def tma_tile_kernel(desc, out, BLOCK: tl.constexpr):
    """A short kernel that loads one BLOCK x BLOCK tile through a TMA descriptor (shared memory of
    its own, swizzled), scaled and stored: two scopes, so at most two entries per unit."""
    pid = tl.program_id(0)
    with pl.scope("load"):
        tile = desc.load([pid * BLOCK, 0])
    with pl.scope("store"):
        rows = pid * BLOCK + tl.arange(0, BLOCK)[:, None]
        cols = tl.arange(0, BLOCK)[None, :]
        tl.store(out + rows * BLOCK + cols, tile * 2.0)


@triton.jit
def persistent_kernel(x, out, n_tiles, K, NUM_PROGRAMS: tl.constexpr, BLOCK: tl.constexpr):
    """A persistent loop over tiles, each a K loop: trip counts that each launch computes from
    its arguments. Per warp of program p: a "tile" scope for each tile in range(p, n_tiles,
    NUM_PROGRAMS), around cdiv(K, BLOCK) "k" scopes."""
    offsets = tl.arange(0, BLOCK)
    for tile in tl.range(tl.program_id(0), n_tiles, NUM_PROGRAMS):
        with pl.scope("tile"):
            acc = tl.zeros((BLOCK,), tl.float32)
            for k in range(tl.cdiv(K, BLOCK)):
                with pl.scope("k"):
                    acc += tl.load(x + k * BLOCK + offsets, mask=k * BLOCK + offsets < K)
            tl.store(out + tile * BLOCK + offsets, acc)
