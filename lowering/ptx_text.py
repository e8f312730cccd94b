"""Small facts read off a kernel's PTX text: its name, its parameters, its source files."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

_ENTRY = re.compile(r"^\s*\.visible\s+\.entry\s+(?P<name>[A-Za-z_$][\w$]*)\s*\(", re.MULTILINE)
_PARAM = re.compile(r"\.param\s+[^,)]*?\s(?P<name>[A-Za-z_$][\w$]*)\s*(?:,|$)")
_FILE = re.compile(r'^\s*\.file\s+(?P<index>\d+)\s+"(?P<path>[^"]*)"', re.MULTILINE)
LOC = re.compile(r"^\s*\.loc\s+(?P<file>\d+)\s+(?P<line>\d+)\s+(?P<column>\d+)")


def kernel_name(ptx: str) -> str:
    names = _ENTRY.findall(ptx)
    if len(names) != 1:
        raise ValueError(f"expected one .entry in the PTX, found {len(names)}: {names}")
    return names[0]


_TARGET = re.compile(r"^\s*\.target\s+sm_(?P<sm>\d+)")


def target_sm(lines: list[str]) -> int | None:
    """The SM version of the module's ``.target`` directive (``sm_90a`` -> 90), or None."""
    found = next((m for line in lines if (m := _TARGET.match(line))), None)
    return None if found is None else int(found["sm"])


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


LABEL = re.compile(r"^\s*(?P<name>[$\w]+):")  # a label at the start of a line
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
        label = LABEL.match(code)
        # A label's own name is no reference, but what follows it is: `$L_brx_0: .branchtargets A, B;`
        referenced.update(_WORD.findall(code[label.end() :] if label else code))
    blocks = [0] * len(lines)
    block = 0
    for index, depth in brace_depths(lines, start, end):
        code = lines[index].split("//", 1)[0]
        label = LABEL.match(code)
        if depth == 1 and label and label.group("name") in referenced:
            block += 1
        blocks[index] = block
        if depth == 1 and _CONTROL.match(code):
            block += 1
    return blocks


_TRANSFER = re.compile(
    r"^\s*(?P<guard>@!?%\w+\s+)?(?P<op>bra|brx\.idx|ret|exit|call)(?:\.uni)?\b(?P<operands>[^;]*)"
)
_BRANCH_TARGETS = re.compile(r"^\s*(?P<name>[$\w]+):\s*\.branchtargets\b(?P<rest>.*)")


def branch_target_lists(lines: list[str], start: int, end: int) -> dict[str, list[str]]:
    """``.branchtargets`` lists of the entry body (for ``brx.idx``): name -> labels, in order.

    LLVM prints one label a line after the list's name; a list may also sit on one line."""
    lists: dict[str, list[str]] = {}
    current: str | None = None
    for index in range(start, end + 1):
        code = lines[index].split("//", 1)[0]
        declared = _BRANCH_TARGETS.match(code)
        if declared is not None:
            current, code = declared.group("name"), declared.group("rest")
            lists[current] = []
        if current is not None:
            lists[current] += _WORD.findall(code.split(";", 1)[0])
            if ";" in code:
                current = None
    return lists


@dataclass(frozen=True)
class ControlFlow:
    """The entry function's control flow over its straight-line blocks.

    ``blocks`` maps each line to its block (``straight_line_blocks``); ``successors`` maps each
    block to the blocks control may pass to next; ``returns`` holds the blocks that may leave the
    kernel (``ret``, ``exit``); ``transfers`` maps a block to the line of the branch, return or
    call that ends it."""

    entry: int
    blocks: list[int]
    successors: dict[int, list[int]]
    returns: frozenset[int]
    transfers: dict[int, int]


def control_flow(lines: list[str], start: int, end: int) -> ControlFlow:
    """The control-flow graph of the entry body ``lines[start:end + 1]``.

    Inline-asm blocks (brace depth above 1) are opaque and fall through, as in
    ``straight_line_blocks``; a call returns to the next line."""
    blocks = straight_line_blocks(lines, start, end)
    labels: dict[str, int] = {}
    transfers: dict[int, int] = {}
    for index, depth in brace_depths(lines, start, end):
        code = lines[index].split("//", 1)[0]
        label = LABEL.match(code)
        if depth == 1 and label:
            labels.setdefault(label.group("name"), blocks[index])
        if depth == 1 and _TRANSFER.match(code):
            transfers[blocks[index]] = index
    target_lists = branch_target_lists(lines, start, end)
    last = blocks[end]
    successors: dict[int, list[int]] = {}
    returns: set[int] = set()
    for block in range(blocks[start], last + 1):
        next_block = [block + 1] if block < last else []
        if block not in transfers:
            successors[block] = next_block
            continue
        transfer = _TRANSFER.match(lines[transfers[block]].split("//", 1)[0])
        assert transfer is not None, "transfers holds only lines that _TRANSFER matched"
        op, guarded = transfer.group("op"), transfer.group("guard") is not None
        names = _WORD.findall(transfer.group("operands"))
        if op == "bra":
            targets = [names[-1]]
        elif op == "brx.idx":
            targets = target_lists[names[-1]]
        else:
            targets = []
        unknown = [name for name in targets if name not in labels]
        if unknown:
            raise ValueError(f"line {transfers[block] + 1} of the PTX branches to unknown labels {unknown}")
        if op in ("ret", "exit"):
            returns.add(block)
        falls_through = guarded or op == "call"
        successors[block] = [labels[name] for name in targets] + (next_block if falls_through else [])
    return ControlFlow(blocks[start], blocks, successors, frozenset(returns), transfers)


def line_locations(lines: list[str]) -> list[str | None]:
    """For each line, ``file:line`` of the nearest ``.loc`` before it (None before the first)."""
    files = source_files("\n".join(lines))
    locations: list[str | None] = []
    current: str | None = None
    for text in lines:
        loc = LOC.match(text)
        if loc is not None and int(loc.group("line")) > 0:
            current = f"{files.get(int(loc.group('file')), '<kernel>')}:{loc.group('line')}"
        locations.append(current)
    return locations


def source_files(ptx: str) -> dict[int, str]:
    """``.file`` index -> base name of the source file."""
    return {int(m.group("index")): os.path.basename(m.group("path")) for m in _FILE.finditer(ptx)}
