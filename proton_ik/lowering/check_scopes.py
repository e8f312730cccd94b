"""``pik-check-scopes``: report only what is provably wrong with a kernel's scopes.

Enter and exit of one scope may sit in different branches or loop iterations (software
pipelining does that), so order is not checked. What is provably wrong:

- a scope that is exited but never entered anywhere in the kernel, or the reverse;
- more distinct scopes than the record tag can hold.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from proton_ik.contract.layout import MAX_SCOPES
from proton_ik.dialect.pik import RecordOp
from proton_ik.lowering.collect import kernel_of
from proton_ik.lowering.errors import ScopeError


@dataclass(frozen=True)
class CheckScopes(ModulePass):
    name = "pik-check-scopes"

    max_scopes: int = MAX_SCOPES

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        kernel = kernel_of(op)
        first: dict[tuple[str, str], RecordOp] = {}
        names: dict[str, RecordOp] = {}
        for record in (o for o in op.walk() if isinstance(o, RecordOp)):
            first.setdefault((record.scope.data, record.kind.data), record)
            names.setdefault(record.scope.data, record)
        for (name, kind), record in first.items():
            other = "begin" if kind == "end" else "end"
            if (name, other) in first:
                continue
            if kind == "end":
                raise ScopeError(
                    kernel,
                    name,
                    record.source_location,
                    "the scope is exited but never entered",
                    f'add pl.enter_scope("{name}") before it, or use `with pl.scope("{name}"):`',
                )
            raise ScopeError(
                kernel,
                name,
                record.source_location,
                "the scope is entered but never exited",
                f'add pl.exit_scope("{name}") where it ends, or use `with pl.scope("{name}"):`',
            )
        if len(names) > self.max_scopes:
            name, record = list(names.items())[self.max_scopes]
            raise ScopeError(
                kernel,
                name,
                record.source_location,
                f"the kernel has {len(names)} distinct scopes; a record tag holds at most {self.max_scopes}",
                "reuse scope names (one name per kind of work, not per iteration)",
            )
