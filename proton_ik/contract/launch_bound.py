"""A bound on the entries one unit writes, computed at each launch from the kernel's arguments
and grid: how a persistent kernel (``for tile in range(pid, num_tiles, NUM_SMS)``) or a K loop
(``range(cdiv(K, BLOCK_K))``) gets a segment that holds every record, with no ring.

The lowering (``lowering.bound``) writes the bound as a JSON tree into the kernel metadata; the
runtime evaluates it at each launch (``LaunchBound.entries``) and sizes the launch's segments;
the viewer only reads it back (``parse``, which checks every node, as for any hostile field).

A *count* is a whole number of records, or one of
  ``["sum", count, ...]``              the counts one after another,
  ``["most", count, ...]``             one of them (the branches of an ``scf.if``),
  ``["loop", k, lb, ub, step, count]`` ``count`` for each value of loop ``k``'s induction
                                       variable, from ``lb`` while below ``ub`` by ``step``.
A *value* is one of
  ``["const", n]``, ``["arg", name]`` (a kernel argument, by its parameter name),
  ``["pid", axis]`` (any of the grid's program ids), ``["programs", axis]`` (the grid's extent),
  ``["iv", k]`` (loop ``k``'s induction variable: any value it takes),
  ``[op, bits, value, value]`` with ``op`` in ``BINARY``, computed in ``bits``-bit integers,
  ``["cast", bits, value]`` and ``["either", value, value]`` (an ``arith.select``).

Values are evaluated as intervals over every program id of the grid, so the result bounds the
busiest unit of the whole launch, and is exact for the usual loops (the first program's). Any
step that is not positive at this launch, any value outside its integer width (the kernel's
arithmetic would wrap) or any argument that is not a whole number makes the bound unknown for
that launch: the launch then gets the kernel's ring, as if it had no bound.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

BINARY = ("add", "sub", "mul", "div", "ceildiv", "rem", "min", "max", "divu", "ceildivu", "remu")
WIDTHS = (1, 8, 16, 32, 64)
MAX_NODES = 4096  # nodes in one bound: a kernel's loops and their bounds, with room to spare
MAX_DEPTH = 64
MAX_NAME = 128
MAX_CONSTANT = (1 << 64) - 1

Interval = tuple[int, int]
Env = dict[int, Interval]
Evaluator = Callable[[Sequence[int], Mapping[str, int], Env], "Interval | None"]


class BoundError(ValueError):
    """A bound tree that is not well formed; the message names the node."""


class Unknown(Exception):
    """The bound cannot be computed for this launch (a step not positive, an overflow, an
    argument that is not a whole number)."""


@dataclass(frozen=True)
class LaunchBound:
    """A kernel's launch-time bound: its JSON tree (``count``), the parameters it reads and why
    the compile could not fix it (the loops, for the metadata's capacity reason)."""

    count: Any
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "reason": self.reason}

    @property
    def arguments(self) -> tuple[str, ...]:
        """The kernel parameters the bound reads, in order of first use."""
        found: dict[str, None] = {}

        def visit(node: Any) -> None:
            if isinstance(node, list):
                if node and node[0] == "arg":
                    found.setdefault(node[1])
                    return
                for child in node[1:]:
                    visit(child)

        visit(self.count)
        return tuple(found)

    def compile(self) -> Callable[[Sequence[int], Mapping[str, int]], int | None]:
        """A function of (grid extents, arguments by name) -> the most entries a unit writes at
        that launch, or None where it cannot be known. Built once per kernel: a launch runs
        closures, not a walk of the tree."""
        count = _count(self.count)

        def entries(grid: Sequence[int], arguments: Mapping[str, int]) -> int | None:
            try:
                return count(grid, arguments, {})
            except (Unknown, KeyError, TypeError, ValueError, ZeroDivisionError, OverflowError):
                return None

        return entries


def parse(data: object, where: str) -> LaunchBound:
    """Read a bound back from metadata, checking every node (``BoundError`` names the first bad
    one): at most ``MAX_NODES`` nodes, ``MAX_DEPTH`` deep, loops referenced only inside them."""
    if not isinstance(data, dict):
        raise BoundError(f"{where} is {reprlib.repr(data)}, not a JSON object")
    reason = data.get("reason")
    if not isinstance(reason, str) or not reason.isprintable():
        raise BoundError(f"{where}: 'reason' is {reprlib.repr(reason)}, not printable text")
    _check_count(data.get("count"), f"{where}.count", (), [0], 0)
    return LaunchBound(data["count"], reason)


# --- checking a tree read from a file ---------------------------------------------------------


def _node(node: object, where: str, depth: int, nodes: list[int]) -> list:
    """``node`` as a list, counted against ``MAX_NODES`` (``nodes`` holds the count so far) and
    ``MAX_DEPTH`` (its nesting)."""
    nodes[0] += 1
    if nodes[0] > MAX_NODES:
        raise BoundError(f"{where}: the bound has over {MAX_NODES} nodes")
    if depth > MAX_DEPTH:
        raise BoundError(f"{where[:200]}...: the bound nests over {MAX_DEPTH} deep")
    if not isinstance(node, list) or not node or not isinstance(node[0], str):
        raise BoundError(f"{where} is {reprlib.repr(node)}, not a node [kind, ...]")
    return node


def _whole(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _width(value: object) -> bool:
    return _whole(value, 1, 64) and value in WIDTHS


def _check_count(node: object, where: str, loops: tuple[int, ...], nodes: list[int], depth: int) -> None:
    if _whole(node, 0, MAX_CONSTANT):
        return
    node = _node(node, where, depth, nodes)
    kind = node[0]
    if kind in ("sum", "most") and len(node) >= 2:
        for i, child in enumerate(node[1:]):
            _check_count(child, f"{where}[{i + 1}]", loops, nodes, depth + 1)
        return
    if kind == "loop" and len(node) == 6 and _whole(node[1], 0, MAX_NODES) and node[1] not in loops:
        for i in (2, 3, 4):
            _check_value(node[i], f"{where}[{i}]", loops, nodes, depth + 1)
        _check_count(node[5], f"{where}[5]", (*loops, node[1]), nodes, depth + 1)
        return
    raise BoundError(f"{where}: {reprlib.repr(node)} is not a count (a whole number, sum, most or loop)")


def _check_value(node: object, where: str, loops: tuple[int, ...], nodes: list[int], depth: int) -> None:
    node = _node(node, where, depth, nodes)
    kind, rest = node[0], node[1:]
    if kind == "const" and len(rest) == 1 and _whole(rest[0], -(1 << 63), MAX_CONSTANT):
        return
    if kind == "arg" and len(rest) == 1 and isinstance(rest[0], str) and 0 < len(rest[0]) <= MAX_NAME:
        return
    if kind in ("pid", "programs") and len(rest) == 1 and _whole(rest[0], 0, 2):
        return
    if kind == "iv" and len(rest) == 1 and _whole(rest[0], 0, MAX_NODES) and rest[0] in loops:
        return
    if kind in BINARY and len(rest) == 3 and _width(rest[0]):
        _check_value(rest[1], f"{where}[2]", loops, nodes, depth + 1)
        _check_value(rest[2], f"{where}[3]", loops, nodes, depth + 1)
        return
    if kind == "cast" and len(rest) == 2 and _width(rest[0]):
        _check_value(rest[1], f"{where}[2]", loops, nodes, depth + 1)
        return
    if kind == "either" and len(rest) == 2:
        _check_value(rest[0], f"{where}[1]", loops, nodes, depth + 1)
        _check_value(rest[1], f"{where}[2]", loops, nodes, depth + 1)
        return
    raise BoundError(f"{where}: {reprlib.repr(node)} is not a value node")


# --- evaluating: closures over intervals ---------------------------------------------------------

CountFn = Callable[[Sequence[int], Mapping[str, int], Env], int]


def _count(node: Any) -> CountFn:
    if isinstance(node, int):
        return lambda grid, arguments, env: node
    kind = node[0]
    if kind in ("sum", "most"):
        parts = [_count(child) for child in node[1:]]
        combine = sum if kind == "sum" else max
        return lambda grid, arguments, env: combine(part(grid, arguments, env) for part in parts)
    _, loop, lb_node, ub_node, step_node, body_node = node
    lb, ub, step, body = _value(lb_node), _value(ub_node), _value(step_node), _count(body_node)

    def loop_count(grid: Sequence[int], arguments: Mapping[str, int], env: Env) -> int:
        low, _ = lb(grid, arguments, env)
        _, high = ub(grid, arguments, env)
        step_low, _ = step(grid, arguments, env)
        if step_low <= 0:
            raise Unknown("a loop's step is not positive at this launch")
        trips = max(0, -(-(high - low) // step_low))
        if trips == 0:
            return 0
        return trips * body(grid, arguments, {**env, loop: (low, high - 1)})

    return loop_count


ValueFn = Callable[[Sequence[int], Mapping[str, int], Env], Interval]


def _value(node: list) -> ValueFn:
    kind = node[0]
    if kind == "const":
        constant = (node[1], node[1])
        return lambda grid, arguments, env: constant
    if kind == "arg":
        name = node[1]
        return lambda grid, arguments, env: _argument(arguments[name])
    if kind == "pid":
        axis = node[1]
        return lambda grid, arguments, env: (0, max(0, _extent(grid, axis) - 1))
    if kind == "programs":
        axis = node[1]
        return lambda grid, arguments, env: (_extent(grid, axis), _extent(grid, axis))
    if kind == "iv":
        loop = node[1]
        return lambda grid, arguments, env: env[loop]
    if kind == "either":
        first, second = _value(node[1]), _value(node[2])

        def either(grid: Sequence[int], arguments: Mapping[str, int], env: Env) -> Interval:
            a, b = first(grid, arguments, env), second(grid, arguments, env)
            return min(a[0], b[0]), max(a[1], b[1])

        return either
    if kind == "cast":
        bits, inner = node[1], _value(node[2])
        return lambda grid, arguments, env: _fits(inner(grid, arguments, env), bits, signed=True)
    bits, left, right = node[1], _value(node[2]), _value(node[3])
    combine = _BINARY[kind]

    def binary(grid: Sequence[int], arguments: Mapping[str, int], env: Env) -> Interval:
        return _fits(combine(left(grid, arguments, env), right(grid, arguments, env)), bits, signed=True)

    return binary


def _argument(value: object) -> Interval:
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(value.__index__())  # type: ignore[attr-defined]  # numpy and torch integers
        except (AttributeError, TypeError) as error:
            raise Unknown(f"an argument is {type(value).__name__}, not a whole number") from error
    return value, value


def _extent(grid: Sequence[int], axis: int) -> int:
    return int(grid[axis]) if axis < len(grid) else 1


def _fits(interval: Interval, bits: int, signed: bool) -> Interval:
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed and bits > 1 else (0, (1 << bits) - 1)
    if interval[0] < low or interval[1] > high:
        raise Unknown(f"a value leaves the {bits}-bit range: the kernel's arithmetic would wrap")
    return interval


def _corners(a: Interval, b: Interval, op: Callable[[int, int], int]) -> Interval:
    values = [op(x, y) for x in a for y in b]
    return min(values), max(values)


def _divisor(b: Interval) -> Interval:
    if b[0] <= 0 <= b[1]:
        raise Unknown("a divisor may be 0 or change sign over the grid")
    return b


def _truncated(x: int, y: int) -> int:
    quotient = abs(x) // abs(y)
    return quotient if (x >= 0) == (y > 0) else -quotient


def _ceiling(x: int, y: int) -> int:
    return -((-x) // y) if y > 0 else _ceiling(-x, -y)


def _remainder(a: Interval, b: Interval) -> Interval:
    most = max(abs(b[0]), abs(b[1])) - 1
    if a[0] >= 0:
        return 0, min(a[1], most)
    return -most, most if a[1] > 0 else 0


def _unsigned(a: Interval, b: Interval) -> None:
    if a[0] < 0 or b[0] < 0:
        raise Unknown("an unsigned operation of a value that may be negative")


def _divu(a: Interval, b: Interval) -> Interval:
    _unsigned(a, b)
    return _corners(a, _divisor(b), lambda x, y: x // y)


def _ceildivu(a: Interval, b: Interval) -> Interval:
    _unsigned(a, b)
    return _corners(a, _divisor(b), lambda x, y: -(-x // y))


def _remu(a: Interval, b: Interval) -> Interval:
    _unsigned(a, _divisor(b))
    return _remainder(a, b)


_BINARY: dict[str, Callable[[Interval, Interval], Interval]] = {
    "add": lambda a, b: (a[0] + b[0], a[1] + b[1]),
    "sub": lambda a, b: (a[0] - b[1], a[1] - b[0]),
    "mul": lambda a, b: _corners(a, b, lambda x, y: x * y),
    "div": lambda a, b: _corners(a, _divisor(b), _truncated),
    "ceildiv": lambda a, b: _corners(a, _divisor(b), _ceiling),
    "rem": lambda a, b: _remainder(a, _divisor(b)),
    "min": lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
    "max": lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
    "divu": _divu,
    "ceildivu": _ceildivu,
    "remu": _remu,
}
assert set(_BINARY) == set(BINARY)
