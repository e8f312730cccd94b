"""Inductor's copy of a user kernel's source, with the imports of proton_ik it needs: part of
the torch.compile integration (``torch_compile`` installs ``with_imports`` on Inductor's
``codegen.wrapper.user_defined_triton_kernel_transitive_closure_source_code``, for good).

Why: Inductor compiles a user's ``@triton.jit`` kernel from source it writes anew, with
Triton's imports only, so the kernel's ``import proton_ik.language as pl`` (any alias),
``from proton_ik.language import scope`` and event handles held in globals are lost, and the
kernel fails with ``NameError``. ``with_imports`` adds the imports the kernel and its
``@triton.jit`` helpers use, right after the kernel. And since Inductor's copy lives in a file
of its own, a scope there would name that file and its lines: the copy's last line points each
function back at the user's file and lines (``relocate``).
"""

from __future__ import annotations

import ast
import sys
import types
from collections.abc import Callable, Collection, Iterator
from typing import Any

__all__ = ["original_places", "proton_ik_imports", "relocate", "with_imports"]

_PACKAGE = "proton_ik"


def _is_ours(value: object) -> bool:
    module = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
    return isinstance(module, str) and (module == _PACKAGE or module.startswith(_PACKAGE + "."))


def _import_line(name: str, value: object) -> str | None:
    """The statement that binds ``name`` to ``value`` in a new module, if ``value`` is ours."""
    from triton.language import constexpr

    if isinstance(value, constexpr):
        # Inductor writes the global itself from the value's repr (pl.Event's names its module).
        return "import proton_ik.language" if _is_ours(value.value) else None
    if not _is_ours(value):
        return None
    if isinstance(value, types.ModuleType):
        return f"import {value.__name__} as {name}"
    owner, attribute = getattr(value, "__module__", ""), getattr(value, "__name__", None)
    if attribute and getattr(sys.modules.get(owner), attribute, None) is value:
        return f"from {owner} import {attribute} as {name}"
    return None


def proton_ik_imports(kernel) -> list[str]:
    """The import statements that a copy of ``kernel``'s source, and of the ``@triton.jit``
    functions it calls, needs for the names of proton_ik it uses (as Inductor finds names: the
    functions' global names, followed through the JIT functions among them)."""
    lines = ["import proton_ik.language"]  # binds `proton_ik`, which pl.Event's repr names
    for function in _jit_closure(kernel):
        scope = function.fn.__globals__
        for name in function.fn.__code__.co_names:
            if (line := _import_line(name, scope.get(name))) is not None and line not in lines:
                lines.append(line)
    return lines if len(lines) > 1 else []


def _jit_closure(kernel) -> Iterator[Any]:
    """``kernel`` and the ``@triton.jit`` functions it calls, each once (as Inductor finds them:
    the functions' global names, followed through the JIT functions among them)."""
    from triton.runtime.jit import JITFunction

    seen: set[int] = set()
    pending = [kernel]
    while pending:
        function = pending.pop()
        if id(function) in seen or getattr(function, "fn", None) is None:
            continue
        seen.add(id(function))
        yield function
        scope = function.fn.__globals__
        pending.extend(
            value
            for name in function.fn.__code__.co_names
            if isinstance(value := scope.get(name), JITFunction)
        )


def _with_imports(source: str, imports: list[str]) -> str:
    """``source`` (the kernel's definition first) with ``imports`` right after the kernel, before
    the globals Inductor writes after it."""
    if not imports:
        return source
    try:
        first = ast.parse(source).body[0]
    except (SyntaxError, IndexError):
        return source + "\n" + "\n".join(imports) + "\n"
    lines = source.splitlines()
    end = first.end_lineno or len(lines)
    return "\n".join([*lines[:end], *imports, *lines[end:]]) + "\n"


def original_places(kernel) -> dict[str, tuple[str, int]]:
    """Where ``kernel`` and the ``@triton.jit`` functions it calls are written: each one's file
    and the line of its ``def``, as Triton reads them for its source locations (none where this
    Triton has no such reader)."""
    try:
        from triton.runtime.jit import JITFunction, get_jit_fn_file_line
    except ImportError:  # Triton moved it: the copy keeps the locations Inductor's file gives
        return {}
    places: dict[str, tuple[str, int]] = {}
    for function in _jit_closure(kernel):
        if isinstance(function, JITFunction) and function.__name__ not in places:
            try:
                places[function.__name__] = get_jit_fn_file_line(function)
            except (AttributeError, OSError, TypeError):
                continue
    return places


def relocate(namespace: dict[str, Any], places: dict[str, tuple[str, int]]) -> None:
    """Point each ``@triton.jit`` function of Inductor's copy (in ``namespace``, the copy's
    module) at the file and lines of the user's original (``places``, from
    ``original_places``): Triton takes a function's source locations, and so the file and line
    of each scope, from its code object's file and its first line. Run as the copy's module
    loads, before Triton hashes the function (its hash holds the first line). Where anything of
    this moved in Triton, the copy keeps its own locations: a compile never fails for this."""
    try:
        from triton.runtime.jit import JITFunction, get_jit_fn_file_line
    except ImportError:
        return
    for name, (file, line) in places.items():
        function = _copied(namespace, name, JITFunction, others=places.keys() - {name})
        if function is None or function.hash is not None:
            continue
        try:
            _, copied_line = get_jit_fn_file_line(function)
            function.fn.__code__ = function.fn.__code__.replace(co_filename=file)
            function.starting_line_number += line - copied_line
        except (AttributeError, TypeError, ValueError):
            continue


def _copied(namespace: dict[str, Any], name: str, jit_function: type, others: Collection[str] = ()) -> Any:
    """The ``@triton.jit`` function that the copy binds to ``name``: Inductor decorates the kernel
    with its autotuner, which holds the function as ``fn``, and may rename it ``<name>_<n>``
    (``unique_user_kernel_names``), a name that none of the copy's ``others`` has. None where the
    copy has no such function."""
    candidates = [namespace.get(name)]
    candidates += [
        value
        for key, value in namespace.items()
        if key.startswith(name + "_") and key[len(name) + 1 :].isdigit() and key not in others
    ]
    for value in candidates:
        for function in (value, getattr(value, "fn", None)):
            if isinstance(function, jit_function):
                return function
    return None


def _with_places(source: str, places: dict[str, tuple[str, int]]) -> str:
    """``source`` with a last statement that relocates its functions to ``places``."""
    if not places:
        return source
    return f"{source.rstrip()}\nimport proton_ik.inductor_source\nproton_ik.inductor_source.relocate(globals(), {places!r})\n"


def with_imports(write_source: Callable[..., str]) -> Callable[..., str]:
    """Wrap Inductor's writer of a user kernel's source: the source it writes, with
    ``proton_ik_imports`` right after the kernel, and, for a kernel that uses proton_ik, a last
    line that points its functions' source locations at the user's file (``relocate``): a
    scope then names the line the user wrote, not a line of Inductor's generated file.
    Wrapping a wrapped writer changes nothing."""
    if getattr(write_source, "_proton_ik", False):
        return write_source

    def source_with_imports(kernel: Any, *args: Any, **kwargs: Any) -> str:
        imports = proton_ik_imports(kernel)
        source = _with_imports(write_source(kernel, *args, **kwargs), imports)
        return _with_places(source, original_places(kernel)) if imports else source

    source_with_imports._proton_ik = True  # type: ignore[attr-defined]
    return source_with_imports
