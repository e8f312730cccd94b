"""The scope-name rule: what a scope may be called. The language checks it when a kernel names a
scope, the ``pik`` dialect when it verifies, and the viewer when it reads a file; one rule for all.
"""

from __future__ import annotations

MAX_NAME_LENGTH = 128
# Names travel inside a PTX comment (through LLVM inline asm, where '$' is special) and inside
# an MLIR string literal, so '"', '\\' and '$' are refused, as is anything unprintable.
_FORBIDDEN_NAME_CHARS = frozenset('"\\$')


class ScopeNameError(ValueError):
    """A scope, mark or event name the rule refuses. Triton reports an error raised while it
    compiles a kernel as the error's ``repr``: this one's is its message as written, not a
    string literal with its quotes escaped once more."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}: {self}"


def name_error(problem: str, name: object, example: str) -> ScopeNameError:
    """The error for a refused name: how to fix it depends on whether a string was passed."""
    if isinstance(name, str):
        return ScopeNameError(f"proton_ik: {problem}. Rename it, e.g. {example}")
    return ScopeNameError(f"proton_ik: {problem}. Pass a string literal, e.g. {example}")


def fits_a_marker(text: str) -> bool:
    """Whether ``text`` can ride in a marker's inline asm as written (``dialect.markers``):
    printable ASCII without '"', '\\' or '$' (which inline asm reads as an operand)."""
    return all(0x20 <= ord(c) < 0x7F and c not in _FORBIDDEN_NAME_CHARS for c in text)


def scope_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a scope, or None if it can. The one rule, used everywhere."""
    if not isinstance(name, str):
        shown = f" {name!r}" if isinstance(name, (int, float, bool)) else ""
        return f"a scope name must be a compile-time constant string, got {type(name).__name__}{shown}"
    if not name:
        return "a scope name must not be empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"scope name {name[:40]!r}... is {len(name)} characters; the limit is {MAX_NAME_LENGTH}"
    bad = sorted({c for c in name if c in _FORBIDDEN_NAME_CHARS or not 0x20 <= ord(c) < 0x7F})
    if bad:
        return f"scope name {name!r} has characters {bad!r}; use printable ASCII without '\"', '\\' or '$'"
    return None
