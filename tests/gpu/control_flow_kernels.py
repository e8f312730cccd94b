"""Kernels in the shapes kernel authors write and the benchmark suite does not hold: an early
return, a spin lock, a software-pipelined loop, scopes in an unrolled loop and in both arms of a
branch, a ``while`` loop with a trip count per CTA. Each records a number of scopes per warp
that its arguments fix, so a test can count them exactly; all arithmetic is exact or in a fixed
order, so the instrumented outputs must equal the plain ones bit for bit."""

from __future__ import annotations

import triton
import triton.language as tl

import proton_ik.language as pl


@triton.jit
def early_exit_kernel(x, out, n, BLOCK: tl.constexpr):
    """CTAs past the end of the data return before their first scope."""
    pid = tl.program_id(0)
    if pid * BLOCK >= n:
        return
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    with pl.scope("load"):
        values = tl.load(x + offsets, mask=offsets < n)
    with pl.scope("store"):
        tl.store(out + offsets, values * 2.0, mask=offsets < n)


@triton.jit
def locked_sum_kernel(x, total, lock, arrivals, BLOCK: tl.constexpr):
    """Every CTA adds its block's integer sum to ``total`` under a spin lock, in the way of the
    Triton tutorial's LayerNorm backward, and writes the arrival order it saw."""
    pid = tl.program_id(0)
    block_sum = tl.sum(tl.load(x + pid * BLOCK + tl.arange(0, BLOCK)), axis=0)
    with pl.scope("acquire"):
        while tl.atomic_cas(lock, 0, 1) == 1:
            pass
    with pl.scope("update"):
        seen = tl.load(arrivals + pid * 0, volatile=True)
        tl.store(total, tl.load(total, volatile=True) + block_sum)
        tl.store(arrivals + pid * 0, seen + 1)
    tl.debug_barrier()
    tl.atomic_xchg(lock, 0)


@triton.jit
def pipelined_rows_kernel(x, out, n_rows, n_cols, BLOCK: tl.constexpr):
    """Persistent over rows with ``tl.range(num_stages=3)``: the pipeliner issues later rows'
    loads ahead of the scope that consumes them."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for row in tl.range(pid, n_rows, tl.num_programs(0), num_stages=3):
        with pl.scope("row"):
            acc += tl.load(x + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(out + pid * BLOCK + cols, acc)


@triton.jit
def branchy_kernel(x, out, BLOCK: tl.constexpr, INNER: tl.constexpr):
    """An outer scope around INNER unrolled inner scopes, then a scope in each arm of a branch
    on the CTA's parity (one by ``with``, one by enter/exit)."""
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    values = tl.load(x + offsets)
    with pl.scope("outer"):
        for i in tl.static_range(INNER):
            with pl.scope("inner"):
                values = values * 1.5 + i
    if pid % 2 == 0:
        with pl.scope("even"):
            values = values - 1.0
    else:
        pl.enter_scope("odd")
        values = values + 1.0
        pl.exit_scope("odd")
    tl.store(out + offsets, values)


@triton.jit
def while_kernel(x, out, limits, BLOCK: tl.constexpr):
    """A ``while`` loop whose trip count each CTA reads from ``limits``."""
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    limit = tl.load(limits + pid)
    values = tl.load(x + offsets)
    i = 0
    while i < limit:
        with pl.scope("step"):
            values = values * 1.0001 + 0.5
        i += 1
    tl.store(out + offsets, values)


def pipelined_rows_per_cta(n_rows: int, ctas: int) -> list[int]:
    """Rows CTA ``pid`` visits in ``pipelined_rows_kernel``: range(pid, n_rows, ctas)."""
    return [len(range(pid, n_rows, ctas)) for pid in range(ctas)]


def while_limit(pid: int) -> int:
    """``while_kernel``'s trip count for CTA ``pid``: 1 to 13, and 0 for every eleventh CTA."""
    return 0 if pid % 11 == 0 else 1 + (pid * 5) % 13


@triton.jit
def warp_specialized_matmul(
    a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, WS: tl.constexpr
):
    """C = A @ B.T by TMA tiles in a loop that Triton warp-specializes where WS: "k_step" inside
    the loop, "mainloop" around it and "epilogue" after it are the scopes its compile then warns
    of; "setup", before the loop, is recorded either way."""
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [K, 1], [BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, [N, K], [K, 1], [BN, BK])
    with pl.scope("setup"):
        acc = tl.zeros([BM, BN], tl.float32)
    pl.enter_scope("mainloop")
    for k in tl.range(0, tl.cdiv(K, BK), warp_specialize=WS):
        with pl.scope("k_step"):
            a = a_desc.load([pid_m * BM, k * BK])
            b = b_desc.load([pid_n * BN, k * BK])
            acc = tl.dot(a, b.T, acc)
    pl.exit_scope("mainloop")
    with pl.scope("epilogue"):
        rows = pid_m * BM + tl.arange(0, BM)
        cols = pid_n * BN + tl.arange(0, BN)
        tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc.to(tl.float16))
