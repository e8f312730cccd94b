"""Small facts read off a kernel's PTX text: its name, its parameters, its source files."""

from __future__ import annotations

import os
import re

_ENTRY = re.compile(r"^\s*\.visible\s+\.entry\s+(?P<name>[A-Za-z_$][\w$]*)\s*\(", re.MULTILINE)
_PARAM = re.compile(r"\.param\s+[^,)]*?\s(?P<name>[A-Za-z_$][\w$]*)\s*(?:,|$)")
_FILE = re.compile(r'^\s*\.file\s+(?P<index>\d+)\s+"(?P<path>[^"]*)"', re.MULTILINE)
LOC = re.compile(r"^\s*\.loc\s+(?P<file>\d+)\s+(?P<line>\d+)\s+(?P<column>\d+)")


def kernel_name(ptx: str) -> str:
    names = _ENTRY.findall(ptx)
    if len(names) != 1:
        raise ValueError(f"expected one .entry in the PTX, found {len(names)}: {names}")
    return names[0]


def entry_params(lines: list[str]) -> tuple[int, list[str]]:
    """The line index of the ``.entry`` and its parameter names, in order."""
    for index, line in enumerate(lines):
        if _ENTRY.match(line):
            params: list[str] = []
            for param_line in lines[index + 1 :]:
                if param_line.strip().startswith(")"):
                    return index, params
                match = _PARAM.search(param_line.strip())
                if match:
                    params.append(match.group("name"))
            break
    raise ValueError("no .entry with a parameter list in the PTX")


def brace_depths(lines: list[str], start: int, end: int):
    """(line index, brace depth after that line) for ``lines[start:end + 1]``, comments ignored."""
    depth = 0
    for index in range(start, end + 1):
        code = lines[index].split("//", 1)[0]
        depth += code.count("{") - code.count("}")
        yield index, depth


def entry_body(lines: list[str]) -> tuple[int, int]:
    """Line indices of the ``{`` and the matching ``}`` of the entry function's body.

    Inline-asm blocks inside the body carry braces of their own (Triton prints some closing
    braces at column 0), so the match counts depth."""
    entry, _ = entry_params(lines)
    start = next(i for i in range(entry, len(lines)) if lines[i].split("//", 1)[0].strip() == "{")
    end = next(i for i, depth in brace_depths(lines, start, len(lines) - 1) if depth == 0)
    return start, end


_LABEL = re.compile(r"^\s*(?P<name>[$\w]+):")
_WORD = re.compile(r"[$\w]+")
_CONTROL = re.compile(r"^\s*(?:@!?%\w+\s+)?(?:bra|ret|exit|brx\.idx|call)\b")


def straight_line_blocks(lines: list[str], start: int, end: int) -> list[int]:
    """For each line of the entry body, the index of the straight-line stretch it sits in.

    A new stretch starts at every label that something in the body refers to (a branch, a
    branch-target list) and after every branch, return or call of the function itself. LLVM's
    line-info labels (``$L__tmp3:``), which nothing branches to, do not split a stretch.
    Inline-asm blocks (brace depth above 1) are opaque: their own labels and branches loop
    inside them and always fall through."""
    referenced: set[str] = set()
    for index in range(start, end + 1):
        code = lines[index].split("//", 1)[0]
        if not _LABEL.match(code):
            referenced.update(_WORD.findall(code))
    blocks = [0] * len(lines)
    block = 0
    for index, depth in brace_depths(lines, start, end):
        code = lines[index].split("//", 1)[0]
        label = _LABEL.match(code)
        if depth == 1 and label and label.group("name") in referenced:
            block += 1
        blocks[index] = block
        if depth == 1 and _CONTROL.match(code):
            block += 1
    return blocks


def source_files(ptx: str) -> dict[int, str]:
    """``.file`` index -> base name of the source file."""
    return {int(m.group("index")): os.path.basename(m.group("path")) for m in _FILE.finditer(ptx)}
