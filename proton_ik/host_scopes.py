"""Host-side scopes: ``proton_ik.scope(name)`` around Python code that launches kernels, as in
``triton.profiler``. Each launch made inside one records the stack of open scopes (outermost
first) in its metadata, and the trace groups the launches under them.

The stack is per thread, and scopes work whether or not a session runs, so library code can
carry them unconditionally.
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_local = threading.local()
# Host scopes open now, in every thread: the launch path reads it (a module attribute, no call)
# and asks for this thread's stack only when some scope is open somewhere.
open_count = 0
_counting = threading.Lock()


def _stack() -> list[str]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def open_scopes() -> list[str]:
    """The host scopes open on this thread, outermost first (a copy)."""
    return list(getattr(_local, "stack", ()))


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"a host scope name is a non-empty string, got {name!r}")
    return name


def _ignore_metrics(metrics: object) -> None:
    if metrics:
        warnings.warn(
            "proton_ik: host-scope metrics are accepted and not recorded; the trace groups the "
            "launches of each scope and times them on the device",
            stacklevel=3,
        )


def enter_scope(name: str, *, metrics: dict[str, float] | None = None) -> None:
    """Open host scope ``name`` on this thread."""
    global open_count
    _ignore_metrics(metrics)
    _stack().append(_check_name(name))
    with _counting:
        open_count += 1


def exit_scope(name: str | None = None, *, metrics: dict[str, float] | None = None) -> None:
    """Close the innermost host scope (``name``, if given, must be it)."""
    global open_count
    _ignore_metrics(metrics)
    stack = _stack()
    if not stack:
        raise RuntimeError(
            f"proton_ik.exit_scope({name!r}) with no host scope open: call proton_ik.enter_scope first"
        )
    if name is not None and stack[-1] != name:
        raise RuntimeError(
            f"proton_ik.exit_scope({name!r}) but the innermost open host scope is {stack[-1]!r}; "
            "host scopes close in the reverse order they opened"
        )
    stack.pop()
    with _counting:
        open_count -= 1


class scope:
    """``with proton_ik.scope("step"):`` or ``@proton_ik.scope("step")``."""

    def __init__(self, name: str, metrics: dict[str, float] | None = None):
        self.name = _check_name(name)
        self.metrics = metrics

    def __enter__(self) -> scope:
        enter_scope(self.name, metrics=self.metrics)
        return self

    def __exit__(self, *exc_info: object) -> None:
        exit_scope(self.name)

    def __call__(self, func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with scope(self.name, self.metrics):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]
