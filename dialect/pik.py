"""The ``pik`` dialect: *what* a kernel asks to record.

A kernel's annotations become a module of ``pik.record`` ops in program order. The
``pik-assign-scope-ids`` pass adds one ``pik.scope`` op per distinct name: the name table
(scopes, events and marks share it, each name with one kind).

    builtin.module attributes {pik.kernel = "matmul"} {
      pik.scope 0 "k_step" {line = 41 : i64}
      pik.scope 1 "tma" {instances = 2 : i64, kind = "event", line = 40 : i64}
      pik.record "begin" "k_step" {line = 41 : i64, scope_id = 0 : i64, site = 212 : i64}
      pik.record "event_start" "tma" {index_reg = "%r7", instances = 2 : i64, scope_id = 1 : i64}
      pik.record "mark" "tile" {predicate = "%r9", value = "%r4", value_type = "i32"}
      pik.record "end" "k_step" {line = 44 : i64, scope_id = 0 : i64, site = 251 : i64}
    }

Runtime operands are PTX registers of the kernel, named where the marker sits: ``predicate``
(nothing is recorded where it is 0), ``index_reg`` (an event's instance) and ``value`` (a mark's
32 bits). In a marker's text, before LLVM names them, they are inline-asm operands (``"$1"``).
"""

from __future__ import annotations

import re

from xdsl.dialects.builtin import IntegerAttr, StringAttr, i64
from xdsl.ir import Attribute, Dialect
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
)
from xdsl.utils.exceptions import VerifyException

from proton_ik.contract.metadata import NAME_KINDS
from proton_ik.contract.names import scope_name_problem
from proton_ik.contract.tags import MAX_EVENT_INSTANCES, MAX_SCOPES, RecordKind, ValueType

SCOPE_KINDS = ("begin", "end")
EVENT_KINDS = ("event_start", "event_end")
MARK_KINDS = ("mark",)
RECORD_KINDS = (*SCOPE_KINDS, *EVENT_KINDS, *MARK_KINDS)
VALUE_TYPES = {"i32": ValueType.INT32, "u32": ValueType.UINT32, "f32": ValueType.FLOAT32}
OPERANDS = ("predicate", "index_reg", "value")  # properties that name a PTX register
# A PTX register as LLVM names it (%r12, %rd3), or an inline-asm operand before it does ($1).
_REGISTER = re.compile(r"^(?:%[A-Za-z_][\w$]*|\$[0-9]+)$")


def _verify_name(name: str) -> None:
    problem = scope_name_problem(name)
    if problem:
        raise VerifyException(problem)


def name_kind(record_kind: str) -> str:
    """What a record's name names: "scope", "event" or "mark" (``metadata.NAME_KINDS``)."""
    return "scope" if record_kind in SCOPE_KINDS else "event" if record_kind in EVENT_KINDS else "mark"


@irdl_op_definition
class RecordOp(IRDLOperation):
    """Record a scope's begin or end, an event's start or end, or a mark, at this point.

    ``site`` is the marker's line in the kernel's PTX, ``block`` the straight-line stretch of
    PTX it sits in (no label or branch between two records of one block), ``line`` its source
    line, ``scope_id`` its row in the name table (set by ``pik-assign-scope-ids``). An event
    has ``instances`` and its instance as a constant ``index`` or a register ``index_reg``; a
    mark with a ``value`` register has its ``value_type``; any record may have a ``predicate``.

        pik.record "begin" "load" {line = 12 : i64, site = 80 : i64}
        pik.record "event_end" "tma" {index = 1 : i64, instances = 2 : i64, predicate = "%r3"}
    """

    name = "pik.record"

    kind = prop_def(StringAttr)
    scope = prop_def(StringAttr)
    line = opt_prop_def(IntegerAttr)
    file = opt_prop_def(StringAttr)
    site = opt_prop_def(IntegerAttr)
    block = opt_prop_def(IntegerAttr)
    scope_id = opt_prop_def(IntegerAttr)
    instances = opt_prop_def(IntegerAttr)
    index = opt_prop_def(IntegerAttr)
    index_reg = opt_prop_def(StringAttr)
    value = opt_prop_def(StringAttr)
    value_type = opt_prop_def(StringAttr)
    predicate = opt_prop_def(StringAttr)

    assembly_format = "$kind $scope attr-dict"
    irdl_options = (ParsePropInAttrDict(),)

    def __init__(
        self,
        kind: str,
        scope: str,
        *,
        line: int | None = None,
        file: str | None = None,
        site: int | None = None,
        block: int | None = None,
        scope_id: int | None = None,
        instances: int | None = None,
        index: int | None = None,
        index_reg: str | None = None,
        value: str | None = None,
        value_type: str | None = None,
        predicate: str | None = None,
    ):
        properties: dict[str, Attribute] = {"kind": StringAttr(kind), "scope": StringAttr(scope)}
        numbers = {
            "line": line, "site": site, "block": block, "scope_id": scope_id, "instances": instances,
            "index": index,
        }  # fmt: skip
        texts = {"file": file, "index_reg": index_reg, "value": value, "value_type": value_type}
        for key, number in numbers.items():
            if number is not None:
                properties[key] = IntegerAttr(number, i64)
        for key, text in {**texts, "predicate": predicate}.items():
            if text is not None:
                properties[key] = StringAttr(text)
        super().__init__(properties=properties)

    @property
    def assigned_id(self) -> int:
        """The scope id that ``pik-assign-scope-ids`` gave this record."""
        if self.scope_id is None:
            raise ValueError(
                f"pik.record {self.scope.data!r} has no scope id: run pik-assign-scope-ids first"
            )
        return self.scope_id.value.data

    @property
    def is_end(self) -> bool:
        return self.kind.data in ("end", "event_end")

    @property
    def name_kind(self) -> str:
        """ "scope", "event" or "mark": which kind of name this record's name is."""
        return name_kind(self.kind.data)

    @property
    def record_kind(self) -> RecordKind:
        """The kind its tag carries (a mark with a value is a ``VALUE``)."""
        kinds = {"scope": RecordKind.SCOPE, "event": RecordKind.EVENT}
        return kinds.get(self.name_kind, RecordKind.VALUE if self.value is not None else RecordKind.MARK)

    @property
    def event_instances(self) -> int:
        return 1 if self.instances is None else self.instances.value.data

    @property
    def registers(self) -> dict[str, str]:
        """The PTX registers this record reads, by role (``OPERANDS``)."""
        return {
            key: attr.data for key in OPERANDS if isinstance(attr := self.properties.get(key), StringAttr)
        }

    @property
    def pairable(self) -> bool:
        """Whether its begin or end may share one entry with its partner: a scope's, unpredicated."""
        return self.name_kind == "scope" and self.predicate is None

    @property
    def what(self) -> str:
        """How errors name it: ``scope 'load'``, ``event 'tma'``, ``mark 'tile'``."""
        return f"{self.name_kind} '{self.scope.data}'"

    @property
    def source_location(self) -> str:
        """``file:line`` for error messages, as precise as the IR knows."""
        line = "?" if self.line is None else str(self.line.value.data)
        return f"{self.file.data if self.file else '<kernel>'}:{line}"

    def verify_(self) -> None:
        kind = self.kind.data
        if kind not in RECORD_KINDS:
            raise VerifyException(f"pik.record kind must be one of {RECORD_KINDS}, got {kind!r}")
        _verify_name(self.scope.data)
        if self.scope_id is not None and not 0 <= self.scope_id.value.data < MAX_SCOPES:
            raise VerifyException(f"scope_id {self.scope_id.value.data} is outside [0, {MAX_SCOPES})")
        for key, register in self.registers.items():
            if not _REGISTER.match(register):
                raise VerifyException(
                    f"{self.what}: {key} = {register!r} is not a PTX register or an asm operand"
                )
        event = kind in EVENT_KINDS
        for key in ("instances", "index", "index_reg"):
            if not event and key in self.properties:
                raise VerifyException(f"{self.what}: {key} belongs to event records, not {kind!r}")
        if kind not in MARK_KINDS and self.value is not None:
            raise VerifyException(f"{self.what}: only a mark records a value")
        if (self.value is None) != (self.value_type is None):
            raise VerifyException(f"{self.what}: a value and its value_type come together")
        if self.value_type is not None and self.value_type.data not in VALUE_TYPES:
            raise VerifyException(
                f"{self.what}: value_type must be one of {list(VALUE_TYPES)}, got {self.value_type.data!r}"
            )
        if event:
            self._verify_index()

    def _verify_index(self) -> None:
        instances = self.event_instances
        if not 1 <= instances <= MAX_EVENT_INSTANCES:
            raise VerifyException(f"{self.what}: instances = {instances} is outside 1..{MAX_EVENT_INSTANCES}")
        if self.index is not None and self.index_reg is not None:
            raise VerifyException(f"{self.what}: a constant index and an index register exclude each other")
        if self.index is not None and not 0 <= self.index.value.data < instances:
            raise VerifyException(
                f"{self.what}: index {self.index.value.data} is outside the {instances} declared instances"
            )


@irdl_op_definition
class ScopeOp(IRDLOperation):
    """One row of the kernel's name table: id, name and the source line and file of its first record; for
    a name that is not a scope's, its ``kind`` ("event", "mark") and an event's ``instances``.

    pik.scope 0 "load" {line = 12 : i64}
    pik.scope 1 "tma" {instances = 4 : i64, kind = "event", line = 30 : i64}
    """

    name = "pik.scope"

    scope_id = prop_def(IntegerAttr)
    scope = prop_def(StringAttr)
    line = opt_prop_def(IntegerAttr)
    file = opt_prop_def(StringAttr)
    kind = opt_prop_def(StringAttr)
    instances = opt_prop_def(IntegerAttr)

    assembly_format = "$scope_id $scope attr-dict"
    irdl_options = (ParsePropInAttrDict(),)

    def __init__(
        self,
        scope_id: int,
        scope: str,
        line: int | None = None,
        kind: str = "scope",
        instances: int | None = None,
        file: str | None = None,
    ):
        properties: dict[str, Attribute] = {
            "scope_id": IntegerAttr(scope_id, i64),
            "scope": StringAttr(scope),
        }
        if line is not None:
            properties["line"] = IntegerAttr(line, i64)
        if file is not None:
            properties["file"] = StringAttr(file)
        if kind != "scope":
            properties["kind"] = StringAttr(kind)
        if instances is not None:
            properties["instances"] = IntegerAttr(instances, i64)
        super().__init__(properties=properties)

    @property
    def name_kind(self) -> str:
        return "scope" if self.kind is None else self.kind.data

    def verify_(self) -> None:
        _verify_name(self.scope.data)
        if not 0 <= self.scope_id.value.data < MAX_SCOPES:
            raise VerifyException(f"scope id {self.scope_id.value.data} is outside [0, {MAX_SCOPES})")
        if self.name_kind not in NAME_KINDS:
            raise VerifyException(f"pik.scope kind must be one of {NAME_KINDS}, got {self.name_kind!r}")
        if self.instances is not None and (
            self.name_kind != "event" or not 1 <= self.instances.value.data <= MAX_EVENT_INSTANCES
        ):
            raise VerifyException(
                f"pik.scope {self.scope.data!r}: instances (1..{MAX_EVENT_INSTANCES}) belong to events only"
            )


Pik = Dialect("pik", [RecordOp, ScopeOp], [])
