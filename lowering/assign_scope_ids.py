"""``pik-assign-scope-ids``: build the scope table and give every record its scope id.

Scopes come first, then events and marks (a kernel's scope ids do not depend on its events);
within each, ids follow the order in which names first appear in the program. A name used for
two kinds takes its first record's kind (``pik-check-scopes`` refuses it). Each name gets one
``pik.scope`` op (id, name, source line and file of its first record) at the top of the module.
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
        records = [o for o in op.walk() if isinstance(o, RecordOp)]
        # Each name's first record in program order, but a scope's first begin where it has one:
        # a scope's line is its begin's (LLVM may place an end first, rotating a loop).
        first: dict[str, RecordOp] = {}
        for record in records:
            known = first.get(record.scope.data)
            if known is None or (known.kind.data == "end" and record.kind.data == "begin"):
                first[record.scope.data] = record
        table: dict[str, ScopeOp] = {}
        # Scopes first (stable), so a kernel's scope ids do not depend on its events and marks.
        for name, record in sorted(first.items(), key=lambda item: item[1].name_kind != "scope"):
            line = record.line.value.data if record.line is not None else None
            file = record.file.data if record.file is not None else None
            instances = record.event_instances if record.name_kind == "event" else None
            table[name] = ScopeOp(len(table), name, line, record.name_kind, instances, file=file)
        for record in records:
            record.properties["scope_id"] = IntegerAttr(table[record.scope.data].scope_id.value.data, i64)
        block = op.body.block
        anchor = block.first_op
        for scope_op in table.values():
            if anchor is None:
                block.add_op(scope_op)
            else:
                block.insert_op_before(scope_op, anchor)


def scope_table(module: ModuleOp) -> list[dict[str, object]]:
    """The scope table as plain data, for the kernel metadata (``Scope.to_dict``: a file only
    where the PTX named one)."""
    return [
        {
            "id": o.scope_id.value.data,
            "name": o.scope.data,
            "line": None if o.line is None else o.line.value.data,
            **({} if o.file is None else {"file": o.file.data}),
            **({} if o.name_kind == "scope" else {"kind": o.name_kind}),
            **({} if o.instances is None else {"instances": o.instances.value.data}),
        }
        for o in module.walk()
        if isinstance(o, ScopeOp)
    ]
