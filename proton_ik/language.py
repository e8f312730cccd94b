"""Scopes, events and marks for Triton (``@triton.jit``) and Gluon (``@gluon.jit``) kernels.

    import proton_ik.language as pl

    with pl.scope("load"):
        x = tl.load(ptr)
    pl.enter_scope("compute", predicate=pid == 0)
    ...
    pl.exit_scope("compute", predicate=pid == 0)

    TMA = pl.event("tma_load", instances=STAGES)  # a compile-time handle, here or in the kernel
    pl.start_event(TMA, index=stage)  # in one warp (a producer partition) ...
    pl.end_event(TMA, index=stage)  # ... and its end in another (a consumer), later
    pl.mark("tile", value=tile_id)  # an instant, with a 32-bit integer or float value

Both DSLs work with no opt-in. While no mode is set (``proton_ik.compile_mode``: a session, or
a ``proton_ik.instrumented()`` block, sets one) these calls emit nothing, so the compiled kernel
is the kernel without annotations; their arguments are checked all the same. While one is set,
each call emits one marker (see ``proton_ik.dialect.markers``) that the PTX stage turns into a
timestamped record. Runtime operands (a predicate, an event's index, a mark's value) are the
marker's inline-asm operands, so the PTX stage finds them in registers. A predicate that is
false at run time records nothing; a constant False emits nothing at all.
"""

from __future__ import annotations

import os
import re
import sys

from triton.language import core as tl

from proton_ik import compile_mode
from proton_ik.contract.names import fits_a_marker, name_error
from proton_ik.contract.tags import MAX_EVENT_INSTANCES
from proton_ik.dialect.markers import marker_text
from proton_ik.dialect.pik import RecordOp, scope_name_problem

__all__ = [
    "Event",
    "disable_semantic",
    "enable_semantic",
    "end_event",
    "enter_scope",
    "event",
    "exit_scope",
    "mark",
    "scope",
    "start_event",
]

SEMANTICS = ("triton", "gluon")
_VALUE_TYPES = {"int32": "i32", "uint32": "u32", "fp32": "f32"}  # Triton dtype name -> pik value_type
_INDEX_TYPES = ("int8", "int16", "int32", "uint8", "uint16", "uint32")
_INT32 = range(-(1 << 31), 1 << 31)
_UINT32 = range(1 << 32)


def _check_semantic(semantic_name: object) -> None:
    if semantic_name not in SEMANTICS:
        raise ValueError(f"semantic {semantic_name!r}: choose from {', '.join(SEMANTICS)}")


def enable_semantic(semantic_name: str) -> None:
    """Accepted, as in ``triton.profiler.language``: proton_ik's calls work in Triton and Gluon
    kernels with no opt-in, so this only checks its argument."""
    _check_semantic(semantic_name)


def disable_semantic(semantic_name: str) -> None:
    """Accepted, as in ``triton.profiler.language``; only checks its argument."""
    _check_semantic(semantic_name)


class Event(tl.base_value):
    """An event's compile-time handle: its name and how many instances may be in flight at once
    (``index=`` picks one, 0 to ``instances - 1``). ``pl.event`` gives it wrapped in a
    ``tl.constexpr``, so that it may be a module global that kernels read, a constexpr argument,
    or a local of the kernel; it holds no IR value, and passes to ``@jit`` helpers and Gluon's
    warp-specialized partitions as a constant."""

    def __init__(self, name: object, instances: object = 1):
        name, instances = tl._unwrap_if_constexpr(name), tl._unwrap_if_constexpr(instances)
        problem = scope_name_problem(name)
        if problem is not None:
            problem = problem.replace("a scope name", "an event name").replace("scope name", "event name")
            raise name_error(problem, name, 'pl.event("tma_load")')
        if isinstance(instances, bool) or not isinstance(instances, int):
            raise ValueError(
                f"proton_ik: event '{name}': instances must be a constant int, got {instances!r}"
            )
        if not 1 <= instances <= MAX_EVENT_INSTANCES:
            raise ValueError(
                f"proton_ik: event '{name}': instances = {instances} is outside 1..{MAX_EVENT_INSTANCES}"
            )
        self.name: str = name  # type: ignore[assignment]  # checked by scope_name_problem
        self.instances: int = instances
        self.type = _EventType(self)

    def _flatten_ir(self, handles: list) -> None:
        return

    def __repr__(self) -> str:
        # Code that makes this handle anew, whatever the module imported proton_ik.language as:
        # Inductor writes a kernel's constexpr globals into the source it compiles from their repr.
        return f"proton_ik.language.Event({self.name!r}, instances={self.instances})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Event) and (other.name, other.instances) == (self.name, self.instances)

    def __hash__(self) -> int:
        return hash(("pl.event", self.name, self.instances))


class _EventType(tl.constexpr_type):
    """An event's type: no IR values; rebuilt as the event itself wherever Triton rebuilds values
    (a loop that carries it, a ``@jit`` helper that receives it)."""

    def _unflatten_ir(self, handles: list, cursor: int) -> tuple[Event, int]:
        return self.value, cursor


def event(name: object, instances: object = 1, _semantic=None) -> tl.constexpr:
    """``pl.event("tma_load", instances=4)``: an event's handle (an ``Event`` in a
    ``tl.constexpr``), in Python or in a kernel."""
    return tl.constexpr(Event(name, instances))


setattr(event, tl.TRITON_BUILTIN, True)  # callable in kernels, and outside them too


class _Call:
    """One annotation call being checked and emitted: what it records and where it sits."""

    def __init__(self, what: str, name: str, semantic, generator=None):
        self.what, self.name, self.semantic, self.generator = what, name, semantic, generator
        self.operands: list = []
        self.properties: dict[str, object] = {}

    def fail(self, problem: str, fix: str) -> ValueError:
        return ValueError(
            f"proton_ik: {_call_site(self.generator)}, {self.what} '{self.name}': {problem}. Fix: {fix}"
        )

    def scalar(self, value, role: str):
        if isinstance(value, tl.constexpr) or not hasattr(value, "type"):
            raise self.fail(
                f"{role} must be a constant or a scalar of the kernel, got {value!r}", f"pass a {role}"
            )
        if value.type.is_block():
            raise self.fail(
                f"{role} must be a scalar (one value for the whole program), got a tensor of shape "
                f"{tl._unwrap_if_constexpr(list(value.shape))}",
                "reduce it first, or pass a scalar such as tl.program_id(0)",
            )
        return value

    def operand(self, role: str, value, dtype) -> None:
        """``value`` (a scalar tensor) becomes inline-asm operand ``$n`` in property ``role``."""
        if compile_mode.active_mode() is None:
            return
        if dtype is not None and value.dtype != dtype:
            value = self.semantic.cast(value, dtype)
        self.operands.append(value)
        self.properties[role] = f"${len(self.operands)}"

    def predicate(self, predicate) -> bool:
        """Whether to emit at all: False for a constant False; a runtime one becomes an operand."""
        predicate = tl._unwrap_if_constexpr(predicate)
        if predicate is None or predicate is True:
            return True
        if predicate is False:
            return False
        if not hasattr(predicate, "type"):
            raise self.fail(
                f"predicate must be a boolean, got {type(predicate).__name__} {predicate!r}",
                "pass a comparison such as pid == 0, or a constant True or False",
            )
        predicate = self.scalar(predicate, "predicate")
        if predicate.dtype != tl.int1:
            raise self.fail(
                f"predicate must be a boolean, got a scalar of type {predicate.dtype}",
                "pass a comparison such as pid == 0 or x != 0",
            )
        self.operand("predicate", predicate, tl.int32)
        return True

    def index(self, index, instances: int) -> None:
        index = tl._unwrap_if_constexpr(index)
        if index is None:
            return
        if isinstance(index, int) and not isinstance(index, bool):
            if not 0 <= index < instances:
                raise self.fail(
                    f"index {index} is outside the {instances} declared instances (0..{instances - 1})",
                    f'declare more with pl.event("{self.name}", instances=...), or pass an index below {instances}',
                )
            self.properties["index"] = index
            return
        if not hasattr(index, "type"):
            raise self.fail(
                f"index must be an integer, got {index!r}", "pass a constant int or an int32 scalar"
            )
        index = self.scalar(index, "index")
        if str(index.dtype) not in _INDEX_TYPES:
            raise self.fail(
                f"index must be an integer of at most 32 bits, got a scalar of type {index.dtype}",
                "convert it with .to(tl.int32)",
            )
        self.operand("index_reg", index, tl.int32)

    def value(self, value) -> None:
        value = tl._unwrap_if_constexpr(value)
        if value is None:
            return
        if isinstance(value, bool) or (isinstance(value, (int, float)) and not _fits_32_bits(value)):
            raise self.fail(
                f"a value is a 32-bit integer or float, got {type(value).__name__} {value!r}",
                "pass an int32, uint32 or float32 value",
            )
        if isinstance(value, (int, float)):
            if compile_mode.active_mode() is not None:
                value = self.semantic.to_tensor(value)
                self.properties["value_type"] = _VALUE_TYPES.get(str(value.dtype), "i32")
                self.operand("value", value, None)
            return
        if not hasattr(value, "type"):
            raise self.fail(
                f"a value is a 32-bit integer or float, got {value!r}", "pass a scalar of the kernel"
            )
        value = self.scalar(value, "value")
        value_type = _VALUE_TYPES.get(str(value.dtype))
        if value_type is None:
            raise self.fail(
                f"a value is a 32-bit integer or float scalar, got a scalar of type {value.dtype}",
                "convert it with .to(tl.int32) or .to(tl.float32)",
            )
        self.properties["value_type"] = value_type
        self.operand("value", value, None)

    def emit(self, kind: str) -> None:
        if compile_mode.active_mode() is None:
            return
        builder = self.semantic.builder
        line, file = _source_place(builder)
        op = RecordOp(kind, self.name, line=line, file=file, **self.properties)  # type: ignore[arg-type]
        # A non-pure scalar inline asm with an unused i32 result: Triton and LLVM keep it, in
        # order with the kernel's other side effects, and it costs no instruction by itself.
        # Its operands are named in its text ("$1"), which LLVM replaces with their registers.
        constraints = ",".join(["=r"] + ["r"] * len(self.operands))
        handles = [operand.handle for operand in self.operands]
        builder.create_inline_asm(marker_text(op), constraints, handles, [tl.int32.to_ir(builder)], False, 1)


# The first file and line of an MLIR location as Triton prints it: loc("k.py":14:26), also inside
# a name or a call site (a JIT helper inlined: its own line comes first)
_LOCATION = re.compile(r'"(?P<file>[^"]+)":(?P<line>\d+):\d+')


def _source_place(builder) -> tuple[int | None, str | None]:
    """The line and file (its base name) that Triton's builder is emitting at: the annotation
    call's. The marker carries them, because the PTX's nearest ``.loc`` before a marker can be
    another line's where LLVM moved code around it (a loop whose body calls ``tl.erf``). None
    where this Triton's builder does not say."""
    try:
        match = _LOCATION.search(str(builder.get_loc()))
    except Exception:  # a builder without locations: the PTX's .loc stands
        return None, None
    if match is None or int(match.group("line")) <= 0:
        return None, None
    file = os.path.basename(match.group("file"))
    if not fits_a_marker(file):
        # Inline asm would misread the name ("$1" names an operand): the marker carries no
        # place, and the PTX's .loc gives line and file together.
        return None, None
    return int(match.group("line")), file


def _fits_32_bits(value: int | float) -> bool:
    return isinstance(value, float) or value in _INT32 or value in _UINT32


def _call_site(generator=None) -> str:
    """``kernel 'k' at file.py:12`` for the annotation call being compiled: Triton passes its
    code generator to builtins; a ``with`` statement's context manager finds it on the stack."""
    frame = sys._getframe(1)
    while generator is None and frame is not None:
        candidate = frame.f_locals.get("self")
        if hasattr(candidate, "jit_fn") and hasattr(candidate, "cur_node"):
            generator = candidate
        frame = frame.f_back  # type: ignore[assignment]
    if generator is None:
        return "a kernel"
    node = generator.cur_node
    line = generator.begin_line + node.lineno if hasattr(node, "lineno") else "?"
    file = str(generator.file_name).rsplit("/", 1)[-1]
    return f"kernel '{generator.jit_fn.__name__}' at {file}:{line}"


def _name(name: object, what: str) -> str:
    name = tl._unwrap_if_constexpr(name)
    problem = scope_name_problem(name)
    if problem is not None:
        example = {"scope": 'pl.enter_scope("load")', "mark": 'pl.mark("tile")'}[what]
        problem = problem.replace("scope name", f"{what} name")
        raise name_error(problem, name, example)
    return name  # type: ignore[return-value]  # scope_name_problem accepts only strings


def _record(kind: str, name: object, semantic, predicate=None, generator=None) -> None:
    call = _Call("scope", _name(name, "scope"), semantic, generator)
    if call.predicate(predicate):
        call.emit(kind)


@tl.builtin
def enter_scope(name: tl.constexpr, predicate=None, _semantic=None, _generator=None) -> None:
    """Record the begin of scope ``name`` (a compile-time string), where ``predicate`` holds."""
    _record("begin", name, _semantic, predicate, _generator)


@tl.builtin
def exit_scope(name: tl.constexpr, predicate=None, _semantic=None, _generator=None) -> None:
    """Record the end of scope ``name``, where ``predicate`` holds."""
    _record("end", name, _semantic, predicate, _generator)


class scope:
    """``with pl.scope("name"):`` records a begin before the body and an end after it (both only
    where ``predicate`` holds)."""

    def __init__(self, name: tl.constexpr, predicate=None, _semantic=None, _generator=None):
        self.name = name
        self.predicate = predicate
        self.semantic = _semantic
        self.generator = _generator

    def __enter__(self) -> None:
        _record("begin", self.name, self.semantic, self.predicate, self.generator)

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        _record("end", self.name, self.semantic, self.predicate, self.generator)


# Triton admits as a kernel's globals only modules, JIT functions, constexprs and builtins:
# marked so, `from proton_ik.language import scope` works as `pl.scope` does.
setattr(scope, tl.TRITON_BUILTIN, True)


def _event_record(kind: str, handle: object, index, predicate, semantic, generator) -> None:
    handle = tl._unwrap_if_constexpr(handle)
    if isinstance(handle, str):
        handle = Event(handle)
    if not isinstance(handle, Event):
        raise ValueError(
            f"proton_ik: {_call_site(generator)}: an event is a pl.event handle or its name, got "
            f'{handle!r}. Fix: declare it with pl.event("name", instances=N) and pass that'
        )
    call = _Call("event", handle.name, semantic, generator)
    call.properties["instances"] = handle.instances
    call.index(index, handle.instances)
    if call.predicate(predicate):
        call.emit(kind)


@tl.builtin
def start_event(event, index=None, predicate=None, _semantic=None, _generator=None) -> None:
    """Record the start of instance ``index`` of ``event`` (a ``pl.event`` handle): a constant
    below its ``instances``, or an integer scalar. Its end may come in another warp."""
    _event_record("event_start", event, index, predicate, _semantic, _generator)


@tl.builtin
def end_event(event, index=None, predicate=None, _semantic=None, _generator=None) -> None:
    """Record the end of instance ``index`` of ``event``."""
    _event_record("event_end", event, index, predicate, _semantic, _generator)


@tl.builtin
def mark(name: tl.constexpr, value=None, predicate=None, _semantic=None, _generator=None) -> None:
    """Record an instant named ``name``; with ``value`` (an int32, uint32 or float32 scalar, or a
    constant), also that value."""
    call = _Call("mark", _name(name, "mark"), _semantic, _generator)
    call.value(value)
    if call.predicate(predicate):
        call.emit("mark")
