"""``pik-check-scopes``: report only what is provably wrong with a kernel's scopes and events.

Enter and exit of one scope may sit in different branches or loop iterations (software
pipelining does that), so order is not checked; an event's start and end may also sit in
different warps (partitions), and are never paired here. What is provably wrong:

- a scope that is exited but never entered anywhere in the kernel, or the reverse; an event
  that is started but never ended anywhere, or the reverse;
- one name used for two kinds (a scope, an event, a mark), or an event declared with two
  numbers of instances;
- more distinct names than the record tag can hold.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from proton_ik.contract.tags import MAX_SCOPES
from proton_ik.dialect.pik import RecordOp
from proton_ik.lowering.collect import kernel_of
from proton_ik.lowering.errors import ScopeError

PARTNER = {"begin": "end", "end": "begin", "event_start": "event_end", "event_end": "event_start"}


def check_kinds(kernel: str, records: list[RecordOp], names: dict[str, RecordOp]) -> None:
    """One kind per name (a scope, an event or a mark), and one number of instances per event."""
    for record in records:
        first = names[record.scope.data]
        if record.name_kind != first.name_kind:
            raise ScopeError(
                kernel,
                record.scope.data,
                record.source_location,
                f"the name is used for a {record.name_kind} here and for a {first.name_kind} at "
                f"{first.source_location}",
                f"give the {record.name_kind} a name of its own",
                what=record.name_kind,
            )
        if record.name_kind == "event" and record.event_instances != first.event_instances:
            raise ScopeError(
                kernel,
                record.scope.data,
                record.source_location,
                f"the event has {record.event_instances} instances here and {first.event_instances} at "
                f"{first.source_location}",
                "declare it once (EVENT = pl.event(name, instances=N)) and pass that handle everywhere",
                what="event",
            )


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
        check_kinds(kernel, [o for o in op.walk() if isinstance(o, RecordOp)], names)
        for (name, kind), record in first.items():
            other = PARTNER.get(kind)
            if other is None or (name, other) in first:
                continue
            if record.name_kind == "event":
                started = kind == "event_start"
                raise ScopeError(
                    kernel,
                    name,
                    record.source_location,
                    f"the event is {'started but never ended' if started else 'ended but never started'} "
                    "anywhere in the kernel",
                    f"add pl.{'end' if started else 'start'}_event where it "
                    f"{'ends' if started else 'starts'} (in any warp), or record a pl.mark instead",
                    what="event",
                )
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
