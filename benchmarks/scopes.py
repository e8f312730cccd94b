"""One scope language for the benchmark kernels, so every variant compiles from the same source.

    from benchmarks import scopes

    with scopes.scope("load"):
        x = tl.load(ptr)
    scopes.enter_scope("compute")
    ...
    scopes.exit_scope("compute")

The calls decide at compile time who records:

- proton_ik, while a mode is set (``proton_ik.compile_mode``): in a session, or inside
  ``with proton_ik.instrumented(mode):``, the benchmarks' way to compile a variant with no session;
- else Triton's Proton, while its instrumentation hook is active (``flags.instrumentation_on``);
- else nobody: the call emits nothing and the kernel is the plain kernel.

Both the Triton DSL (``@triton.jit``) and Gluon (``@gluon.jit``) kernels can use them.
"""

from __future__ import annotations

import triton.profiler.language as proton_language
from triton.language import core as tl
from triton.profiler.flags import flags as proton_flags

import proton_ik.language as ik_language
from proton_ik import compile_mode

__all__ = ["active_profiler", "enter_scope", "exit_scope", "scope"]

# Proton records only Gluon kernels unless the Triton DSL is enabled; the suite is mostly Triton DSL.
proton_language.enable_semantic("triton")


def active_profiler() -> str | None:
    """Who a kernel compiled now records for: "proton_ik", "proton" or None."""
    if compile_mode.active_mode() is not None:
        return "proton_ik"
    if proton_flags.instrumentation_on:
        return "proton"
    return None


def _record(is_begin: bool, name: tl.constexpr, semantic) -> None:
    profiler = active_profiler()
    if profiler == "proton_ik":
        record = ik_language.enter_scope if is_begin else ik_language.exit_scope
    elif profiler == "proton":
        record = proton_language.enter_scope if is_begin else proton_language.exit_scope
    else:
        return
    record(name, _semantic=semantic)


@tl.builtin
def enter_scope(name: tl.constexpr, _semantic=None) -> None:
    """Record the begin of scope ``name`` (a compile-time string)."""
    _record(True, name, _semantic)


@tl.builtin
def exit_scope(name: tl.constexpr, _semantic=None) -> None:
    """Record the end of scope ``name``."""
    _record(False, name, _semantic)


class scope:
    """``with scopes.scope("name"):`` records a begin before the body and an end after it.

    Triton's code generator builds the context manager as ``scope(name, _semantic=...)``.
    """

    def __init__(self, name: tl.constexpr, _semantic=None):
        self.name = name
        self.semantic = _semantic

    def __enter__(self) -> None:
        _record(True, self.name, self.semantic)

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        _record(False, self.name, self.semantic)
