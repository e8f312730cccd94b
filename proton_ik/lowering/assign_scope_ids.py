"""``pik-assign-scope-ids``: build the scope table and give every record its scope id.

Ids follow the order in which names first appear in the program. Each name gets one
``pik.scope`` op (id, name, source line of its first record) at the top of the module.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.passes import ModulePass

from proton_ik.dialect.pik import RecordOp, ScopeOp


@dataclass(frozen=True)
class AssignScopeIds(ModulePass):
    name = "pik-assign-scope-ids"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for old in [o for o in op.walk() if isinstance(o, ScopeOp)]:
            old.detach()
            old.erase()
        table: dict[str, ScopeOp] = {}
        for record in [o for o in op.walk() if isinstance(o, RecordOp)]:
            name = record.scope.data
            if name not in table:
                line = record.line.value.data if record.line is not None else None
                table[name] = ScopeOp(len(table), name, line)
            record.properties["scope_id"] = IntegerAttr(table[name].scope_id.value.data, i64)
        block = op.body.block
        anchor = block.first_op
        for scope_op in table.values():
            if anchor is None:
                block.add_op(scope_op)
            else:
                block.insert_op_before(scope_op, anchor)


def scope_table(module: ModuleOp) -> list[dict[str, object]]:
    """The scope table as plain data, for the kernel metadata."""
    return [
        {
            "id": o.scope_id.value.data,
            "name": o.scope.data,
            "line": None if o.line is None else o.line.value.data,
        }
        for o in module.walk()
        if isinstance(o, ScopeOp)
    ]
