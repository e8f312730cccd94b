"""The benchmark suite and the microbenchmark kernels.

Every kernel takes its scopes from ``benchmarks.scopes``, so its plain, proton_ik and Proton
variants all compile from this one source. A ``Problem`` is one kernel at one size: its compile
options and constexprs, the argument types for a GPU-less compile (``compile_check.py``), its
grid, a builder of fresh random inputs with a torch reference, and the exact number of records
each warp writes per launch, derived from where the scopes sit.

torch is imported only inside the input builders, so this module imports on a machine without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from benchmarks import scopes

# --- the suite ------------------------------------------------------------------------------


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    with scopes.scope("load"):
        x = tl.load(x_ptr + offsets, mask=mask)
    with scopes.scope("compute"):
        # tanh-approximated GELU: 0.5 * (1 + tanh(z)) == sigmoid(2 * z)
        y = x * tl.sigmoid(1.5957691216057308 * (x + 0.044715 * x * x * x))
    with scopes.scope("store"):
        tl.store(y_ptr + offsets, y, mask=mask)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        with scopes.scope("row"):
            x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
            x = x - tl.max(x, axis=0)
            numerator = tl.exp(x)
            y = numerator / tl.sum(numerator, axis=0)
            tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        with scopes.scope("k_step"):
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk

    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(tl.float16), mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


@triton.jit
def _attn_fwd_inner(
    acc, l_i, m_i, q, k_ptrs, v_ptrs, stride_kn, stride_vk, start_m, qk_scale,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGE: tl.constexpr, offs_m, offs_n, N_CTX,
):  # fmt: skip
    # STAGE 1: the blocks left of the diagonal; 2: the diagonal block (masked); 3: all (non-causal)
    if STAGE == 1:
        lo, hi = 0, start_m * BLOCK_M
    elif STAGE == 2:
        lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
        lo = tl.multiple_of(lo, BLOCK_M)
    else:
        lo, hi = 0, N_CTX
    for start_n in range(lo, hi, BLOCK_N):
        with scopes.scope("kv_block"):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            k = tl.load(k_ptrs + start_n * stride_kn)
            qk = tl.dot(q, k)
            if STAGE == 2:
                mask = offs_m[:, None] >= (start_n + offs_n[None, :])
                qk = qk * qk_scale + tl.where(mask, 0, -1.0e6)
                m_ij = tl.maximum(m_i, tl.max(qk, 1))
                qk -= m_ij[:, None]
            else:
                m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
                qk = qk * qk_scale - m_ij[:, None]
            p = tl.math.exp2(qk)
            alpha = tl.math.exp2(m_i - m_ij)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None]
            v = tl.load(v_ptrs + start_n * stride_vk)
            acc = tl.dot(p.to(tl.float16), v, acc)
            m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def attention_fwd_kernel(
    Q, K, V, Out, sm_scale,
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vk, stride_vn,
    stride_oz, stride_oh, stride_om, stride_on,
    H, N_CTX,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGE: tl.constexpr,
):  # fmt: skip
    """Flash-attention forward after Triton's tutorial 06, without TMA, fp8 or the backward pass.
    STAGE is 3 for causal attention (off-diagonal blocks, then the diagonal one) and 1 otherwise."""
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    q_offset = off_z.to(tl.int64) * stride_qz + off_h.to(tl.int64) * stride_qh
    k_offset = off_z.to(tl.int64) * stride_kz + off_h.to(tl.int64) * stride_kh
    v_offset = off_z.to(tl.int64) * stride_vz + off_h.to(tl.int64) * stride_vh
    o_offset = off_z.to(tl.int64) * stride_oz + off_h.to(tl.int64) * stride_oh

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + q_offset + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk)
    k_ptrs = K + k_offset + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kk
    v_ptrs = V + v_offset + offs_n[:, None] * stride_vk + offs_d[None, :] * stride_vn

    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504  # 1 / ln(2): the inner loop uses exp2
    if STAGE & 1:
        acc, l_i, m_i = _attn_fwd_inner(
            acc,
            l_i,
            m_i,
            q,
            k_ptrs,
            v_ptrs,
            stride_kn,
            stride_vk,
            start_m,
            qk_scale,
            BLOCK_M,
            BLOCK_N,
            4 - STAGE,
            offs_m,
            offs_n,
            N_CTX,
        )
    if STAGE & 2:
        acc, l_i, m_i = _attn_fwd_inner(
            acc,
            l_i,
            m_i,
            q,
            k_ptrs,
            v_ptrs,
            stride_kn,
            stride_vk,
            start_m,
            qk_scale,
            BLOCK_M,
            BLOCK_N,
            2,
            offs_m,
            offs_n,
            N_CTX,
        )
    acc = acc / l_i[:, None]
    o_ptrs = Out + o_offset + offs_m[:, None] * stride_om + offs_d[None, :] * stride_on
    tl.store(o_ptrs, acc.to(Out.type.element_ty))


@triton.jit
def matmul_tma_persistent_kernel(
    a_desc, b_desc, c_desc, M, N, K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr,
):  # fmt: skip
    """C = A @ B.T with host-side TMA descriptors (B is stored N x K), one CTA per SM, tiles in
    grouped order, after Triton's tutorial 09."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n
    num_pid_in_group = GROUP_M * num_pid_n
    for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_SMS):
        with scopes.scope("tile"):
            first_pid_m = (tile_id // num_pid_in_group) * GROUP_M
            group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
            pid_m = first_pid_m + (tile_id % group_size_m)
            pid_n = (tile_id % num_pid_in_group) // group_size_m
            offs_am = pid_m * BLOCK_M
            offs_bn = pid_n * BLOCK_N
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for ki in range(k_tiles):
                with scopes.scope("k_step"):
                    offs_k = ki * BLOCK_K
                    a = a_desc.load([offs_am, offs_k])
                    b = b_desc.load([offs_bn, offs_k])
                    acc = tl.dot(a, b.T, acc)
            c_desc.store([offs_am, offs_bn], acc.to(tl.float16))


@gluon.jit
def _ws_load_partition(descs, barriers, buffers, xoff, ynumel, YBLOCK: gl.constexpr):
    # The worker partitions share one signature; each unpacks what it uses.
    a_desc, b_desc, _c_desc = descs
    load_empty_bars, load_ready_bars, _c_empty_bars, _c_ready_bars = barriers
    a_bufs, b_bufs, _c_bufs = buffers
    num_buffers: gl.constexpr = a_bufs.type.shape[0]
    for i in range(gl.cdiv(ynumel, YBLOCK)):
        with scopes.scope("produce"):
            index = i % num_buffers
            phase = i // num_buffers & 1
            load_ready_bar = load_ready_bars.index(index)
            # mbarriers start with phase 1 complete, so the first wait on an empty slot passes.
            mbarrier.wait(load_empty_bars.index(index), phase ^ 1)
            mbarrier.expect(load_ready_bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(a_desc, [xoff, i * YBLOCK], load_ready_bar, a_bufs.index(index))
            tma.async_copy_global_to_shared(b_desc, [xoff, i * YBLOCK], load_ready_bar, b_bufs.index(index))


@gluon.jit
def _ws_store_partition(descs, barriers, buffers, xoff, ynumel, YBLOCK: gl.constexpr):
    _a_desc, _b_desc, c_desc = descs
    _load_empty_bars, _load_ready_bars, c_empty_bars, c_ready_bars = barriers
    _a_bufs, _b_bufs, c_bufs = buffers
    num_buffers: gl.constexpr = c_bufs.type.shape[0]
    outstanding_stores: gl.constexpr = num_buffers - 1
    for i in range(gl.cdiv(ynumel, YBLOCK)):
        with scopes.scope("store"):
            index = i % num_buffers
            phase = i // num_buffers & 1
            mbarrier.wait(c_ready_bars.index(index), phase)
            tma.async_copy_shared_to_global(c_desc, [xoff, i * YBLOCK], c_bufs.index(index))
            tma.store_wait(outstanding_stores)
            # The buffer stored `outstanding_stores` iterations ago is free again.
            c_empty_bar = c_empty_bars.index((i - outstanding_stores) % num_buffers)
            mbarrier.arrive(c_empty_bar, count=1, pred=i >= outstanding_stores)
    tma.store_wait(0)


@gluon.jit
def _ws_compute_partition(barriers, buffers, ynumel, YBLOCK: gl.constexpr, layout: gl.constexpr):
    load_empty_bars, load_ready_bars, c_empty_bars, c_ready_bars = barriers
    a_bufs, b_bufs, c_bufs = buffers
    num_load_buffers: gl.constexpr = a_bufs.type.shape[0]
    num_store_buffers: gl.constexpr = c_bufs.type.shape[0]
    for i in range(gl.cdiv(ynumel, YBLOCK)):
        with scopes.scope("consume"):
            load_index = i % num_load_buffers
            mbarrier.wait(load_ready_bars.index(load_index), i // num_load_buffers & 1)
            a_val = a_bufs.index(load_index).load(layout)
            b_val = b_bufs.index(load_index).load(layout)
            # Order the shared loads before the producer's next TMA write into this slot.
            fence_async_shared()
            mbarrier.arrive(load_empty_bars.index(load_index), count=1)
            c_val = a_val + b_val
            store_index = i % num_store_buffers
            mbarrier.wait(c_empty_bars.index(store_index), (i // num_store_buffers & 1) ^ 1)
            c_bufs.index(store_index).store(c_val)
            fence_async_shared()
            mbarrier.arrive(c_ready_bars.index(store_index), count=1)


@gluon.jit
def ws_add_kernel(
    a_desc, b_desc, c_desc, ynumel,
    XBLOCK: gl.constexpr, YBLOCK: gl.constexpr, NUM_LOAD_BUFFERS: gl.constexpr,
    NUM_STORE_BUFFERS: gl.constexpr, COMPUTE_WARPS: gl.constexpr,
):  # fmt: skip
    """C = A + B, warp-specialized after Gluon's tutorial 08: a 1-warp TMA producer, the default
    partition's warps as the consumer, and a 1-warp TMA store partition, linked by mbarriers."""
    layout: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [1, COMPUTE_WARPS], [1, 0])
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [NUM_LOAD_BUFFERS, XBLOCK, YBLOCK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [NUM_LOAD_BUFFERS, XBLOCK, YBLOCK], b_desc.layout)
    c_bufs = gl.allocate_shared_memory(c_desc.dtype, [NUM_STORE_BUFFERS, XBLOCK, YBLOCK], c_desc.layout)
    load_empty_bars = gl.allocate_shared_memory(gl.int64, [NUM_LOAD_BUFFERS, 1], mbarrier.MBarrierLayout())
    load_ready_bars = gl.allocate_shared_memory(gl.int64, [NUM_LOAD_BUFFERS, 1], mbarrier.MBarrierLayout())
    c_empty_bars = gl.allocate_shared_memory(gl.int64, [NUM_STORE_BUFFERS, 1], mbarrier.MBarrierLayout())
    c_ready_bars = gl.allocate_shared_memory(gl.int64, [NUM_STORE_BUFFERS, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_LOAD_BUFFERS):
        mbarrier.init(load_empty_bars.index(i), count=1)
        mbarrier.init(load_ready_bars.index(i), count=1)
    for i in gl.static_range(NUM_STORE_BUFFERS):
        mbarrier.init(c_empty_bars.index(i), count=1)
        mbarrier.init(c_ready_bars.index(i), count=1)

    descs = (a_desc, b_desc, c_desc)
    barriers = (load_empty_bars, load_ready_bars, c_empty_bars, c_ready_bars)
    buffers = (a_bufs, b_bufs, c_bufs)
    xoff = gl.program_id(0) * XBLOCK
    gl.warp_specialize(
        [
            (_ws_compute_partition, (barriers, buffers, ynumel, YBLOCK, layout)),
            (_ws_load_partition, (descs, barriers, buffers, xoff, ynumel, YBLOCK)),
            (_ws_store_partition, (descs, barriers, buffers, xoff, ynumel, YBLOCK)),
        ],
        [1, 1],
        [24, 24],
    )


# --- microbenchmarks ------------------------------------------------------------------------


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


# Spin until %clock64 has advanced by at least $1 cycles; return the cycles really spun. Labels
# inside a { } block are local to it, so the text may appear more than once in a kernel.
SPIN_PTX = tl.constexpr("""{
.reg .u64 spin_t0, spin_t1, spin_d;
.reg .pred spin_p;
mov.u64 spin_t0, %clock64;
SPIN_AGAIN:
mov.u64 spin_t1, %clock64;
sub.u64 spin_d, spin_t1, spin_t0;
setp.lt.u64 spin_p, spin_d, $1;
@spin_p bra SPIN_AGAIN;
mov.u64 spin_t1, %clock64;
sub.u64 $0, spin_t1, spin_t0;
}""")


@triton.jit(do_not_specialize=["n_cycles"])
def spin_kernel(out_ptr, n_cycles, BLOCK: tl.constexpr):
    """One scope around a spin of n_cycles; every thread stores the cycles it really spun, from
    its first clock read to one after the loop, so that the loop's exit counts as spun."""
    lanes = tl.arange(0, BLOCK)
    target = tl.zeros([BLOCK], dtype=tl.int64) + n_cycles
    with scopes.scope("spin"):
        spun = tl.inline_asm_elementwise(SPIN_PTX, "=l,l", [target], dtype=tl.int64, is_pure=False, pack=1)
    tl.store(out_ptr + tl.program_id(0) * BLOCK + lanes, spun)


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


# --- problems -------------------------------------------------------------------------------


@dataclass
class Launch:
    """One launch's inputs: every kernel parameter in order (constexpr values included), the
    tensors the kernel writes, and a function computing their reference values with torch."""

    args: tuple
    grid: tuple[int, int, int]
    outputs: list[Any]
    reference: Callable[[], list[Any]]


@dataclass(frozen=True)
class Problem:
    """One kernel at one size."""

    name: str
    fn: Any  # a JITFunction (Triton DSL) or a GluonJITFunction
    kind: str
    scopes: str  # where the scopes are, as the report prints it
    size: str
    constexprs: dict[str, Any]
    options: dict[str, int]  # num_warps, num_stages, maxnreg
    signature: dict[str, str]  # types of the runtime arguments, for a compile without a GPU
    grid: tuple[int, int, int]
    make_launch: Callable[[], Launch]
    # records each warp writes in one launch, shape (CTAs, warps per CTA), given the compiled
    # kernel's warps per CTA (warp specialization adds warps to num_warps)
    records_per_warp: Callable[[int], np.ndarray]
    tolerance: tuple[float, float]  # (atol, rtol) against the torch reference

    def ordered_args(self, values: dict[str, Any]) -> tuple:
        """The kernel's arguments in parameter order; ``values`` holds the runtime ones."""
        values = {**values, **self.constexprs}
        names = list(self.fn.arg_names)
        if set(values) != set(names):
            raise ValueError(
                f"{self.name}: arguments {sorted(values)} do not match the kernel's parameters {names}"
            )
        return tuple(values[name] for name in names)


def _uniform(grid: tuple[int, int, int], per_warp: int) -> Callable[[int], np.ndarray]:
    ctas = grid[0] * grid[1] * grid[2]
    return lambda warps: np.full((ctas, warps), per_warp, dtype=np.int64)


def _strided_count(start: np.ndarray, stop: int, step: int) -> np.ndarray:
    """len(range(s, stop, step)) for every s in ``start``."""
    return np.maximum(0, -(-(stop - start) // step))


def gelu(n: int) -> Problem:
    block = 4096
    grid = (n // block, 1, 1)

    def make_launch() -> Launch:
        import torch

        x = torch.randn(n, device="cuda")
        y = torch.empty_like(x)
        return Launch(
            problem.ordered_args({"x_ptr": x, "y_ptr": y, "n_elements": n}),
            grid,
            [y],
            lambda: [torch.nn.functional.gelu(x, approximate="tanh")],
        )

    problem = Problem(
        name="gelu",
        fn=gelu_kernel,
        kind="elementwise, memory-bound",
        scopes="load, compute, store: one of each per CTA",
        size=f"{n:,} fp32, BLOCK={block}",
        constexprs={"BLOCK": block},
        options={"num_warps": 4},
        signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "n_elements": "i32"},
        grid=grid,
        make_launch=make_launch,
        records_per_warp=_uniform(grid, 6),
        tolerance=(1e-5, 1e-5),
    )
    return problem


def softmax(quick: bool, num_sms: int) -> Problem:
    n_rows, n_cols = (4096 if quick else 32768), 4096
    programs = min(n_rows, 4 * num_sms)
    grid = (programs, 1, 1)

    def make_launch() -> Launch:
        import torch

        x = torch.randn(n_rows, n_cols, device="cuda", dtype=torch.float16)
        y = torch.empty_like(x)
        values = {"out_ptr": y, "in_ptr": x, "in_row_stride": x.stride(0), "out_row_stride": y.stride(0)}
        return Launch(
            problem.ordered_args({**values, "n_rows": n_rows, "n_cols": n_cols}),
            grid,
            [y],
            lambda: [torch.softmax(x.float(), dim=-1).half()],
        )

    def records(warps: int) -> np.ndarray:
        rows = _strided_count(np.arange(programs), n_rows, programs)
        return np.repeat((2 * rows)[:, None], warps, axis=1)

    problem = Problem(
        name="softmax",
        fn=softmax_kernel,
        kind="row reduction, persistent over rows",
        scopes="row: one per row, inside the row loop",
        size=f"{n_rows} x {n_cols} fp16, {programs} CTAs",
        constexprs={"BLOCK": triton.next_power_of_2(n_cols)},
        options={"num_warps": 8},
        signature={
            "out_ptr": "*fp16",
            "in_ptr": "*fp16",
            "in_row_stride": "i32",
            "out_row_stride": "i32",
            "n_rows": "i32",
            "n_cols": "i32",
        },
        grid=grid,
        make_launch=make_launch,
        records_per_warp=records,
        tolerance=(1e-3, 1e-2),
    )
    return problem


def matmul(quick: bool) -> Problem:
    m = n = k = 1024 if quick else 4096
    bm, bn, bk = 128, 128, 64
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn), 1, 1)

    def make_launch() -> Launch:
        import torch

        scale = k**-0.25  # keeps the outputs near unit variance
        a = torch.randn(m, k, device="cuda", dtype=torch.float16) * scale
        b = torch.randn(k, n, device="cuda", dtype=torch.float16) * scale
        c = torch.empty(m, n, device="cuda", dtype=torch.float16)
        values = {"a_ptr": a, "b_ptr": b, "c_ptr": c, "M": m, "N": n, "K": k}
        strides = {
            "stride_am": a.stride(0),
            "stride_ak": a.stride(1),
            "stride_bk": b.stride(0),
            "stride_bn": b.stride(1),
            "stride_cm": c.stride(0),
            "stride_cn": c.stride(1),
        }
        return Launch(problem.ordered_args({**values, **strides}), grid, [c], lambda: [a @ b])

    problem = Problem(
        name="matmul",
        fn=matmul_kernel,
        kind="tl.dot, compute-bound",
        scopes="k_step: one per K iteration, inside the K loop",
        size=f"{m}x{n}x{k} fp16, {bm}x{bn}x{bk} tiles, 8 warps, 3 stages",
        constexprs={"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
        options={"num_warps": 8, "num_stages": 3},
        signature={
            "a_ptr": "*fp16",
            "b_ptr": "*fp16",
            "c_ptr": "*fp16",
            "M": "i32",
            "N": "i32",
            "K": "i32",
            "stride_am": "i32",
            "stride_ak": "i32",
            "stride_bk": "i32",
            "stride_bn": "i32",
            "stride_cm": "i32",
            "stride_cn": "i32",
        },
        grid=grid,
        make_launch=make_launch,
        records_per_warp=_uniform(grid, 2 * triton.cdiv(k, bk)),
        tolerance=(2e-2, 1e-2),
    )
    return problem


# the axes of each attention tensor's strides, as the kernel's parameters name them
ATTENTION_STRIDE_AXES = {"q": "zhmk", "k": "zhnk", "v": "zhkn", "o": "zhmn"}


def attention(quick: bool, causal: bool) -> Problem:
    z, h, n_ctx, d = (1, 4, 1024, 128) if quick else (4, 32, 4096, 128)
    bm, bn = 128, 64
    grid = (n_ctx // bm, z * h, 1)

    def make_launch() -> Launch:
        import torch

        q, k, v = (torch.randn(z, h, n_ctx, d, device="cuda", dtype=torch.float16) * 0.5 for _ in range(3))
        o = torch.empty_like(q)
        sm_scale = d**-0.5
        values: dict[str, Any] = {
            "Q": q,
            "K": k,
            "V": v,
            "Out": o,
            "sm_scale": sm_scale,
            "H": h,
            "N_CTX": n_ctx,
        }
        for prefix, t in (("q", q), ("k", k), ("v", v), ("o", o)):
            axes = ATTENTION_STRIDE_AXES[prefix]
            values.update({f"stride_{prefix}{axis}": s for axis, s in zip(axes, t.stride(), strict=True)})

        def reference() -> list[Any]:
            return [
                torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale)
            ]

        return Launch(problem.ordered_args(values), grid, [o], reference)

    def records(warps: int) -> np.ndarray:
        start_m = np.arange(grid[0] * grid[1]) % grid[0]  # linear CTA id = x + y * nx
        blocks = (start_m + 1) * (bm // bn) if causal else np.full(start_m.shape, n_ctx // bn)
        return np.repeat((2 * blocks)[:, None], warps, axis=1)

    strides = {f"stride_{p}{axis}": "i32" for p, axes in ATTENTION_STRIDE_AXES.items() for axis in axes}
    problem = Problem(
        name="attention_causal" if causal else "attention",
        fn=attention_fwd_kernel,
        kind="flash-attention forward, " + ("causal" if causal else "non-causal"),
        scopes="kv_block: one per KV block, inside the KV loop(s)",
        size=f"Z={z} H={h} N={n_ctx} D={d} fp16, BLOCK_M={bm} BLOCK_N={bn}, 8 warps, 3 stages",
        constexprs={"HEAD_DIM": d, "BLOCK_M": bm, "BLOCK_N": bn, "STAGE": 3 if causal else 1},
        options={"num_warps": 8, "num_stages": 3},
        signature={
            "Q": "*fp16",
            "K": "*fp16",
            "V": "*fp16",
            "Out": "*fp16",
            "sm_scale": "fp32",
            **strides,
            "H": "i32",
            "N_CTX": "i32",
        },
        grid=grid,
        make_launch=make_launch,
        records_per_warp=records,
        tolerance=(1e-2, 0.0),
    )
    return problem


def matmul_tma_persistent(quick: bool, num_sms: int) -> Problem:
    m = n = k = 1024 if quick else 4096
    bm, bn, bk = 128, 128, 64
    num_tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    programs = min(num_sms, num_tiles)
    grid = (programs, 1, 1)
    k_tiles = triton.cdiv(k, bk)

    def make_launch() -> Launch:
        import torch
        from triton.tools.tensor_descriptor import TensorDescriptor

        scale = k**-0.25
        a = torch.randn(m, k, device="cuda", dtype=torch.float16) * scale
        b = torch.randn(n, k, device="cuda", dtype=torch.float16) * scale
        c = torch.empty(m, n, device="cuda", dtype=torch.float16)
        values = {
            "a_desc": TensorDescriptor.from_tensor(a, [bm, bk]),
            "b_desc": TensorDescriptor.from_tensor(b, [bn, bk]),
            "c_desc": TensorDescriptor.from_tensor(c, [bm, bn]),
            "M": m,
            "N": n,
            "K": k,
        }
        return Launch(problem.ordered_args(values), grid, [c], lambda: [a @ b.T])

    def records(warps: int) -> np.ndarray:
        tiles = _strided_count(np.arange(programs), num_tiles, programs)
        return np.repeat((tiles * (2 + 2 * k_tiles))[:, None], warps, axis=1)

    problem = Problem(
        name="matmul_tma_persistent",
        fn=matmul_tma_persistent_kernel,
        kind="TMA descriptors (host), persistent",
        scopes="tile: one per output tile; k_step: one per K iteration inside it",
        size=f"{m}x{n}x{k} fp16, {bm}x{bn}x{bk} tiles, {programs} CTAs, 8 warps, 3 stages",
        constexprs={"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "NUM_SMS": programs},
        options={"num_warps": 8, "num_stages": 3},
        signature={
            "a_desc": f"tensordesc<fp16[{bm}, {bk}]>",
            "b_desc": f"tensordesc<fp16[{bn}, {bk}]>",
            "c_desc": f"tensordesc<fp16[{bm}, {bn}]>",
            "M": "i32",
            "N": "i32",
            "K": "i32",
        },
        grid=grid,
        make_launch=make_launch,
        records_per_warp=records,
        tolerance=(2e-2, 1e-2),
    )
    return problem


def ws_add(quick: bool) -> Problem:
    xnumel = ynumel = 2048 if quick else 16384
    xblock, yblock, compute_warps = 32, 128, 4
    grid = (xnumel // xblock, 1, 1)
    iterations = triton.cdiv(ynumel, yblock)
    layout = gl.NVMMASharedLayout.get_default_for([xblock, yblock], gl.float32)
    desc_type = f"tensordesc<fp32[{xblock}, {yblock}],{layout!r}>"

    def make_launch() -> Launch:
        import torch
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

        a = torch.randn(xnumel, ynumel, device="cuda")
        b = torch.randn(xnumel, ynumel, device="cuda")
        c = torch.empty_like(a)
        descs = {
            name: TensorDescriptor.from_tensor(t, [xblock, yblock], layout)
            for name, t in zip(("a_desc", "b_desc", "c_desc"), (a, b, c), strict=True)
        }
        return Launch(problem.ordered_args({**descs, "ynumel": ynumel}), grid, [c], lambda: [a + b])

    def records(warps: int) -> np.ndarray:
        # The default partition (the consumer) runs on warps 0..compute_warps-1. Triton 3.6 pads
        # the CTA to whole warpgroups and places the 1-warp workers last (seen on an H100): the
        # producer on warp warps-2, the store partition on warp warps-1; the padding records nothing.
        per_warp = np.zeros(warps, dtype=np.int64)
        per_warp[:compute_warps] = 2 * iterations
        per_warp[warps - 2 :] = 2 * iterations
        return np.tile(per_warp, (grid[0], 1))

    problem = Problem(
        name="gluon_ws_add",
        fn=ws_add_kernel,
        kind="Gluon, warp-specialized (TMA producer, consumer, TMA store)",
        scopes="produce (1 producer warp), consume (default partition), store (1 store warp): one per Y block",
        size=f"{xnumel}x{ynumel} fp32, {xblock}x{yblock} blocks, 3 load / 2 store buffers",
        constexprs={
            "XBLOCK": xblock,
            "YBLOCK": yblock,
            "NUM_LOAD_BUFFERS": 3,
            "NUM_STORE_BUFFERS": 2,
            "COMPUTE_WARPS": compute_warps,
        },
        options={"num_warps": compute_warps, "maxnreg": 128},
        signature={"a_desc": desc_type, "b_desc": desc_type, "c_desc": desc_type, "ynumel": "i32"},
        grid=grid,
        make_launch=make_launch,
        records_per_warp=records,
        tolerance=(0.0, 0.0),
    )
    return problem


def suite(quick: bool, num_sms: int) -> list[Problem]:
    """The benchmark suite, in report order."""
    return [
        # 64M floats (256 MiB each way, 16384 CTAs): Proton's global buffer, 64 KiB per 4-warp CTA,
        # faults past 2 GiB in all, so the elementwise kernel stays below 32768 CTAs.
        gelu(1 << (22 if quick else 26)),
        softmax(quick, num_sms),
        matmul(quick),
        attention(quick, causal=False),
        attention(quick, causal=True),
        matmul_tma_persistent(quick, num_sms),
        ws_add(quick),
    ]


# --- buffers sized from the code (issue 7): benchmarks/buffers.py ---------------------------


@triton.jit
def four_scopes_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    """(2x + 1)^2, memory-bound. Four straight-line scopes, each a begin and its end in one
    block: every warp writes four pair entries (eight records) per launch, a bound the compiler
    can see."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    with scopes.scope("load"):
        x = tl.load(x_ptr + offsets, mask=mask)
    with scopes.scope("scale"):
        y = x * 2.0 + 1.0
    with scopes.scope("square"):
        z = y * y
    with scopes.scope("store"):
        tl.store(out_ptr + offsets, z, mask=mask)


@triton.jit
def short_add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    """out = x + y with three straight-line scopes: a short kernel for host-side costs."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    with scopes.scope("load"):
        x = tl.load(x_ptr + offsets, mask=mask)
        y = tl.load(y_ptr + offsets, mask=mask)
    with scopes.scope("add"):
        z = x + y
    with scopes.scope("store"):
        tl.store(out_ptr + offsets, z, mask=mask)


@triton.jit
def tuned_add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    """out = x + y in one scope; ``tuned_add`` autotunes BLOCK and the warps."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    with scopes.scope("add"):
        x = tl.load(x_ptr + offsets, mask=mask)
        y = tl.load(y_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, x + y, mask=mask)


TUNED_ADD_SIGNATURE = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n_elements": "i32"}


def tuned_add_configs() -> list[triton.Config]:
    """Two configs far apart in speed on a large add: one warp of 64 elements per CTA against
    four warps of 2048, so that the choice does not depend on noise."""
    return [triton.Config({"BLOCK": 64}, num_warps=1), triton.Config({"BLOCK": 2048}, num_warps=4)]


def tuned_add():
    """A fresh autotuned add: a new JIT wrapper and an empty tuning cache each call."""
    fresh_kernel = triton.jit(tuned_add_kernel.fn)
    return triton.autotune(configs=tuned_add_configs(), key=["n_elements"])(fresh_kernel)


def _elementwise(
    name: str, fn: Any, ctas: int, block: int, num_warps: int, inputs: int, scope_names: tuple[str, ...]
) -> Problem:
    """An fp32 elementwise problem of ``ctas`` CTAs with straight-line scopes: 2 records each
    per warp. ``inputs`` is 1 (four_scopes: (2x + 1)^2) or 2 (x + y)."""
    n = ctas * block
    grid = (ctas, 1, 1)

    def make_launch() -> Launch:
        import torch

        tensors = [torch.randn(n, device="cuda") for _ in range(inputs)]
        out = torch.empty_like(tensors[0])
        names = ["x_ptr", "y_ptr"][:inputs]
        values = {**dict(zip(names, tensors, strict=True)), "out_ptr": out, "n_elements": n}

        def reference() -> list[Any]:
            return [(2.0 * tensors[0] + 1.0) ** 2 if inputs == 1 else tensors[0] + tensors[1]]

        return Launch(problem.ordered_args(values), grid, [out], reference)

    signature = {name: "*fp32" for name in ["x_ptr", "y_ptr"][:inputs]}
    problem = Problem(
        name=name,
        fn=fn,
        kind="elementwise, memory-bound",
        scopes=", ".join(scope_names) + ": straight-line, one of each per warp",
        size=f"{n:,} fp32, BLOCK={block}, {ctas} CTAs x {num_warps} warps",
        constexprs={"BLOCK": block},
        options={"num_warps": num_warps},
        signature={**signature, "out_ptr": "*fp32", "n_elements": "i32"},
        grid=grid,
        make_launch=make_launch,
        records_per_warp=_uniform(grid, 2 * len(scope_names)),
        tolerance=(1e-5, 1e-6),
    )
    return problem


def four_scopes(ctas: int = 16384) -> Problem:
    """The large grid of issue 7: 16384 CTAs x 8 warps x 4 pairs = 1,048,576 records a launch."""
    return _elementwise(
        "four_scopes", four_scopes_kernel, ctas, 2048, 8, 1, ("load", "scale", "square", "store")
    )


def short_add(ctas: int = 256) -> Problem:
    """A short kernel for host-side costs and CUDA graphs: 256 CTAs x 4 warps, 3 scopes."""
    return _elementwise("short_add", short_add_kernel, ctas, 512, 4, 2, ("load", "add", "store"))


def buffer_problems() -> list[Problem]:
    """The kernels benchmarks/buffers.py adds, for compile_check.py."""
    return [four_scopes(), short_add()]


# --- microbenchmark settings, shared by run.py and compile_check.py --------------------------

MICRO_BLOCK = 128  # 4 warps, one element per thread
MICRO_OPTIONS = {"num_warps": 4}
RECORD_COST_UNROLL = 8
RECORD_COST_ITERS = (0, 64, 1024)
SPIN_CYCLES = (100, 300, 1000, 3000, 10000, 100000)

MICRO_KERNELS: dict[str, tuple[Any, dict[str, str], dict[str, Any]]] = {
    "record_cost": (
        record_cost_kernel,
        {"out_ptr": "*i64", "n_iters": "i32"},
        {"BLOCK": MICRO_BLOCK, "UNROLL": RECORD_COST_UNROLL},
    ),
    "spin": (spin_kernel, {"out_ptr": "*i64", "n_cycles": "i32"}, {"BLOCK": MICRO_BLOCK}),
    "grid_sync": (
        grid_sync_kernel,
        {"counter_ptr": "*i32", "arrived_ptr": "*i32", "n_ctas": "i32", "max_polls": "i32"},
        {},
    ),
}
"""name -> (kernel, runtime argument types, constexprs)."""
