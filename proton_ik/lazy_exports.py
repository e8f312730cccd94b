"""A package's names imported when first asked for (PEP 562), for packages whose ``__init__``
would otherwise import every module of theirs: the viewer's, so that a render worker process
imports the modules its part needs, not pandas and the writers of every format."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, namespace: dict[str, Any], exported_from: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose globals are ``namespace``: each
    name of ``exported_from`` is imported from its module when first asked for, then kept."""

    def __getattr__(name: str) -> Any:
        module = exported_from.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exported_from})

    return __getattr__, __dir__
