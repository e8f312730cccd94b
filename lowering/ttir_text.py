"""Small facts read off Triton's TTIR text (``str(module)``): its ops as a tree, integer
constants, and the source line of an op from its ``loc``.

MLIR prints one op a line. An op with regions ends its first line with ``{``; each further
region starts on a line ``} else {``, ``} do {`` or ``}, {``; its last line starts with ``}`` and
carries the op's trailing attributes and ``loc``. Location aliases (``#loc3 = loc(...)``) follow
the module.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from proton_ik.dialect.markers import MARKER_PREFIX

_OP_NAME = re.compile(r'^(?:%[^=]*=\s*)?"?(?P<name>[A-Za-z_][\w.]*)')
_ALIAS = re.compile(r"^(?P<alias>#loc\d*)\s*=\s*loc\((?P<loc>.*)\)\s*$")
_CONSTANT = re.compile(r"^(?P<value>%[\w$.-]+)\s*=\s*arith\.constant\s+(?P<int>-?\d+)\s*:\s*(?:i\d+|index)\b")
_LOC_ATOM = re.compile(r'"(?P<file>[^"]*)":(?P<line>\d+)(?::\d+)?|(?P<alias>#loc\d*)(?!\w)')
# A proton_ik marker as the TTIR prints it: an inline asm op whose text starts with the marker
# prefix, quotes printed as \22 (names hold no quote or \).
_MARKER_ASM = re.compile(r'^(?:%[^=]*=\s*)?tt\.elementwise_inline_asm\s+"' + re.escape(MARKER_PREFIX))
_MARKER_SCOPE = re.compile(r"\bscope = \\22(?P<name>[^\\]*)\\22")
_MARKER_KIND = re.compile(r"\bkind = \\22(?P<kind>[^\\]*)\\22")
WARP_SPECIALIZE_ATTRIBUTE = "tt.warp_specialize"


@dataclass
class Op:
    """One op: its name, its first and last line (stripped), and its regions' ops."""

    name: str
    text: str
    regions: list[list[Op]] = field(default_factory=list)
    last_line: str = ""

    @property
    def loc(self) -> str | None:
        """The text inside the ``loc(...)`` that ends the op, if it has one."""
        line = self.last_line or self.text
        at = line.rfind(" loc(")
        return line[at + len(" loc(") : -1] if at >= 0 and line.endswith(")") else None

    def walk(self):
        """This op and every op nested in it, in program order."""
        yield self
        for region in self.regions:
            for op in region:
                yield from op.walk()


def parse_ops(text: str) -> list[Op]:
    """The top-level ops of a TTIR module (normally one ``module``), with their regions."""
    top: list[Op] = []
    open_ops: list[tuple[Op | None, list[Op]]] = [(None, top)]
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("^", "#")):
            continue  # block labels, location aliases
        if line.startswith("}"):
            op, _ = open_ops.pop()
            if op is None:
                raise ValueError(f"unbalanced '}}' in the TTIR: {line}")
            if line.endswith("{"):
                op.regions.append([])
                open_ops.append((op, op.regions[-1]))
            else:
                op.last_line = line
            continue
        name = _OP_NAME.match(line)
        op = Op(name.group("name") if name else line.split()[0], line)
        open_ops[-1][1].append(op)
        if line.endswith("{"):
            op.regions.append([])
            open_ops.append((op, op.regions[-1]))
    if len(open_ops) != 1:
        raise ValueError(
            f"the TTIR ends inside {open_ops[-1][0].name if open_ops[-1][0] else 'the module'}: it is cut short"
        )
    return top


def loc_aliases(text: str) -> dict[str, str]:
    """``#locN`` -> the text inside its ``loc(...)``."""
    aliases = {}
    for line in text.splitlines():
        match = _ALIAS.match(line.strip())
        if match is not None:
            aliases[match.group("alias")] = match.group("loc")
    return aliases


def source_line(loc: str | None, aliases: dict[str, str]) -> str | None:
    """``file:line`` (base name) of a ``loc``: the first file position it names, following
    aliases, names (``loc("acc"(#loc4))``) and call sites (``callsite(#callee at #caller)``)."""
    seen: set[str] = set()

    def resolve(text: str) -> str | None:
        for atom in _LOC_ATOM.finditer(text):
            if atom.group("file") is not None:
                return f"{os.path.basename(atom.group('file'))}:{atom.group('line')}"
            alias = atom.group("alias")
            if alias in aliases and alias not in seen:
                seen.add(alias)
                found = resolve(aliases[alias])
                if found is not None:
                    return found
        return None

    return None if loc is None else resolve(loc)


def integer_constants(op: Op) -> dict[str, int]:
    """SSA name -> value of every scalar integer ``arith.constant`` in ``op`` (a function: its
    value names are unique)."""
    constants = {}
    for inner in op.walk():
        match = _CONSTANT.match(inner.text) if inner.name == "arith.constant" else None
        if match is not None:
            constants[match.group("value")] = int(match.group("int"))
    return constants


def marker_name(op: Op) -> str | None:
    """The scope, event or mark name of a proton_ik marker op ("?" where it cannot be read);
    None for any other op."""
    if not _MARKER_ASM.match(op.text):
        return None
    scope = _MARKER_SCOPE.search(op.text)
    return scope.group("name") if scope else "?"


def marker_kind(op: Op) -> str | None:
    """A marker's record kind ("begin", "end", an event's or a mark's), None where unreadable."""
    kind = _MARKER_KIND.search(op.text)
    return kind.group("kind") if kind else None


@dataclass(frozen=True)
class TtirMarker:
    """A proton_ik marker in the TTIR: its name, its source line, the source line of the
    warp-specialized loop it sits in (``tl.range(..., warp_specialize=True)``), if any, and of
    the last such loop that comes before it in program order, if any."""

    name: str
    line: str | None
    warp_specialized_loop: str | None
    after_warp_specialized_loop: str | None = None


def markers(text: str) -> list[TtirMarker]:
    """Every proton_ik marker of a TTIR module, in program order."""
    aliases = loc_aliases(text)
    found: list[TtirMarker] = []
    passed: str | None = None  # the last warp-specialized loop left behind, in program order

    def visit(op: Op, loop: str | None) -> None:
        nonlocal passed
        name = marker_name(op)
        if name is not None:
            found.append(TtirMarker(name, source_line(op.loc, aliases), loop, passed))
        specialized = bool(op.regions) and WARP_SPECIALIZE_ATTRIBUTE in op.last_line
        inner = (source_line(op.loc, aliases) or "an unknown line") if specialized else loop
        for region in op.regions:
            for nested in region:
                visit(nested, inner)
        if specialized:
            passed = inner

    for op in parse_ops(text):
        visit(op, None)
    return found


_ARGUMENT = re.compile(r'(?P<value>%[\w$.-]+): (?P<type>i\d+|index)\b[^%]*?loc\("(?P<name>[^"]+)"')
_RESULT = re.compile(r"^(?P<value>%[\w$.-]+)\s*=\s*")


def integer_arguments(function: Op) -> dict[str, str]:
    """SSA name -> parameter name of each integer argument of a ``tt.func`` (Triton names each
    argument's location after its Python parameter)."""
    header = function.text.split(") attributes", 1)[0]
    return {match.group("value"): match.group("name") for match in _ARGUMENT.finditer(header)}


def definitions(function: Op) -> dict[str, Op]:
    """SSA name -> the op that defines it, for every single-result op of a function."""
    found = {}
    for op in function.walk():
        match = _RESULT.match(op.text)
        if match is not None:
            found[match.group("value")] = op
    return found
