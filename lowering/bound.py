"""How many entries one recording unit writes in one run of a kernel, at most, and why.

An entry is what ``convert-pik-to-pikgpu`` stores: a single record is one entry, and a begin
and its end in one straight-line block (``find_pairs``) are one entry, stored at the end. Two
analyses complement each other:

- on the PTX, exact in entries: the entry function's control-flow graph, each block weighted
  by the entries stored in it. If no weighted block lies on a cycle, the bound is the heaviest
  path from the entry; otherwise the PTX gives none, since it does not show trip counts;
- on Triton's TTIR, in records: markers are non-pure ``tt.elementwise_inline_asm`` ops, and a
  ``scf.for`` with constant bounds runs its body a known number of times, an ``scf.if`` one of
  its branches. Triton and LLVM keep how often a non-pure op runs, and an entry holds at least
  one record, so a bound on records bounds the entries too.

The bound is the PTX's where it has one, else the TTIR's, else unknown (None).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp

from proton_ik.dialect.pik import RecordOp
from proton_ik.lowering import ptx_text, ttir_text
from proton_ik.lowering.pik_to_pikgpu import find_pairs


@dataclass(frozen=True)
class EntryBound:
    """At most ``entries`` entries per unit and kernel run (None: unknown), and what decided it."""

    entries: int | None
    reason: str


def entry_records(module: ModuleOp, pair_scopes: bool) -> list[RecordOp]:
    """The records of a ``pik`` module (scope ids assigned) that store an entry: every record
    but the begins that ``convert-pik-to-pikgpu`` pairs with their end."""
    records = [o for o in module.walk() if isinstance(o, RecordOp)]
    begins = find_pairs(records) if pair_scopes else {}
    return [record for record in records if record not in begins]


def entry_bound(ptx: str, entries: Sequence[RecordOp], ttir: str | None = None) -> EntryBound:
    """The PTX's exact bound where it has one, else the TTIR's (when the compile had a TTIR)."""
    exact = ptx_bound(ptx, entries)
    if exact.entries is not None or ttir is None:
        return exact
    return ttir_bound(ttir)


# --- on the PTX --------------------------------------------------------------------------------


def ptx_bound(ptx: str, entries: Sequence[RecordOp]) -> EntryBound:
    """The most entries on any path through the kernel, if no entry is stored inside a loop."""
    lines = ptx.splitlines()
    flow = ptx_text.control_flow(lines, *ptx_text.entry_body(lines))
    weights = Counter(flow.blocks[record.site.value.data] for record in entries if record.site is not None)
    components = _components(flow.entry, flow.successors)
    loops = [c for c in components if len(c) > 1 or c[0] in flow.successors[c[0]]]
    locations = ptx_text.line_locations(lines)
    loop_of = {block: loop for loop in loops for block in loop}
    for record in entries:
        loop = None if record.site is None else loop_of.get(flow.blocks[record.site.value.data])
        if loop is not None:
            return EntryBound(
                None,
                f"{record.what} ({record.source_location}) is recorded inside "
                f"{_loop_name(locations[_back_edge(loop, flow)])}, whose trip count the PTX does not show",
            )
    most = _heaviest_path(flow.entry, components, flow.successors, weights)
    if loops:
        edges = sorted(_back_edge(loop, flow) for loop in loops)
        places = list(dict.fromkeys(_at(locations[line]) for line in edges))
        if len(places) == 1:
            return EntryBound(most, f"the loop {places[0]} records no scope: at most {_entries(most)}")
        return EntryBound(most, f"the loops {', '.join(places)} record no scope: at most {_entries(most)}")
    if any(len(flow.successors[b]) + (b in flow.returns) > 1 for c in components for b in c):
        return EntryBound(
            most, f"no loops: at most {_entries(most)} on the heaviest path through the branches"
        )
    return EntryBound(most, f"straight-line code: at most {_entries(most)}")


def _components(entry: int, successors: dict[int, list[int]]) -> list[list[int]]:
    """The strongly connected components reachable from ``entry`` (Tarjan's algorithm, without
    recursion: kernels have thousands of blocks), each listed after every component it reaches."""
    index: dict[int, int] = {entry: 0}
    low: dict[int, int] = {entry: 0}
    stack, on_stack = [entry], {entry}
    work = [(entry, iter(successors[entry]))]
    found: list[list[int]] = []
    while work:
        node, children = work[-1]
        for child in children:
            if child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(successors[child])))
                break
            if child in on_stack:
                low[node] = min(low[node], index[child])
        else:
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[int] = []
                while not component or component[-1] != node:
                    component.append(stack.pop())
                    on_stack.discard(component[-1])
                found.append(component)
    return found


def _heaviest_path(
    entry: int, components: list[list[int]], successors: dict[int, list[int]], weights: Counter
) -> int:
    """The most weight on a path from ``entry`` to an exit, over the DAG of components (whose
    cycles weigh nothing: the caller checked)."""
    component_of = {block: i for i, component in enumerate(components) for block in component}
    best: list[int] = []
    for i, component in enumerate(components):
        # Components come after every component they reach: those are already in ``best``.
        after = {component_of[s] for block in component for s in successors[block]} - {i}
        best.append(sum(weights[block] for block in component) + max((best[j] for j in after), default=0))
    return best[component_of[entry]]


def _back_edge(loop: list[int], flow: ptx_text.ControlFlow) -> int:
    """The line of a loop's last branch back into the loop. The loop's compare and increment
    sit there, with the line of its ``for``."""
    members = set(loop)
    return max(
        flow.transfers[b] for b in members if b in flow.transfers and members & set(flow.successors[b])
    )


def _at(location: str | None) -> str:
    return f"at {location}" if location else "at an unknown line"


def _loop_name(location: str | None) -> str:
    return f"the loop {_at(location)}"


def _entries(count: int) -> str:
    return "1 entry" if count == 1 else f"{count} entries"


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"


# --- on the TTIR -------------------------------------------------------------------------------

_FOR = re.compile(
    r"^(?:%[^=]*=\s*)?scf\.for\s+(?:unsigned\s+)?%[\w$.-]+\s*=\s*"
    r"(?P<lb>%[\w$.-]+)\s+to\s+(?P<ub>%[\w$.-]+)\s+step\s+(?P<step>%[\w$.-]+)"
)
_ALTERNATIVES = {"scf.if", "scf.index_switch"}  # run one of their regions, once
_ONCE = {"scf.execute_region"}  # runs its region once


class _Unbounded(Exception):
    """The TTIR gives no bound; the message says why."""


@dataclass(frozen=True)
class _Loop:
    location: str | None
    trips: int


class _RecordCounter:
    """Counts the records one run of a TTIR function writes, at most, and the loops it counted."""

    def __init__(self, function: ttir_text.Op, aliases: dict[str, str]):
        self.constants = ttir_text.integer_constants(function)
        self.aliases = aliases
        self.loops: list[_Loop] = []

    def where(self, op: ttir_text.Op) -> str | None:
        return ttir_text.source_line(op.loc, self.aliases)

    def region(self, ops: list[ttir_text.Op]) -> int:
        return sum(self.op(op) for op in ops)

    def op(self, op: ttir_text.Op) -> int:
        if ttir_text.marker_name(op) is not None:
            return 1
        if not op.regions:
            return 0
        position = len(self.loops)  # an enclosing loop is listed before the loops inside it
        inner = [self.region(region) for region in op.regions]
        if sum(inner) == 0:
            return 0  # a loop that records nothing may run any number of times
        if op.name in _ALTERNATIVES:
            return max(inner)
        if op.name in _ONCE:
            return sum(inner)
        if op.name == "scf.for":
            trips = self.trip_count(op)
            if trips is None:
                raise _Unbounded(
                    f"{_loop_name(self.where(op))} records scope '{_first_scope(op)}' and has a trip "
                    "count known only at run time"
                )
            self.loops.insert(position, _Loop(self.where(op), trips))
            return trips * inner[0]
        if op.name == "scf.while":
            raise _Unbounded(
                f"the while loop {_at(self.where(op))} records scope '{_first_scope(op)}' "
                "and runs a number of times known only at run time"
            )
        raise _Unbounded(
            f"scope '{_first_scope(op)}' is recorded inside {op.name} {_at(self.where(op))}, "
            "which proton_ik cannot count"
        )

    def trip_count(self, op: ttir_text.Op) -> int | None:
        """Iterations of an ``scf.for`` whose bounds and positive step are constants, else None."""
        match = _FOR.match(op.text)
        if match is None:
            return None
        lb, ub, step = (self.constants.get(match.group(k)) for k in ("lb", "ub", "step"))
        if lb is None or ub is None or step is None or step <= 0:
            return None
        return max(0, -(-(ub - lb) // step))


def _first_scope(op: ttir_text.Op) -> str:
    return next((name for inner in op.walk() if (name := ttir_text.marker_name(inner)) is not None), "?")


def ttir_bound(ttir: str) -> EntryBound:
    """The most records the kernel's TTIR function writes per run: an upper bound on entries."""
    functions = [
        op
        for top in ttir_text.parse_ops(ttir)
        for op in top.walk()
        if op.name == "tt.func" and op.text.startswith("tt.func public")
    ]
    if len(functions) != 1:
        return EntryBound(None, f"the TTIR has {len(functions)} public functions, not one kernel")
    counter = _RecordCounter(functions[0], ttir_text.loc_aliases(ttir))
    try:
        records = counter.region(functions[0].regions[0])
    except _Unbounded as unbounded:
        return EntryBound(None, str(unbounded))
    if not counter.loops:
        return EntryBound(records, f"no scope is recorded inside a loop: at most {_entries(records)}")
    if len(counter.loops) == 1:
        (loop,) = counter.loops
        return EntryBound(
            records, f"{_loop_name(loop.location)} runs {_times(loop.trips)}: at most {_entries(records)}"
        )
    loops = ", ".join(f"{_at(loop.location)} ({_times(loop.trips)})" for loop in counter.loops)
    return EntryBound(records, f"the loops {loops}: at most {_entries(records)}")
