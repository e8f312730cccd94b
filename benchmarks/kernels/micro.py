"""The microbenchmark kernels and their settings, shared by the measurements (run.py) and
compile_check.py: empty scopes in a loop (per-record cost), the same loop of events, marks and
values (their cost against a scope's), a scope around a spin of known length (accuracy), and a
grid barrier before a scope (cross-CTA alignment)."""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

import proton_ik.language as pl
from benchmarks import scopes

MICRO_BLOCK = 128  # 4 warps, one element per thread
MICRO_OPTIONS = {"num_warps": 4}
RECORD_COST_UNROLL = 8
RECORD_COST_ITERS = (0, 64, 1024)
EVENT_COST_ITERS = (0, 1024)
RECORDS_PER_ITER = 2  # in record_cost_kernel and in every kernel of EVENT_COST_KERNELS
SPIN_CYCLES = (100, 300, 1000, 3000, 10000, 100000)
HOST_ELEMENTS = 1 << 18  # the host section's short kernel: GELU over 256K floats, 64 CTAs


@triton.jit
def _clock64(like):
    """%clock64 in every thread; ``like`` gives the shape and keeps the read in program order."""
    return tl.inline_asm_elementwise(
        "mov.u64 $0, %clock64;", "=l,r", [like], dtype=tl.int64, is_pure=False, pack=1
    )


@triton.jit(do_not_specialize=["n_iters"])
def record_cost_kernel(out_ptr, n_iters, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    """n_iters empty scopes (2 * n_iters records per warp) between two clock reads; every thread
    stores its own elapsed cycles. n_iters must be a multiple of UNROLL."""
    lanes = tl.arange(0, BLOCK)
    start = _clock64(lanes)
    for _ in range(n_iters // UNROLL):
        for _unrolled in tl.static_range(UNROLL):
            scopes.enter_scope("empty")
            scopes.exit_scope("empty")
    end = _clock64(lanes)
    tl.store(out_ptr + tl.program_id(0) * BLOCK + lanes, end - start)


PAIR = pl.event("pair", instances=2)


@triton.jit(do_not_specialize=["n_iters"])
def event_cost_kernel(out_ptr, n_iters, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    """record_cost_kernel with an empty event for each scope, started and ended in the same
    warp; its index is the loop counter % 2, a register (the unrolled iteration's number would
    fold to a constant, its parity being the unrolled copy's)."""
    lanes = tl.arange(0, BLOCK)
    start = _clock64(lanes)
    for i in range(n_iters // UNROLL):
        for _unrolled in tl.static_range(UNROLL):
            pl.start_event(PAIR, index=i % 2)
            pl.end_event(PAIR, index=i % 2)
    end = _clock64(lanes)
    tl.store(out_ptr + tl.program_id(0) * BLOCK + lanes, end - start)


@triton.jit(do_not_specialize=["n_iters"])
def event_const_cost_kernel(out_ptr, n_iters, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    """event_cost_kernel with a constant index: the unrolled copy's number % 2."""
    lanes = tl.arange(0, BLOCK)
    start = _clock64(lanes)
    for _ in range(n_iters // UNROLL):
        for unrolled in tl.static_range(UNROLL):
            pl.start_event(PAIR, index=unrolled % 2)
            pl.end_event(PAIR, index=unrolled % 2)
    end = _clock64(lanes)
    tl.store(out_ptr + tl.program_id(0) * BLOCK + lanes, end - start)


@triton.jit(do_not_specialize=["n_iters"])
def mark_cost_kernel(out_ptr, n_iters, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    """record_cost_kernel with two marks for each scope's begin and end."""
    lanes = tl.arange(0, BLOCK)
    start = _clock64(lanes)
    for _ in range(n_iters // UNROLL):
        for _unrolled in tl.static_range(UNROLL):
            pl.mark("first")
            pl.mark("second")
    end = _clock64(lanes)
    tl.store(out_ptr + tl.program_id(0) * BLOCK + lanes, end - start)


@triton.jit(do_not_specialize=["n_iters"])
def value_cost_kernel(out_ptr, n_iters, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    """record_cost_kernel with two value marks for each scope's begin and end; the value is the
    loop counter (the iteration's number)."""
    lanes = tl.arange(0, BLOCK)
    start = _clock64(lanes)
    for i in range(n_iters // UNROLL):
        for unrolled in tl.static_range(UNROLL):
            pl.mark("first", value=i * UNROLL + unrolled)
            pl.mark("second", value=i * UNROLL + unrolled)
    end = _clock64(lanes)
    tl.store(out_ptr + tl.program_id(0) * BLOCK + lanes, end - start)


EVENT_COST_KERNELS: dict[str, tuple[Any, str]] = {
    "scope": (record_cost_kernel, "an empty scope (the per-record cost section's kernel)"),
    "event": (event_cost_kernel, "an empty event, its index the loop counter % 2"),
    "event_const": (event_const_cost_kernel, "an empty event, a constant index"),
    "mark": (mark_cost_kernel, "two marks"),
    "value": (value_cost_kernel, "two marks with the loop counter as their value"),
}
"""name -> (kernel, what one iteration records): the same loop as record_cost_kernel,
RECORDS_PER_ITER records per warp and iteration in each, so that cycles per record compare; the
scope kernel first, as the baseline."""


# Spin until %clock64 has advanced by at least $1 cycles; return the cycles really spun. Labels
# inside a { } block are local to it, so the text may appear more than once in a kernel.
# The spin's first and last clock reads: what it spun is their difference, taken after the
# scope, so that the scope holds the spin and nothing of the reference's own arithmetic (a
# subtraction inside it read as +12 cycles at every length: docs/PERFORMANCE.md).
SPIN_PTX = tl.constexpr("""{
.reg .u64 spin_d;
.reg .pred spin_p;
mov.u64 $0, %clock64;
SPIN_AGAIN:
mov.u64 $1, %clock64;
sub.u64 spin_d, $1, $0;
setp.lt.u64 spin_p, spin_d, $2;
@spin_p bra SPIN_AGAIN;
mov.u64 $1, %clock64;
}""")


@triton.jit(do_not_specialize=["n_cycles"])
def spin_kernel(out_ptr, n_cycles, BLOCK: tl.constexpr):
    """One scope around a spin of n_cycles; every thread stores the cycles it really spun, from
    its first clock read to one after the loop, so that the loop's exit counts as spun."""
    lanes = tl.arange(0, BLOCK)
    target = tl.zeros([BLOCK], dtype=tl.int64) + n_cycles
    with scopes.scope("spin"):
        first, last = tl.inline_asm_elementwise(
            SPIN_PTX, "=l,=l,l", [target], dtype=(tl.int64, tl.int64), is_pure=False, pack=1
        )
    tl.store(out_ptr + tl.program_id(0) * BLOCK + lanes, last - first)


@triton.jit(do_not_specialize=["n_ctas", "max_polls"])
def grid_sync_kernel(counter_ptr, arrived_ptr, n_ctas, max_polls):
    """A grid-wide barrier (all CTAs must be resident: launch at most one per SM), then an empty
    scope, whose begin is as close to simultaneous across CTAs as the release allows."""
    tl.atomic_add(counter_ptr, 1)
    arrived = tl.atomic_add(counter_ptr, 0)
    polls = max_polls * 0
    while (arrived < n_ctas) & (polls < max_polls):
        arrived = tl.atomic_add(counter_ptr, 0)
        polls += 1
    with scopes.scope("released"):
        tl.store(arrived_ptr + tl.program_id(0), arrived)


MICRO_KERNELS: dict[str, tuple[Any, dict[str, str], dict[str, Any]]] = {
    "record_cost": (
        record_cost_kernel,
        {"out_ptr": "*i64", "n_iters": "i32"},
        {"BLOCK": MICRO_BLOCK, "UNROLL": RECORD_COST_UNROLL},
    ),
    **{
        f"{name}_cost": (
            fn,
            {"out_ptr": "*i64", "n_iters": "i32"},
            {"BLOCK": MICRO_BLOCK, "UNROLL": RECORD_COST_UNROLL},
        )
        for name, (fn, _) in EVENT_COST_KERNELS.items()
        if name != "scope"
    },
    "spin": (spin_kernel, {"out_ptr": "*i64", "n_cycles": "i32"}, {"BLOCK": MICRO_BLOCK}),
    "grid_sync": (
        grid_sync_kernel,
        {"counter_ptr": "*i32", "arrived_ptr": "*i32", "n_ctas": "i32", "max_polls": "i32"},
        {},
    ),
}
"""name -> (kernel, runtime argument types, constexprs)."""
