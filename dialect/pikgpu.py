"""The ``pikgpu`` dialect: *how* a kernel records, one step above PTX.

``convert-pik-to-pikgpu`` turns each ``pik.record`` into a clock read and a record store, and
frames them with the unit's segment setup (prologue) and finalize (epilogue). A begin and its
end in one straight-line block become two clock reads and one ``pikgpu.store_pair``:

    builtin.module attributes {pik.kernel = "add"} {
      pikgpu.segment_setup {capacity = 1024 : i64, cta_bytes = 65792 : i64,
                            granularity = "warp", layout_version = 3 : i64, units = 4 : i64}
      %0 = pikgpu.read_clock {site = 80 : i64} : i32
      pikgpu.store_record %0 tag 0 {site = 80 : i64}
      %1 = pikgpu.read_clock {site = 90 : i64} : i32
      %2 = pikgpu.read_clock {site = 97 : i64} : i32
      pikgpu.store_pair %1, %2 tags 134217729, 2147483649 {site = 97 : i64}
      pikgpu.finalize
    }

In aggregate mode (``aggregate=on``) the segment holds per-scope statistics instead of a ring
(``aggregate_scopes`` on the setup), and each record becomes a ``pikgpu.aggregate_begin`` or
``pikgpu.aggregate_end`` of its scope id, which read the clock themselves: a begin's clock
waits in a register of its scope, wherever its end is.

      pikgpu.segment_setup {aggregate_scopes = 2 : i64, capacity = 0 : i64, ...}
      pikgpu.aggregate_begin scope 0 : i64 {site = 80 : i64}
      pikgpu.aggregate_end scope 0 : i64 {site = 97 : i64}
"""

from __future__ import annotations

from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, IntegerType, StringAttr, UnitAttr, i32, i64
from xdsl.ir import Attribute, Dialect, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException

from proton_ik.contract.layout import READ_VERSIONS, BufferLayout, Granularity
from proton_ik.contract.sampling import Sampling
from proton_ik.contract.tags import TAG_SCOPE_MASK, RecordKind, tag_is_end, tag_kind, tag_name_id, tag_paired
from proton_ik.dialect.pikgpu_operands import OPERAND_OPS


def _verify_tag(tag: int) -> None:
    if not 0 <= tag < 1 << 32:
        raise VerifyException(f"tag {tag} does not fit 32 bits")
    kind = tag_kind(tag)
    if kind not in {k.value for k in RecordKind}:
        raise VerifyException(f"tag {tag:#x} has an unknown record kind {kind}")


@irdl_op_definition
class SegmentSetupOp(IRDLOperation):
    """Compute this unit's segment from ``profile_scratch``, the linear CTA id and the warp, and
    read the unit's start times; it stores nothing (``pikgpu.finalize``, the epilogue, writes
    the CTA header and the unit header at the unit's exit: ``lowering.frame_ptx``). With
    sampling (``cta_stride``, ``cta_ids``, ``unit_ids``: ``contract.sampling``) the segment is at
    the CTA's and the unit's ranks among the sampled ones, and the others write nothing.

    pikgpu.segment_setup {..., cta_stride = 4 : i64, unit_ids = array<i64: 0, 2>}
    """

    name = "pikgpu.segment_setup"

    granularity = prop_def(StringAttr)
    units = prop_def(IntegerAttr)
    capacity = prop_def(IntegerAttr)
    cta_bytes = prop_def(IntegerAttr)
    layout_version = prop_def(IntegerAttr)
    aggregate_scopes = opt_prop_def(IntegerAttr)  # aggregate mode: scopes with statistics
    # Sampling (``contract.sampling``), only where not every CTA and unit records.
    cta_stride = opt_prop_def(IntegerAttr)
    cta_ids = opt_prop_def(DenseArrayBase)
    unit_ids = opt_prop_def(DenseArrayBase)
    # Segments sized at each launch: the capacity is read from the buffer pointer's low bits
    # (``contract.layout.CAPACITY_SHIFT_MASK``); ``capacity`` is the ring of a launch that does
    # not size them.
    launch_sized = opt_prop_def(UnitAttr)

    assembly_format = "attr-dict"
    irdl_options = (ParsePropInAttrDict(),)

    def __init__(self, granularity: Granularity, layout: BufferLayout, launch_sized: bool = False):
        properties = {
            "granularity": StringAttr(Granularity(granularity).value),
            "units": IntegerAttr(layout.units, i64),
            "capacity": IntegerAttr(layout.capacity, i64),
            "cta_bytes": IntegerAttr(layout.cta_bytes, i64),
            "layout_version": IntegerAttr(layout.version, i64),
        }
        if layout.aggregate:
            properties["aggregate_scopes"] = IntegerAttr(layout.aggregate_scopes, i64)
        sampling = layout.sampling
        if sampling.cta_stride != 1:
            properties["cta_stride"] = IntegerAttr(sampling.cta_stride, i64)
        for name, ids in (("cta_ids", sampling.cta_ids), ("unit_ids", sampling.unit_ids)):
            if ids:
                properties[name] = DenseArrayBase.from_list(i64, ids)
        if launch_sized:
            properties["launch_sized"] = UnitAttr()
        super().__init__(properties=properties)

    @property
    def sized_at_launch(self) -> bool:
        return self.launch_sized is not None

    @property
    def layout(self) -> BufferLayout:
        scopes = 0 if self.aggregate_scopes is None else self.aggregate_scopes.value.data
        sampling = Sampling(
            1 if self.cta_stride is None else self.cta_stride.value.data,
            () if self.cta_ids is None else tuple(self.cta_ids.get_values()),
            () if self.unit_ids is None else tuple(self.unit_ids.get_values()),
        )
        return BufferLayout(
            units=self.units.value.data,
            capacity=self.capacity.value.data,
            aggregate_scopes=scopes,
            sampling=sampling,
            version=self.layout_version.value.data,
        )

    @property
    def granularity_enum(self) -> Granularity:
        return Granularity(self.granularity.data)

    def verify_(self) -> None:
        if self.layout_version.value.data not in READ_VERSIONS:
            raise VerifyException(
                f"segment_setup was built for layout version {self.layout_version.value.data}, "
                f"this lowering writes versions {', '.join(map(str, READ_VERSIONS))}"
            )
        try:
            Granularity(self.granularity.data)
            layout = self.layout
        except ValueError as error:
            raise VerifyException(str(error)) from None
        if layout.cta_bytes != self.cta_bytes.value.data:
            raise VerifyException(
                f"cta_bytes = {self.cta_bytes.value.data} disagrees with the layout's {layout.cta_bytes} "
                f"for {layout.units} units of {layout.capacity} entries"
            )
        if self.launch_sized is not None and layout.aggregate:
            raise VerifyException(
                "an aggregate segment holds statistics per scope: it is not sized at launch"
            )
        block = self.parent_block()
        for op in block.ops if block is not None else ():
            _verify_mode_of(op, layout)


def _verify_mode_of(op, layout: BufferLayout) -> None:
    """A trace writes records, an aggregate segment statistics: never both in one kernel."""
    if isinstance(op, (StoreRecordOp, StorePairOp)) and layout.aggregate:
        raise VerifyException(f"{op.name} in an aggregate segment, which has no ring to store records in")
    if isinstance(op, (AggregateBeginOp, AggregateEndOp)):
        if not layout.aggregate:
            raise VerifyException(
                f"{op.name} needs a segment_setup with aggregate_scopes; this one is a trace of "
                f"{layout.capacity} entries per unit"
            )
        if op.scope_id >= layout.aggregate_scopes:
            raise VerifyException(
                f"{op.name} of scope {op.scope_id} is beyond the segment's {layout.aggregate_scopes} "
                "scopes' statistics"
            )


@irdl_op_definition
class ReadClockOp(IRDLOperation):
    """Read the low 32 bits of the SM clock (``%clock``).

    %0 = pikgpu.read_clock {site = 80 : i64} : i32
    """

    name = "pikgpu.read_clock"

    clock = result_def(IntegerType(32))
    site = opt_prop_def(IntegerAttr)

    assembly_format = "attr-dict `:` type($clock)"
    irdl_options = (ParsePropInAttrDict(),)

    def __init__(self, site: int | None = None):
        properties = {} if site is None else {"site": IntegerAttr(site, i64)}
        super().__init__(result_types=[i32], properties=properties)


@irdl_op_definition
class StoreRecordOp(IRDLOperation):
    """One lane of the unit stores ``{tag, clock}`` in slot ``count % capacity``, then counts it.

    pikgpu.store_record %0 tag 2147483648 {site = 97 : i64}
    """

    name = "pikgpu.store_record"

    clock = operand_def(IntegerType(32))
    tag = prop_def(IntegerAttr)
    site = opt_prop_def(IntegerAttr)

    assembly_format = "$clock `tag` $tag attr-dict"
    irdl_options = (ParsePropInAttrDict(),)

    def __init__(self, clock: SSAValue, tag: int, site: int | None = None):
        properties: dict[str, Attribute] = {"tag": IntegerAttr(tag, i64)}
        if site is not None:
            properties["site"] = IntegerAttr(site, i64)
        super().__init__(operands=[clock], properties=properties)

    @property
    def is_end(self) -> bool:
        return bool(tag_is_end(self.tag.value.data))

    def verify_(self) -> None:
        tag = self.tag.value.data
        _verify_tag(tag)
        if tag_paired(tag):
            raise VerifyException(f"tag {tag:#x} has the pair bit, which only pikgpu.store_pair sets")
        if tag_kind(tag) == RecordKind.VALUE:
            raise VerifyException(f"tag {tag:#x} is a value record's, which pikgpu.store_value stores")
        if not isinstance(self.clock.owner, ReadClockOp):
            raise VerifyException("pikgpu.store_record must store the result of a pikgpu.read_clock")


@irdl_op_definition
class StorePairOp(IRDLOperation):
    """Store a scope's begin and end at its end, as one 16-byte entry (layout version 2) or as
    one 8-byte slot where the duration and scope id fit it, else two (version 3); then count them.

    pikgpu.store_pair %1, %2 tags 134217729, 2147483649 {site = 97 : i64}
    """

    name = "pikgpu.store_pair"

    begin_clock = operand_def(IntegerType(32))
    end_clock = operand_def(IntegerType(32))
    begin_tag = prop_def(IntegerAttr)
    end_tag = prop_def(IntegerAttr)
    site = opt_prop_def(IntegerAttr)

    assembly_format = "$begin_clock `,` $end_clock `tags` $begin_tag `,` $end_tag attr-dict"
    irdl_options = (ParsePropInAttrDict(),)

    def __init__(
        self, begin_clock: SSAValue, end_clock: SSAValue, begin_tag: int, end_tag: int, site: int | None
    ):
        properties: dict[str, Attribute] = {
            "begin_tag": IntegerAttr(begin_tag, i64),
            "end_tag": IntegerAttr(end_tag, i64),
        }
        if site is not None:
            properties["site"] = IntegerAttr(site, i64)
        super().__init__(operands=[begin_clock, end_clock], properties=properties)

    def verify_(self) -> None:
        begin, end = self.begin_tag.value.data, self.end_tag.value.data
        _verify_tag(begin)
        _verify_tag(end)
        if tag_kind(begin | end) != RecordKind.SCOPE:
            raise VerifyException(f"tags {begin:#x}, {end:#x}: only scope records are stored as a pair")
        if tag_paired(end):
            raise VerifyException(f"end tag {end:#x} has the pair bit, which only a begin tag carries")
        if not tag_paired(begin) or tag_is_end(begin):
            raise VerifyException(f"begin tag {begin:#x} must be a begin with the pair bit set")
        if not tag_is_end(end) or tag_name_id(begin) != tag_name_id(end):
            raise VerifyException(f"end tag {end:#x} must end the scope that begin tag {begin:#x} begins")
        for clock in (self.begin_clock, self.end_clock):
            if not isinstance(clock.owner, ReadClockOp):
                raise VerifyException("pikgpu.store_pair must store the results of pikgpu.read_clock")


@irdl_op_definition
class FinalizeOp(IRDLOperation):
    """Before every return: write the unit's end clock64, %globaltimer, its slot count and its
    records' tally.

    pikgpu.finalize
    """

    name = "pikgpu.finalize"

    assembly_format = "attr-dict"


class _AggregateOp(IRDLOperation):
    """What the two aggregate ops share: a scope id and the marker site they replace."""

    scope = prop_def(IntegerAttr)
    site = opt_prop_def(IntegerAttr)

    assembly_format = "`scope` $scope attr-dict"
    irdl_options = (ParsePropInAttrDict(),)

    def __init__(self, scope: int, site: int | None = None):
        properties: dict[str, Attribute] = {"scope": IntegerAttr(scope, i64)}
        if site is not None:
            properties["site"] = IntegerAttr(site, i64)
        super().__init__(properties=properties)

    @property
    def scope_id(self) -> int:
        return self.scope.value.data

    def verify_(self) -> None:
        if not 0 <= self.scope_id <= TAG_SCOPE_MASK:
            raise VerifyException(f"{self.name}: scope id {self.scope_id} is not in 0..{TAG_SCOPE_MASK}")


@irdl_op_definition
class AggregateBeginOp(_AggregateOp):
    """Aggregate mode: read the clock into the scope's begin register and mark the scope open.

    pikgpu.aggregate_begin scope 3 : i64 {site = 80 : i64}
    """

    name = "pikgpu.aggregate_begin"


@irdl_op_definition
class AggregateEndOp(_AggregateOp):
    """Aggregate mode: read the clock; if the scope is open, close it and add the time since its
    latest begin to the unit's statistics of the scope (sum, max, min, histogram bin).

    pikgpu.aggregate_end scope 3 : i64 {site = 97 : i64}
    """

    name = "pikgpu.aggregate_end"


PikGPU = Dialect(
    "pikgpu",
    [
        SegmentSetupOp,
        ReadClockOp,
        StoreRecordOp,
        StorePairOp,
        AggregateBeginOp,
        AggregateEndOp,
        FinalizeOp,
        *OPERAND_OPS,
    ],
    [],
)
