"""Scope annotations for Triton (``@triton.jit``) and Gluon (``@gluon.jit``) kernels.

    import proton_ik.language as pl

    with pl.scope("load"):
        x = tl.load(ptr)
    pl.enter_scope("compute")
    ...
    pl.exit_scope("compute")

Both DSLs work with no opt-in. While no mode is set (``proton_ik.compile_mode``: a session, or
a ``proton_ik.instrumented()`` block, sets one) these calls emit nothing, so the compiled kernel
is the kernel without annotations. While one is set, each call emits one marker (see
``proton_ik.dialect.markers``) that the PTX stage turns into a timestamped record.
"""

from __future__ import annotations

from triton.language import core as tl

from proton_ik import compile_mode
from proton_ik.dialect.markers import marker_text
from proton_ik.dialect.pik import RecordOp, scope_name_problem

__all__ = ["disable_semantic", "enable_semantic", "enter_scope", "exit_scope", "scope"]

SEMANTICS = ("triton", "gluon")


def _check_semantic(semantic_name: object) -> None:
    if semantic_name not in SEMANTICS:
        raise ValueError(f"semantic {semantic_name!r}: choose from {', '.join(SEMANTICS)}")


def enable_semantic(semantic_name: str) -> None:
    """Accepted, as in ``triton.profiler.language``: proton_ik's scope calls work in Triton and
    Gluon kernels with no opt-in, so this only checks its argument."""
    _check_semantic(semantic_name)


def disable_semantic(semantic_name: str) -> None:
    """Accepted, as in ``triton.profiler.language``; only checks its argument."""
    _check_semantic(semantic_name)


def _record(kind: str, name: object, semantic) -> None:
    name = tl._unwrap_if_constexpr(name)
    problem = scope_name_problem(name)
    if problem is not None:
        raise ValueError(f'proton_ik: {problem}. Pass a string literal, e.g. pl.enter_scope("load")')
    if compile_mode.active_mode() is None:
        return
    assert isinstance(name, str)  # scope_name_problem accepts only strings
    builder = semantic.builder
    # A non-pure scalar inline asm with an unused i32 result: Triton and LLVM keep it, in
    # order with the kernel's other side effects, and it costs no instruction by itself.
    builder.create_inline_asm(
        marker_text(RecordOp(kind, name)), "=r", [], [tl.int32.to_ir(builder)], False, 1
    )


@tl.builtin
def enter_scope(name: tl.constexpr, _semantic=None) -> None:
    """Record the begin of scope ``name`` (a compile-time string)."""
    _record("begin", name, _semantic)


@tl.builtin
def exit_scope(name: tl.constexpr, _semantic=None) -> None:
    """Record the end of scope ``name``."""
    _record("end", name, _semantic)


class scope:
    """``with pl.scope("name"):`` records a begin before the body and an end after it."""

    def __init__(self, name: tl.constexpr, _semantic=None):
        self.name = name
        self.semantic = _semantic

    def __enter__(self) -> None:
        _record("begin", self.name, self.semantic)

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        _record("end", self.name, self.semantic)
