"""Code to run right after a module is imported: patches that must reach modules a library
imports only when a feature is first used (``torch.compile`` imports Inductor on its first call).

``call(name, callback)`` calls ``callback(module)`` at once if ``name`` is imported, else right
after its import. A finder first in ``sys.meta_path`` wraps the loader of the modules waited
for, and leaves ``sys.meta_path`` once nothing is waited for.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
import types
from collections.abc import Callable

__all__ = ["call", "cancel"]

Callback = Callable[[types.ModuleType], None]


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.waiting: dict[str, list[Callback]] = {}
        self.lock = threading.Lock()

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.waiting:  # every import asks: one dict lookup
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_call(module: types.ModuleType) -> None:
            exec_module(module)
            with self.lock:
                callbacks = self.waiting.pop(fullname, [])
                self.leave_if_idle()
            for callback in callbacks:
                callback(module)

        loader.exec_module = exec_then_call  # this spec's own loader: no other import sees it
        return spec

    def leave_if_idle(self) -> None:
        if not self.waiting and self in sys.meta_path:
            sys.meta_path.remove(self)


_finder = _AfterImport()


def call(name: str, callback: Callback) -> None:
    """``callback(module)`` now if module ``name`` is imported, else right after it is."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    with _finder.lock:
        waiting = _finder.waiting.setdefault(name, [])
        if callback not in waiting:
            waiting.append(callback)
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)


def cancel(name: str, callback: Callback) -> None:
    """Forget ``callback`` for ``name`` if it has not run yet."""
    with _finder.lock:
        waiting = _finder.waiting.get(name, [])
        if callback in waiting:
            waiting.remove(callback)
        if not waiting:
            _finder.waiting.pop(name, None)
        _finder.leave_if_idle()
