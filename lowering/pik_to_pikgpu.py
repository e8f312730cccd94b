"""``convert-pik-to-pikgpu``: from what to record to how to record it.

Each ``pik.record`` becomes a ``pikgpu.read_clock`` and a ``pikgpu.store_record`` of the tag
(scope id, begin/end). The module gets a ``pikgpu.segment_setup`` first, carrying the buffer
layout for the mode (granularity, records per unit as a keep-newest ring), and a
``pikgpu.finalize`` last.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from proton_ik.dialect.pik import RecordOp
from proton_ik.dialect.pikgpu import FinalizeOp, ReadClockOp, SegmentSetupOp, StoreRecordOp
from proton_ik.layout import BufferLayout, Granularity, make_tag


class LowerRecord(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: RecordOp, rewriter: PatternRewriter) -> None:
        if op.scope_id is None:
            raise ValueError("convert-pik-to-pikgpu needs scope ids: run pik-assign-scope-ids first")
        site = None if op.site is None else op.site.value.data
        clock = ReadClockOp(site)
        store = StoreRecordOp(clock.clock, make_tag(op.scope_id.value.data, op.is_end), site)
        rewriter.replace(op, [clock, store], new_results=[])


@dataclass(frozen=True)
class ConvertPikToPikGPU(ModulePass):
    name = "convert-pik-to-pikgpu"

    granularity: str = Granularity.WARP.value
    capacity: int = 1024
    num_warps: int = 4

    def layout(self) -> BufferLayout:
        granularity = Granularity(self.granularity)
        warps_per_unit = granularity.warps_per_unit(self.num_warps)
        if self.num_warps % warps_per_unit:
            raise ValueError(
                f"granularity={self.granularity} needs a multiple of {warps_per_unit} warps, "
                f"the kernel has {self.num_warps}"
            )
        return BufferLayout(units=self.num_warps // warps_per_unit, capacity=self.capacity)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(LowerRecord(), apply_recursively=False).rewrite_module(op)
        block = op.body.block
        setup = SegmentSetupOp(Granularity(self.granularity), self.layout())
        if block.first_op is None:
            block.add_op(setup)
        else:
            block.insert_op_before(setup, block.first_op)
        block.add_op(FinalizeOp())
