"""``unscoped=kernel``: one scope around a whole kernel that has none of its own.

Inductor's generated kernels, and a library's, carry no annotations. Under ``unscoped=kernel``
their PTX gets a begin marker before the entry's first instruction and an end marker before
each return, both named after the kernel, and then goes through the lowering like any other:
each unit records when it started and when it left, and a kernel of straight-line code (most
pointwise and reduction kernels) writes both as one pair.
"""

from __future__ import annotations

import re
import warnings

from proton_ik.contract.names import MAX_NAME_LENGTH, scope_name_problem
from proton_ik.dialect.markers import marker_text
from proton_ik.dialect.pik import RecordOp
from proton_ik.lowering import ptx_text

# What may precede the first instruction of an entry body: declarations, line info, comments.
_PREAMBLE = re.compile(r"^\s*(?:$|//|\.(?:reg|shared|local|const|pragma|loc)\b)")
_RETURN = re.compile(r"^\s*(?P<guard>@!?%\w+\s+)?(?:ret|exit)\s*;")


def kernel_scope_name(kernel: str) -> str:
    """The scope a kernel's name gives: the name itself, cut to the longest a scope may have,
    with characters a scope name may not hold replaced by '_'."""
    name = "".join(c if 0x20 <= ord(c) < 0x7F and c not in '"\\$' else "_" for c in kernel)
    name = name[:MAX_NAME_LENGTH] or "kernel"
    assert scope_name_problem(name) is None, name
    return name


def around_kernel(ptx: str) -> str | None:
    """The PTX with a scope named after the kernel around its whole body, or None where the
    kernel has a return under a predicate (an end there would be recorded on paths that do not
    return; LLVM's NVPTX back end branches to one return instead, so this is a warning only)."""
    lines = ptx.splitlines()
    start, end = ptx_text.entry_body(lines)
    kernel = ptx_text.kernel_name(ptx)
    name = kernel_scope_name(kernel)
    begin, finish = (marker_text(RecordOp(kind, name)) for kind in ("begin", "end"))
    depths = dict(ptx_text.brace_depths(lines, start, end))
    returns = [i for i in range(start + 1, end) if depths[i] == 1 and _RETURN.match(lines[i])]
    if any(_RETURN.match(lines[i])["guard"] for i in returns):  # type: ignore[index]
        warnings.warn(
            f"proton_ik: kernel '{kernel}' returns under a predicate, so unscoped=kernel cannot "
            "bracket it; it runs plain. Annotate it with pl.scope to record it",
            stacklevel=2,
        )
        return None
    first = next((i for i in range(start + 1, end) if not _PREAMBLE.match(lines[i])), end)
    out: list[str] = []
    for index, line in enumerate(lines):
        if index == first:
            out.append(f"\t{begin}")
        if index in returns:
            out.append(f"\t{finish}")
        out.append(line)
    return "\n".join(out) + ("\n" if ptx.endswith("\n") else "")
