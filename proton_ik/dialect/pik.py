"""The ``pik`` dialect: *what* a kernel asks to record.

A kernel's annotations become a module of ``pik.record`` ops in program order. The
``pik-assign-scope-ids`` pass adds one ``pik.scope`` op per distinct name: the scope table.

    builtin.module attributes {pik.kernel = "matmul"} {
      pik.scope 0 "k_step" {line = 41 : i64}
      pik.record "begin" "k_step" {line = 41 : i64, scope_id = 0 : i64, site = 212 : i64}
      pik.record "end" "k_step" {line = 44 : i64, scope_id = 0 : i64, site = 251 : i64}
    }
"""

from __future__ import annotations

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

from proton_ik.contract.layout import MAX_SCOPES
from proton_ik.contract.names import scope_name_problem

RECORD_KINDS = ("begin", "end")


def _verify_name(name: str) -> None:
    problem = scope_name_problem(name)
    if problem:
        raise VerifyException(problem)


@irdl_op_definition
class RecordOp(IRDLOperation):
    """Record the begin or the end of a named scope at this point of the program.

    ``site`` is the marker's line in the kernel's PTX, ``block`` the straight-line stretch of
    PTX it sits in (no label or branch between two records of one block), ``line`` its source
    line, ``scope_id`` its row in the scope table (set by ``pik-assign-scope-ids``).

        pik.record "begin" "load" {line = 12 : i64, site = 80 : i64}
    """

    name = "pik.record"

    kind = prop_def(StringAttr)
    scope = prop_def(StringAttr)
    line = opt_prop_def(IntegerAttr)
    file = opt_prop_def(StringAttr)
    site = opt_prop_def(IntegerAttr)
    block = opt_prop_def(IntegerAttr)
    scope_id = opt_prop_def(IntegerAttr)

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
    ):
        properties: dict[str, Attribute] = {"kind": StringAttr(kind), "scope": StringAttr(scope)}
        for key, value in (("line", line), ("site", site), ("block", block), ("scope_id", scope_id)):
            if value is not None:
                properties[key] = IntegerAttr(value, i64)
        if file is not None:
            properties["file"] = StringAttr(file)
        super().__init__(properties=properties)

    @property
    def assigned_id(self) -> int:
        """The scope id that ``pik-assign-scope-ids`` gave this record."""
        if self.scope_id is None:
            raise ValueError(f"pik.record {self.scope.data!r} has no scope id: run pik-assign-scope-ids first")
        return self.scope_id.value.data

    @property
    def is_end(self) -> bool:
        return self.kind.data == "end"

    @property
    def source_location(self) -> str:
        """``file:line`` for error messages, as precise as the IR knows."""
        line = "?" if self.line is None else str(self.line.value.data)
        return f"{self.file.data if self.file else '<kernel>'}:{line}"

    def verify_(self) -> None:
        if self.kind.data not in RECORD_KINDS:
            raise VerifyException(f"pik.record kind must be one of {RECORD_KINDS}, got {self.kind.data!r}")
        _verify_name(self.scope.data)
        if self.scope_id is not None and not 0 <= self.scope_id.value.data < MAX_SCOPES:
            raise VerifyException(f"scope_id {self.scope_id.value.data} is outside [0, {MAX_SCOPES})")


@irdl_op_definition
class ScopeOp(IRDLOperation):
    """One row of the kernel's scope table: id, name and the source line of its first record.

    pik.scope 0 "load" {line = 12 : i64}
    """

    name = "pik.scope"

    scope_id = prop_def(IntegerAttr)
    scope = prop_def(StringAttr)
    line = opt_prop_def(IntegerAttr)

    assembly_format = "$scope_id $scope attr-dict"
    irdl_options = (ParsePropInAttrDict(),)

    def __init__(self, scope_id: int, scope: str, line: int | None = None):
        properties: dict[str, Attribute] = {"scope_id": IntegerAttr(scope_id, i64), "scope": StringAttr(scope)}
        if line is not None:
            properties["line"] = IntegerAttr(line, i64)
        super().__init__(properties=properties)

    def verify_(self) -> None:
        _verify_name(self.scope.data)
        if not 0 <= self.scope_id.value.data < MAX_SCOPES:
            raise VerifyException(f"scope id {self.scope_id.value.data} is outside [0, {MAX_SCOPES})")


Pik = Dialect("pik", [RecordOp, ScopeOp], [])
