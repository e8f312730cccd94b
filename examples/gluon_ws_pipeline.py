"""A warp-specialized Gluon pipeline on Hopper, with events from the TMA producer's issue to the
consumer's wait: row sums of a matrix, tile by tile.

    python examples/gluon_ws_pipeline.py            # on an H100: profile it, print the summary

The kernel runs two partitions linked by mbarriers around a ring of ``NUM_STAGES`` shared-memory
slots. The producer (one warp) waits for a slot to be free, then issues a TMA copy of the next
tile into it; the consumer (the default partition's warps) waits for the tile to land, sums its
rows and hands the slot back. Two events cross between them, one instance per slot
(``index=stage``), so that the slots in flight are told apart:

- ``tma_load``: started by the producer as it issues the copy, ended by each consumer warp when
  its wait returns: how long a tile takes to arrive, queueing included;
- ``slot_free``: started by each consumer warp as it is done with a slot, just before releasing
  it, ended by the producer when its wait for that slot returns: how long the producer is held
  back (predicates leave out the slots that are never refilled).

The consumer also records its work as a scope (``reduce``) and the barrier phase it waited for
as a value mark (``phase``).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

import proton_ik.language as pl

NUM_STAGES = gl.constexpr(3)
TMA_LOAD = pl.event("tma_load", instances=NUM_STAGES)
SLOT_FREE = pl.event("slot_free", instances=NUM_STAGES)
BLOCK_M, BLOCK_N, CONSUMER_WARPS = 64, 128, 4


@gluon.jit
def _producer(x_desc, bufs, ready, empty, n_tiles, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    row = gl.program_id(0) * BLOCK_M
    for i in range(n_tiles):
        stage = i % NUM_STAGES
        phase = i // NUM_STAGES & 1
        # mbarriers start with phase 1 complete, so the first wait on each empty slot passes.
        mbarrier.wait(empty.index(stage), phase ^ 1)
        pl.end_event(SLOT_FREE, index=stage, predicate=i >= NUM_STAGES)
        mbarrier.expect(ready.index(stage), x_desc.block_type.nbytes)
        pl.start_event(TMA_LOAD, index=stage)
        tma.async_copy_global_to_shared(x_desc, [row, i * BLOCK_N], ready.index(stage), bufs.index(stage))


@gluon.jit
def _consumer(bufs, ready, empty, out, n_tiles, BLOCK_M: gl.constexpr, layout: gl.constexpr):
    acc = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, layout))
    for i in range(n_tiles):
        stage = i % NUM_STAGES
        phase = i // NUM_STAGES & 1
        mbarrier.wait(ready.index(stage), phase)
        pl.end_event(TMA_LOAD, index=stage)
        pl.mark("phase", value=phase)
        with pl.scope("reduce"):
            acc += gl.sum(bufs.index(stage).load(layout), axis=1)
        # Before the release: every consumer warp records its start before the partition's warps
        # meet and one thread arrives, so no start can come after the producer's end.
        pl.start_event(SLOT_FREE, index=stage, predicate=i + NUM_STAGES < n_tiles)
        # Order the shared loads before the producer's next TMA write into this slot.
        fence_async_shared()
        mbarrier.arrive(empty.index(stage), count=1)
    rows = gl.program_id(0) * BLOCK_M + gl.arange(0, BLOCK_M, gl.SliceLayout(1, layout))
    gl.store(out + rows, acc)


@gluon.jit
def row_sum_kernel(
    x_desc, out, n_cols, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CONSUMER_WARPS: gl.constexpr
):
    """out[m] = sum(x[m, :]): one CTA per BLOCK_M rows, a TMA producer warp and a consumer."""
    layout: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [CONSUMER_WARPS, 1], [1, 0])
    bufs = gl.allocate_shared_memory(x_desc.dtype, [NUM_STAGES, BLOCK_M, BLOCK_N], x_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(NUM_STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    n_tiles = gl.cdiv(n_cols, BLOCK_N)
    gl.warp_specialize(
        [
            (_consumer, (bufs, ready, empty, out, n_tiles, BLOCK_M, layout)),
            (_producer, (x_desc, bufs, ready, empty, n_tiles, BLOCK_M, BLOCK_N)),
        ],
        [1],
        [24],
    )


def shared_layout():
    return gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_N], gl.float32)


def compile_for_hopper(mode: str = "instrumentation"):
    """Compile the kernel for sm_90 with proton_ik (no GPU needed): the CPU tests do this."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    import proton_ik

    signature = {
        "x_desc": f"tensordesc<fp32[{BLOCK_M}, {BLOCK_N}],{shared_layout()!r}>",
        "out": "*fp32",
        "n_cols": "i32",
        "BLOCK_M": "constexpr",
        "BLOCK_N": "constexpr",
        "CONSUMER_WARPS": "constexpr",
    }
    constexprs = {"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N, "CONSUMER_WARPS": CONSUMER_WARPS}
    source = GluonASTSource(row_sum_kernel, signature=signature, constexprs=constexprs)
    with proton_ik.instrumented(mode) as active:
        options = {"num_warps": CONSUMER_WARPS, "instrumentation_mode": active.knob}
        return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)


def main(rows: int = 8192, cols: int = 8192) -> None:
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    import proton_ik

    x = torch.randn(rows, cols, device="cuda")
    out = torch.empty(rows, device="cuda")
    x_desc = TensorDescriptor.from_tensor(x, [BLOCK_M, BLOCK_N], shared_layout())
    proton_ik.start("gluon_ws_pipeline")
    row_sum_kernel[(rows // BLOCK_M,)](
        x_desc, out, cols, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, CONSUMER_WARPS=CONSUMER_WARPS,
        num_warps=CONSUMER_WARPS,
    )  # fmt: skip
    torch.cuda.synchronize()
    result = proton_ik.finalize()
    torch.testing.assert_close(out, x.sum(dim=1), rtol=1e-4, atol=1e-2)
    print(result.summary())
    print("trace:", result.paths.get("pftrace"))


if __name__ == "__main__":
    main()
