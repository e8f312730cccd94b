"""``pikgpu`` ops that read the kernel's own registers: predicates, event indices and values.

A ``pik.record`` with runtime operands names PTX registers of the kernel (LLVM put them in its
marker). ``convert-pik-to-pikgpu`` reads each into an SSA value with ``pikgpu.register`` and
lowers the record to these ops, beside ``pikgpu.read_clock``:

    %0 = pikgpu.register "%r8" {site = 80 : i64} : i32
    pikgpu.guard %0 {site = 80 : i64}
    %1 = pikgpu.read_clock {site = 80 : i64} : i32
    %2 = pikgpu.register "%r9" {site = 80 : i64} : i32
    pikgpu.store_event %1 index %2 tag 268435457 {site = 80 : i64}
    %3 = pikgpu.read_clock {site = 95 : i64} : i32
    %4 = pikgpu.register "%r12" {site = 95 : i64} : i32
    pikgpu.store_value %3 value %4 tag 805306370 type "f32" {site = 95 : i64}

``pikgpu.guard`` makes everything its site writes conditional: where the register is 0 the
site stores nothing and counts nothing. An event with a constant index, a mark and a
predicated scope record use ``pikgpu.store_record`` (the index folded into its tag).
"""

from __future__ import annotations

import re

from xdsl.dialects.builtin import IntegerAttr, IntegerType, StringAttr, i32, i64
from xdsl.ir import Attribute, SSAValue
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

from proton_ik.contract.tags import RecordKind, ValueType, tag_index, tag_is_end, tag_kind, tag_paired

VALUE_TYPE_NAMES = {"i32": ValueType.INT32, "u32": ValueType.UINT32, "f32": ValueType.FLOAT32}
_PTX_REGISTER = re.compile(r"^%[A-Za-z_][\w$]*$")
_READ_CLOCK = "pikgpu.read_clock"


def _site(site: int | None) -> dict[str, Attribute]:
    return {} if site is None else {"site": IntegerAttr(site, i64)}


def _verify_kind(op: IRDLOperation, tag: int, kind: RecordKind) -> None:
    if not 0 <= tag < 1 << 32:
        raise VerifyException(f"{op.name}: tag {tag} does not fit 32 bits")
    if tag_kind(tag) != kind or tag_paired(tag):
        raise VerifyException(f"{op.name}: tag {tag:#x} must be an unpaired {kind.name} record's")


def _verify_from(op: IRDLOperation, value: SSAValue, name: str, role: str) -> None:
    if value.owner.name != name:  # type: ignore[union-attr]
        raise VerifyException(f"{op.name}: its {role} must be the result of a {name}")


@irdl_op_definition
class RegisterOp(IRDLOperation):
    """A 32-bit register of the kernel, read where the record's marker sat.

    %0 = pikgpu.register "%r8" {site = 80 : i64} : i32
    """

    name = "pikgpu.register"

    register = prop_def(StringAttr)
    site = opt_prop_def(IntegerAttr)
    result = result_def(IntegerType(32))

    assembly_format = "$register attr-dict `:` type($result)"
    irdl_options = (ParsePropInAttrDict(),)

    def __init__(self, register: str, site: int | None = None):
        super().__init__(result_types=[i32], properties={"register": StringAttr(register), **_site(site)})

    def verify_(self) -> None:
        if not _PTX_REGISTER.match(self.register.data):
            raise VerifyException(f"pikgpu.register: {self.register.data!r} is not a PTX register")


@irdl_op_definition
class GuardOp(IRDLOperation):
    """The records of ``site`` are written, and counted, only where ``predicate`` is not 0.

    pikgpu.guard %0 {site = 80 : i64}
    """

    name = "pikgpu.guard"

    predicate = operand_def(IntegerType(32))
    site = prop_def(IntegerAttr)

    assembly_format = "$predicate attr-dict"
    irdl_options = (ParsePropInAttrDict(),)

    def __init__(self, predicate: SSAValue, site: int):
        super().__init__(operands=[predicate], properties=_site(site))

    def verify_(self) -> None:
        _verify_from(self, self.predicate, RegisterOp.name, "predicate")


@irdl_op_definition
class StoreEventOp(IRDLOperation):
    """An event record whose instance is known at run time: ``{tag | index << 16, clock}``, the
    index taken modulo the tag's ``TAG_INDEX_MASK + 1`` instances; one single entry.

    pikgpu.store_event %1 index %2 tag 268435457 {site = 80 : i64}
    """

    name = "pikgpu.store_event"

    clock = operand_def(IntegerType(32))
    index = operand_def(IntegerType(32))
    tag = prop_def(IntegerAttr)
    site = opt_prop_def(IntegerAttr)

    assembly_format = "$clock `index` $index `tag` $tag attr-dict"
    irdl_options = (ParsePropInAttrDict(),)

    def __init__(self, clock: SSAValue, index: SSAValue, tag: int, site: int | None = None):
        super().__init__(operands=[clock, index], properties={"tag": IntegerAttr(tag, i64), **_site(site)})

    @property
    def is_end(self) -> bool:
        return bool(tag_is_end(self.tag.value.data))

    def verify_(self) -> None:
        tag = self.tag.value.data
        _verify_kind(self, tag, RecordKind.EVENT)
        if tag_index(tag):
            raise VerifyException(f"{self.name}: tag {tag:#x} has index bits; the index operand sets them")
        _verify_from(self, self.clock, _READ_CLOCK, "clock")
        _verify_from(self, self.index, RegisterOp.name, "index")


@irdl_op_definition
class StoreValueOp(IRDLOperation):
    """A value mark: one entry ``{tag, clock, value, value type}`` (``layout.VALUE_ENTRY_DTYPE``),
    counted as a single record.

    pikgpu.store_value %3 value %4 tag 805306370 type "f32" {site = 95 : i64}
    """

    name = "pikgpu.store_value"

    clock = operand_def(IntegerType(32))
    value = operand_def(IntegerType(32))
    tag = prop_def(IntegerAttr)
    value_type = prop_def(StringAttr)
    site = opt_prop_def(IntegerAttr)

    assembly_format = "$clock `value` $value `tag` $tag `type` $value_type attr-dict"
    irdl_options = (ParsePropInAttrDict(),)

    def __init__(self, clock: SSAValue, value: SSAValue, tag: int, value_type: str, site: int | None = None):
        properties = {"tag": IntegerAttr(tag, i64), "value_type": StringAttr(value_type), **_site(site)}
        super().__init__(operands=[clock, value], properties=properties)

    @property
    def type_code(self) -> int:
        return int(VALUE_TYPE_NAMES[self.value_type.data])

    def verify_(self) -> None:
        _verify_kind(self, self.tag.value.data, RecordKind.VALUE)
        if self.value_type.data not in VALUE_TYPE_NAMES:
            raise VerifyException(
                f"{self.name}: type must be one of {list(VALUE_TYPE_NAMES)}, got {self.value_type.data!r}"
            )
        _verify_from(self, self.clock, _READ_CLOCK, "clock")
        _verify_from(self, self.value, RegisterOp.name, "value")


OPERAND_OPS: list[type[IRDLOperation]] = [RegisterOp, GuardOp, StoreEventOp, StoreValueOp]
