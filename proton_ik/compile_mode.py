"""The compile-time switch: the one record of the mode annotated kernels compile under now.

``proton_ik.language`` reads it while a kernel is traced (scope calls emit markers only while a
mode is set); the Triton stage hook reads it for a direct ``triton.compile()``, whose options do
not carry ``knobs.compilation.instrumentation_mode``. ``set_mode`` is the only writer: a session
calls it on start, pause and finalize, and ``compiling`` (under ``proton_ik.instrumented``) for a
block.

The switch is per process, as Triton's knobs are: while a mode is set, kernels compiled in every
thread are instrumented. ``set_mode`` is atomic, but blocks restore what they found, so blocks
opened in several threads at once must close in the reverse order. ``plain()`` is the one
exception, and per thread: inside it, kernels compiled by that thread are plain whatever the
mode (a compiler's analysis of a kernel, a launch path that cannot record).

Integrations that must follow the switch (``proton_ik.torch_compile``) register a listener with
``on_change``, so that this module imports none of them.

This module imports neither the lowering nor xDSL, so that the language can read the switch
cheaply; the lowering is imported the first time a mode is set.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

from proton_ik.mode import Mode

__all__ = ["active_mode", "compiling", "on_change", "plain", "set_mode"]

_mode: Mode | None = None
_switching = threading.Lock()
_listeners: list[Callable[[Mode | None], None]] = []


class _PlainHere(threading.local):
    depth = 0


_plain_here = _PlainHere()


def active_mode() -> Mode | None:
    """The mode kernels compile under now in this thread, or None while they compile plain."""
    return None if _plain_here.depth else _mode


def on_change(listener: Callable[[Mode | None], None]) -> None:
    """Call ``listener(mode)`` after every change of the mode (None: plain), from now on."""
    if listener not in _listeners:
        _listeners.append(listener)


@contextlib.contextmanager
def plain() -> Iterator[None]:
    """Kernels compiled by this thread inside the block are plain, whatever the mode."""
    _plain_here.depth += 1
    try:
        yield
    finally:
        _plain_here.depth -= 1


def set_mode(mode: Mode | None) -> Mode | None:
    """Compile annotated kernels under ``mode`` from now on (None: plain); returns the mode it
    replaces. Sets Triton's ``instrumentation_mode`` knob, which the JIT copies into its options
    and so into its cache key, and installs or removes the stage hook."""
    global _mode
    with _switching:
        previous = _mode
        if mode is not None or previous is not None:
            from proton_ik.lowering import triton_hook

            if mode is None:
                triton_hook.uninstall()
            else:
                triton_hook.install(active_mode)
        _mode = mode
        from triton import knobs  # here: importing proton_ik (its viewer, on a laptop) needs no Triton

        knobs.compilation.instrumentation_mode = "" if mode is None else mode.knob
        if mode != previous:
            for listener in _listeners:
                listener(mode)
    return previous


@contextlib.contextmanager
def compiling(mode: Mode | None) -> Iterator[None]:
    """Compile under ``mode`` inside the block; the mode found on entry comes back on exit, also
    when the block raises."""
    previous = set_mode(mode)
    try:
        yield
    finally:
        set_mode(previous)
