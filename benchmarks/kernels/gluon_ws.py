"""A Gluon kernel, warp-specialized on Hopper: a TMA producer, a consumer and a TMA store
partition, each with its own scope."""

from __future__ import annotations

import numpy as np
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from benchmarks import scopes
from benchmarks.kernels.problem import Launch, Problem


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
