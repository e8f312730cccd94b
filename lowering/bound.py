"""How many ring slots one recording unit writes in one run of a kernel, at most, and why.

A slot (an "entry" below) is what ``convert-pik-to-pikgpu`` stores (``contract.layout``). In
layout version 3 a single record takes one slot, a value mark two, and a begin and its end in
one straight-line block (``find_pairs``) one or two, stored at the end: two at most. In
version 2 each of them is one entry. Two analyses complement each other:

- on the PTX, exact: the entry function's control-flow graph, each block weighted by the
  most slots stored in it. If no weighted block lies on a cycle, the bound is the heaviest
  path from the entry; otherwise the PTX gives none, since it does not show trip counts;
- on Triton's TTIR, in records: markers are non-pure ``tt.elementwise_inline_asm`` ops, and a
  ``scf.for`` with constant bounds runs its body a known number of times, an ``scf.if`` one of
  its branches. Triton and LLVM keep how often a non-pure op runs. In version 3 every record
  counts a slot and a mark two (it may carry a value); in version 2 a paired begin counts
  none, as its end stores the pair. A ``scf.for`` whose bounds are
  computed from the kernel's integer arguments, program ids and grid (a persistent loop over
  tiles, a K loop of ``cdiv(K, BLOCK_K)``) gives a bound that each launch evaluates
  (``contract.launch_bound``).

The bound is the PTX's where it has one, else the TTIR's, else unknown (None).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp

from proton_ik.contract.launch_bound import LaunchBound
from proton_ik.contract.layout import VERSION
from proton_ik.dialect.pik import RecordOp
from proton_ik.lowering import ptx_text, ttir_text
from proton_ik.lowering.pik_to_pikgpu import find_pairs


@dataclass(frozen=True)
class EntryBound:
    """At most ``entries`` entries per unit and kernel run (None: unknown), and what decided it;
    ``launch``: where the bound is a function of the kernel's arguments and grid, that function,
    evaluated at each launch."""

    entries: int | None
    reason: str
    launch: LaunchBound | None = None


@dataclass(frozen=True)
class EntryRecord:
    """A record of the kernel that stores, and the most slots its store takes."""

    record: RecordOp
    slots: int


def entry_records(module: ModuleOp, pair_scopes: bool, version: int = VERSION) -> list[EntryRecord]:
    """The records of a ``pik`` module (scope ids assigned) that store, in layout ``version``:
    every record but the begins that ``convert-pik-to-pikgpu`` pairs with their end, each with
    the most slots it takes."""
    records = [o for o in module.walk() if isinstance(o, RecordOp)]
    begins = find_pairs(records) if pair_scopes else {}
    paired_ends = set(begins.values())

    def slots(record: RecordOp) -> int:
        two = record in paired_ends or record.value is not None
        return 2 if version >= 3 and two else 1

    return [EntryRecord(record, slots(record)) for record in records if record not in begins]


def entry_bound(
    ptx: str, entries: Sequence[EntryRecord], ttir: str | None = None, version: int = VERSION
) -> EntryBound:
    """The PTX's exact bound where it has one, else the TTIR's (when the compile had a TTIR)."""
    exact = ptx_bound(ptx, entries)
    if exact.entries is not None or ttir is None:
        return exact
    if version >= 3:
        return ttir_bound(ttir, mark_slots=2)
    single_begins = {entry.record.scope.data for entry in entries if entry.record.kind.data == "begin"}
    return ttir_bound(ttir, lambda name: name in single_begins)


# --- on the PTX --------------------------------------------------------------------------------


def ptx_bound(ptx: str, entries: Sequence[EntryRecord]) -> EntryBound:
    """The most slots on any path through the kernel, if no record is stored inside a loop."""
    lines = ptx.splitlines()
    flow = ptx_text.control_flow(lines, *ptx_text.entry_body(lines))
    weights: Counter[int] = Counter()
    for entry in entries:
        if entry.record.site is not None:
            weights[flow.blocks[entry.record.site.value.data]] += entry.slots
    records = [entry.record for entry in entries]
    components = _components(flow.entry, flow.successors)
    loops = [c for c in components if len(c) > 1 or c[0] in flow.successors[c[0]]]
    locations = ptx_text.line_locations(lines)
    loop_of = {block: loop for loop in loops for block in loop}
    for record in records:
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


def recording_loops(ptx: str, entries: Sequence[EntryRecord]) -> list[list[str]]:
    """The lines of each loop (a cycle of the control-flow graph) that stores one of ``entries``."""
    lines = ptx.splitlines()
    start, end = ptx_text.entry_body(lines)
    flow = ptx_text.control_flow(lines, start, end)
    sites = {flow.blocks[e.record.site.value.data] for e in entries if e.record.site is not None}
    loops = [
        set(component)
        for component in _components(flow.entry, flow.successors)
        if (len(component) > 1 or component[0] in flow.successors[component[0]]) and sites & set(component)
    ]
    return [[lines[i] for i in range(start, end + 1) if flow.blocks[i] in loop] for loop in loops]


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
    return "1 slot" if count == 1 else f"{count} slots"


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"


# --- on the TTIR -------------------------------------------------------------------------------

_FOR = re.compile(
    r"^(?:%[^=]*=\s*)?scf\.for\s+(?P<unsigned>unsigned\s+)?(?P<iv>%[\w$.-]+)\s*=\s*"
    r"(?P<lb>%[\w$.-]+)\s+to\s+(?P<ub>%[\w$.-]+)\s+step\s+(?P<step>%[\w$.-]+)"
)
_ALTERNATIVES = {"scf.if", "scf.index_switch"}  # run one of their regions, once
_ONCE = {"scf.execute_region"}  # runs its region once
_INTEGER = r"(?P<type>i\d+|index)"
_OPERAND = r"%[\w$.-]+"
# The integer arithmetic a launch-time bound follows (``contract.launch_bound``'s operators)
_BINARY_OPS = {
    "arith.addi": "add",
    "arith.subi": "sub",
    "arith.muli": "mul",
    "arith.divsi": "div",
    "arith.ceildivsi": "ceildiv",
    "arith.remsi": "rem",
    "arith.minsi": "min",
    "arith.maxsi": "max",
    "arith.divui": "divu",
    "arith.ceildivui": "ceildivu",
    "arith.remui": "remu",
}
_BINARY = re.compile(
    rf"=\s*(?P<op>arith\.\w+)\s+(?P<a>{_OPERAND}),\s*(?P<b>{_OPERAND})(?:\s+overflow<[^>]*>)?\s*:\s*{_INTEGER}\b"
)
_CAST = re.compile(
    rf"=\s*arith\.(?:extsi|extui|trunci|index_cast|index_castui)\s+(?P<a>{_OPERAND})\s*:\s*\S+\s+to\s+{_INTEGER}\b"
)
_SELECT = re.compile(
    rf"=\s*arith\.select\s+{_OPERAND},\s*(?P<a>{_OPERAND}),\s*(?P<b>{_OPERAND})\s*:\s*{_INTEGER}\b"
)
_GRID = re.compile(r"=\s*tt\.(?P<op>get_program_id|get_num_programs)\s+(?P<axis>[xyz])\b")
_MAX_VALUE_DEPTH = 32  # ops between a loop bound and the arguments it is computed from


class _Unbounded(Exception):
    """The TTIR gives no bound; the message says why."""


@dataclass(frozen=True)
class _Loop:
    location: str | None
    trips: int


Count = int | list  # a whole number of records, or a launch-time count (``contract.launch_bound``)


def _sum(counts: list[Count]) -> Count:
    symbolic = [c for c in counts if not isinstance(c, int)]
    constant = sum(c for c in counts if isinstance(c, int))
    if not symbolic:
        return constant
    return (
        ["sum", *symbolic, *([constant] if constant else [])]
        if len(symbolic) > 1 or constant
        else symbolic[0]
    )


def _most(counts: list[Count]) -> Count:
    if all(isinstance(c, int) for c in counts):
        return max(counts)
    return ["most", *counts]


def _width(type_name: str) -> int:
    return 64 if type_name == "index" else int(type_name[1:])


class _RecordCounter:
    """Counts the entries one run of a TTIR function writes, at most, and the loops it counted.
    A loop whose trip count is a function of the kernel's integer arguments and grid gives a
    count that the launch evaluates (``contract.launch_bound``)."""

    def __init__(
        self,
        function: ttir_text.Op,
        aliases: dict[str, str],
        stores_begin: Callable[[str], bool],
        mark_slots: int,
    ):
        self.stores_begin = stores_begin
        self.mark_slots = mark_slots
        self.constants = ttir_text.integer_constants(function)
        self.arguments = ttir_text.integer_arguments(function)
        self.definitions = ttir_text.definitions(function)
        self.aliases = aliases
        self.loops: list[_Loop] = []
        self.launch_loops: list[str | None] = []  # loops whose trip counts the launch computes
        self.induction: dict[str, int] = {}  # the enclosing loops' induction variables -> loop id
        self.loop_ids = 0

    def where(self, op: ttir_text.Op) -> str | None:
        return ttir_text.source_line(op.loc, self.aliases)

    def region(self, ops: list[ttir_text.Op]) -> Count:
        return _sum([self.op(op) for op in ops])

    def op(self, op: ttir_text.Op) -> Count:
        name = ttir_text.marker_name(op)
        if name is not None:
            kind = ttir_text.marker_kind(op)
            if kind == "begin" and not self.stores_begin(name):
                return 0
            return self.mark_slots if kind == "mark" else 1
        if not op.regions:
            return 0
        if op.name == "scf.for":
            return self.loop(op)
        inner = [self.region(region) for region in op.regions]
        if all(count == 0 for count in inner):
            return 0  # a loop that records nothing may run any number of times
        if op.name in _ALTERNATIVES:
            return _most(inner)
        if op.name in _ONCE:
            return _sum(inner)
        if op.name == "scf.while":
            raise _Unbounded(
                f"the while loop {_at(self.where(op))} records scope '{_first_scope(op)}' "
                "and runs a number of times known only at run time"
            )
        raise _Unbounded(
            f"scope '{_first_scope(op)}' is recorded inside {op.name} {_at(self.where(op))}, "
            "which proton_ik cannot count"
        )

    def loop(self, op: ttir_text.Op) -> Count:
        match = _FOR.match(op.text)
        loop_id = self.loop_ids
        self.loop_ids += 1
        position = len(self.loops)  # an enclosing loop is listed before the loops inside it
        launch_position = len(self.launch_loops)
        if match is not None:
            self.induction[match.group("iv")] = loop_id
        try:
            body = self.region(op.regions[0])
        finally:
            if match is not None:
                self.induction.pop(match.group("iv"), None)
        if body == 0:
            return 0
        trips = self.trip_count(match)
        if trips is not None and isinstance(body, int):
            self.loops.insert(position, _Loop(self.where(op), trips))
            return trips * body
        unknown = (
            f"{_loop_name(self.where(op))} records scope '{_first_scope(op)}' and has a trip "
            "count known only at run time"
        )
        if match is None or match.group("unsigned"):
            raise _Unbounded(unknown)
        try:
            bounds = [self.value(match.group(k), 0) for k in ("lb", "ub", "step")]
        except _Unbounded as why:
            raise _Unbounded(f"{unknown} ({why})") from None
        if trips is None:
            self.launch_loops.insert(launch_position, self.where(op))
        return ["loop", loop_id, *bounds, body]

    def value(self, name: str, depth: int) -> list:
        """A value node of ``contract.launch_bound`` for an SSA value, from the constants, the
        integer arguments, the grid and the enclosing loops' induction variables."""
        if name in self.constants:
            return ["const", self.constants[name]]
        if name in self.arguments:
            return ["arg", self.arguments[name]]
        if name in self.induction:
            return ["iv", self.induction[name]]
        op = self.definitions.get(name)
        if op is None or depth > _MAX_VALUE_DEPTH:
            raise _Unbounded(f"{name} is not computed from the kernel's integer arguments and grid")
        if (grid := _GRID.search(op.text)) is not None:
            return [
                "pid" if grid.group("op") == "get_program_id" else "programs",
                "xyz".index(grid.group("axis")),
            ]
        binary = _BINARY.search(op.text)
        if binary is not None and binary.group("op") in _BINARY_OPS:
            a, b = (self.value(binary.group(k), depth + 1) for k in ("a", "b"))
            return [_BINARY_OPS[binary.group("op")], _width(binary.group("type")), a, b]
        if (cast := _CAST.search(op.text)) is not None:
            return ["cast", _width(cast.group("type")), self.value(cast.group("a"), depth + 1)]
        if (select := _SELECT.search(op.text)) is not None:
            return ["either", *(self.value(select.group(k), depth + 1) for k in ("a", "b"))]
        raise _Unbounded(f"{name} comes from {op.name}, which a launch cannot evaluate")

    def trip_count(self, match: re.Match | None) -> int | None:
        """Iterations of an ``scf.for`` whose bounds and positive step are constants, else None."""
        if match is None:
            return None
        lb, ub, step = (self.constants.get(match.group(k)) for k in ("lb", "ub", "step"))
        if lb is None or ub is None or step is None or step <= 0:
            return None
        return max(0, -(-(ub - lb) // step))


def _first_scope(op: ttir_text.Op) -> str:
    return next((name for inner in op.walk() if (name := ttir_text.marker_name(inner)) is not None), "?")


def ttir_bound(
    ttir: str, stores_begin: Callable[[str], bool] = lambda name: True, mark_slots: int = 1
) -> EntryBound:
    """The most slots the kernel's TTIR function writes per run, fixed at compile time, or
    computed at each launch (``EntryBound.launch``): a record each, ``mark_slots`` a mark, but
    none for the begins of the scopes for which ``stores_begin`` is false (the PTX pairs each
    with its end, which stores both)."""
    functions = [
        op
        for top in ttir_text.parse_ops(ttir)
        for op in top.walk()
        if op.name == "tt.func" and op.text.startswith("tt.func public")
    ]
    if len(functions) != 1:
        return EntryBound(None, f"the TTIR has {len(functions)} public functions, not one kernel")
    counter = _RecordCounter(functions[0], ttir_text.loc_aliases(ttir), stores_begin, mark_slots)
    try:
        records = counter.region(functions[0].regions[0])
    except _Unbounded as unbounded:
        return EntryBound(None, str(unbounded))
    if not isinstance(records, int):
        places = ", ".join(dict.fromkeys(_at(where) for where in counter.launch_loops))
        loops = "the loop" if len(counter.launch_loops) == 1 else "the loops"
        runs = "runs" if len(counter.launch_loops) == 1 else "run"
        reason = (
            f"{loops} {places} {runs} a number of times that each launch computes from the kernel's "
            "arguments and grid"
        )
        return EntryBound(None, reason, LaunchBound(records, reason))
    if not counter.loops:
        return EntryBound(records, f"no scope is recorded inside a loop: at most {_entries(records)}")
    if len(counter.loops) == 1:
        (loop,) = counter.loops
        return EntryBound(
            records, f"{_loop_name(loop.location)} runs {_times(loop.trips)}: at most {_entries(records)}"
        )
    loops = ", ".join(f"{_at(loop.location)} ({_times(loop.trips)})" for loop in counter.loops)
    return EntryBound(records, f"the loops {loops}: at most {_entries(records)}")
