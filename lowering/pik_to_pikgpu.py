"""``convert-pik-to-pikgpu``: from what to record to how to record it.

Each ``pik.record`` becomes a ``pikgpu.read_clock`` and a ``pikgpu.store_record`` of the tag
(scope id, begin/end), except that a begin and its end in one straight-line block become two
clock reads and one ``pikgpu.store_pair`` at the end. The module gets a
``pikgpu.segment_setup`` first, carrying the buffer layout (granularity, entries per unit),
and a ``pikgpu.finalize`` last. In aggregate mode each record becomes a
``pikgpu.aggregate_begin`` or ``pikgpu.aggregate_end`` of its scope, and the layout holds one
table of statistics per scope of the module's scope table instead of a ring. Records of events,
marks and predicated records are lowered by ``events_to_pikgpu``.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from proton_ik.contract.layout import VERSION, BufferLayout, Granularity
from proton_ik.contract.sampling import Sampling
from proton_ik.contract.tags import make_tag
from proton_ik.dialect.pik import RecordOp, ScopeOp
from proton_ik.dialect.pikgpu import (
    AggregateBeginOp,
    AggregateEndOp,
    FinalizeOp,
    ReadClockOp,
    SegmentSetupOp,
    StorePairOp,
    StoreRecordOp,
)
from proton_ik.lowering import events_to_pikgpu
from proton_ik.mode import DEFAULT_RING_CAPACITY


def find_pairs(records: list[RecordOp]) -> dict[RecordOp, RecordOp]:
    """Begin -> end, for each begin whose matching end follows in the same straight-line block.

    Only there is every path from the begin sure to reach that end once, so only there may the
    begin's clock wait in a register for one 16-byte store at the end."""
    open_begins: dict[tuple[int, int], list[RecordOp]] = {}
    pairs: dict[RecordOp, RecordOp] = {}
    for record in records:
        if record.block is None or record.scope_id is None or not record.pairable:
            continue
        key = (record.block.value.data, record.scope_id.value.data)
        if not record.is_end:
            open_begins.setdefault(key, []).append(record)
        elif open_begins.get(key):
            pairs[open_begins[key].pop()] = record
    return pairs


def unit_count(granularity: Granularity, num_warps: int) -> int:
    """Recording units per CTA: warps, warpgroups or the one CTA."""
    warps_per_unit = granularity.warps_per_unit(num_warps)
    if num_warps % warps_per_unit:
        raise ValueError(
            f"granularity={granularity.value} needs a multiple of {warps_per_unit} warps, "
            f"the kernel has {num_warps}"
        )
    return num_warps // warps_per_unit


@dataclass(frozen=True)
class ConvertPikToPikGPU(ModulePass):
    name = "convert-pik-to-pikgpu"

    granularity: str = Granularity.WARP.value
    capacity: int = DEFAULT_RING_CAPACITY
    num_warps: int = 4
    pair_scopes: bool = True
    aggregate_scopes: int = 0  # aggregate mode: the scope table's size (the capacity is then 0)
    # Sampling (``contract.sampling``): a CTA stride or the CTAs listed, and the units that record.
    cta_stride: int = 1
    cta_ids: tuple[int, ...] = ()
    unit_ids: tuple[int, ...] = ()
    launch_sized: bool = False  # the capacity comes from the buffer pointer (``contract.layout``)
    layout_version: int = VERSION  # the buffer layout written (``contract.layout``)

    def layout(self) -> BufferLayout:
        sampling = Sampling(self.cta_stride, self.cta_ids, self.unit_ids)
        units = len(self.unit_ids) or unit_count(Granularity(self.granularity), self.num_warps)
        return BufferLayout(
            units=units,
            capacity=self.capacity,
            aggregate_scopes=self.aggregate_scopes,
            sampling=sampling,
            version=self.layout_version,
        )

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        records = [o for o in op.walk() if isinstance(o, RecordOp)]
        for record in records:
            if record.scope_id is None:
                raise ValueError("convert-pik-to-pikgpu needs scope ids: run pik-assign-scope-ids first")
        if self.aggregate_scopes:
            self._aggregate(records)
        else:
            self._trace(records)
        block = op.body.block
        setup = SegmentSetupOp(Granularity(self.granularity), self.layout(), self.launch_sized)
        if block.first_op is None:
            block.add_op(setup)
        else:
            block.insert_op_before(setup, block.first_op)
        block.add_op(FinalizeOp())

    def _aggregate(self, records: list[RecordOp]) -> None:
        for record in records:
            site = None if record.site is None else record.site.value.data
            scope_id = record.assigned_id
            if scope_id >= self.aggregate_scopes:
                raise ValueError(
                    f"convert-pik-to-pikgpu: scope id {scope_id} is beyond the {self.aggregate_scopes} "
                    "scopes of aggregate_scopes; give it the scope table's size"
                )
            lowered = AggregateEndOp(scope_id, site) if record.is_end else AggregateBeginOp(scope_id, site)
            Rewriter.replace_op(record, events_to_pikgpu.lower_aggregate(record, lowered), new_results=[])

    def _trace(self, records: list[RecordOp]) -> None:
        pairs = find_pairs(records) if self.pair_scopes else {}
        ends = {end: begin for begin, end in pairs.items()}
        begin_clocks: dict[RecordOp, ReadClockOp] = {}
        for record in records:
            if not events_to_pikgpu.is_plain_scope(record):
                Rewriter.replace_op(record, events_to_pikgpu.lower_trace(record), new_results=[])
                continue
            site = None if record.site is None else record.site.value.data
            scope_id = record.assigned_id
            clock = ReadClockOp(site)
            if record in pairs:
                begin_clocks[record] = clock
                lowered: list = [clock]
            elif record in ends:
                begin = begin_clocks.pop(ends[record])
                tags = make_tag(scope_id, False, paired=True), make_tag(scope_id, True)
                lowered = [clock, StorePairOp(begin.clock, clock.clock, *tags, site)]
            else:
                lowered = [clock, StoreRecordOp(clock.clock, make_tag(scope_id, record.is_end), site)]
            Rewriter.replace_op(record, lowered, new_results=[])


def scope_count(module: ModuleOp) -> int:
    """Entries of the module's scope table (``pik-assign-scope-ids`` numbers them from 0)."""
    return sum(1 for o in module.walk() if isinstance(o, ScopeOp))
