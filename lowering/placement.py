"""Where a record's PTX goes: a begin above the pure arithmetic before its marker, and a loop's
pair end below the cheap arithmetic after it.

ptxas moves no instruction across a read of the SM clock (``CS2R SR_CLOCKLO``), not even pure
arithmetic. LLVM places a scope's begin marker after whatever arithmetic it chose to compute
first, often all the addresses and masks of the scope's loads: behind the clock read they are
all live at once, where the plain kernel's schedule computes each next to its use. In gelu that
is 32 masks, and 14 more registers per thread (docs/PERFORMANCE.md, issue 10).

So a begin's lines (a clock read, and for a single record its store) go to the top of the run
of lines before its marker that only compute registers: arithmetic, moves (not of a clock),
``ld.param``, comments and ``.loc``. The run ends at anything else: a memory access, a barrier,
a branch, a label, inline asm (another marker, Triton's loads and stores), a clock read, a
carry-chain instruction. The begin's clock is then read before that arithmetic, which ptxas is
free to move into the scope, as it does in the plain kernel. What the kernel computes, the
records and their counts are unchanged; a scope's begin is earlier by that pure arithmetic.

In a loop, a pair's end goes the other way, below the run of cheap integer arithmetic after
its marker (``sunk``). ptxas moves nothing across the end's clock read either, and the
arithmetic after an end marker is often what the plain kernel computes early, inside the scope:
in flash attention, the next iteration's addresses and counters. Behind the clock read they came
after the iteration's last matrix multiply, ahead of its barrier, and cost about 3 points of the
kernel (docs/PERFORMANCE.md, issue 10). Below it, ptxas is free to move them into the scope.

A record moves only if its lines read no register of the kernel's (the ``%pik_`` registers are
written nowhere else, so no kernel instruction can depend on them): a record with a predicate
or a value stays where its register is defined. The end's clock read is issued after what the
end passes, so an end passes only what is cheap and never waits for the scope's work:
- no special register's read, division, square root or transcendental (``sinkable``);
- no instruction that reads a register its scope wrote (``written``): a spin's last clock read,
  a load's value;
- nothing in straight-line code, where the cost comes once and the delay would not pay for it;
- nothing where the run ends at another marker: a begin there takes the run into its own scope.
On the GPU, without the second rule short spins read more than 20 cycles long, and without the
third two back-to-back scopes did.
"""

from __future__ import annotations

import re

from proton_ik.lowering import ptx_text
from proton_ik.lowering.registers import PREFIX

# PTX opcodes (the part before the first ".") that compute registers only: no memory, no
# synchronization, no control flow, no effect on other threads.
PURE_OPCODES = frozenset(
    (
        *("abs", "add", "and", "bfe", "bfi", "bfind", "brev", "clz", "cnot", "copysign", "cos", "cvt"),
        *("cvta", "div", "dp2a", "dp4a", "ex2", "fma", "lg2", "lop3", "mad", "mad24", "max", "min"),
        *("mov", "mul", "mul24", "neg", "not", "or", "popc", "prmt", "rcp", "rem", "rsqrt", "sad"),
        *("selp", "set", "setp", "shf", "shl", "shr", "sin", "slct", "sqrt", "sub", "tanh", "testp"),
        "xor",
    )
)
_INSTRUCTION = re.compile(r"^(?:@!?%[\w$]+\s+)?(?P<op>[a-z][\w.]*)\b(?P<args>[^;]*);\s*$")
_CLOCKS = re.compile(r"%(?:clock|clock64|clock_hi|globaltimer\w*|pm\d\w*)\b")
_REGISTER = re.compile(r"%[A-Za-z_$][\w$]*(?:\.[xyzw])?")
_OURS = re.compile(rf"^(?:{re.escape(PREFIX)}[\w$]+|%clock|%clock64|%globaltimer)$")
ASM_BEGIN = "// begin inline asm"
ASM_END = "// end inline asm"


def is_pure(code: str) -> bool:
    """Whether a PTX line (comment stripped) is one instruction that only computes registers."""
    match = _INSTRUCTION.match(code.strip())
    if match is None:
        return False
    parts = match.group("op").split(".")
    if parts[0] == "ld":
        return parts[1:2] == ["param"]
    if parts[0] not in PURE_OPCODES or "cc" in parts[1:]:  # .cc: a carry chain, with addc
        return False
    return not _CLOCKS.search(match.group("args"))


def _passable(line: str) -> bool:
    """A line a begin may move above: blank, a comment (but inline asm's), ``.loc``, pure code."""
    text = line.strip()
    if text in (ASM_BEGIN, ASM_END):
        return False
    code = text.split("//", 1)[0].strip()
    return not code or code.startswith(".loc") or is_pure(code)


def reads_only_ours(lines: list[str]) -> bool:
    """Whether the registers ``lines`` name are all ours (``registers.PREFIX``) or clocks."""
    return all(
        _OURS.match(register) for line in lines for register in _REGISTER.findall(line.split("//", 1)[0])
    )


def hoisted(lines: list[str], site: int, start: int) -> int:
    """The line before which a begin marked at line ``site`` goes: the top of the run of passable
    lines before its marker (and before the ``// begin inline asm`` that opens it), never at or
    above the body's first line ``start``."""
    top = site - 1 if lines[site - 1].strip() == ASM_BEGIN else site
    while top - 1 > start and _passable(lines[top - 1]):
        top -= 1
    return top


def sunk(lines: list[str], site: int, end: int, inside: set[str]) -> int | None:
    """The line before which an end marked at line ``site`` goes: below the run of cheap lines
    (``sinkable``) after its marker and its ``// end inline asm``, never past the body's closing
    line ``end``, nor past a line that reads a register of ``inside`` (what its scope wrote).
    None where it stays: the run ends at another marker (inline asm of comments only), or there
    is no run."""
    bottom = site + 1 if lines[site + 1].strip() == ASM_END else site
    after = bottom + 1
    while after < end and sinkable(lines[after]) and not reads_any(lines[after], inside):
        after += 1
    if after == bottom + 1 or _is_marker(lines, after):
        return None
    return after


# What an end may pass: integer and address arithmetic of a few cycles each. Not a special
# register's read (``S2R``, 20 cycles and more), not a division, square root or transcendental:
# the end's clock read is issued after what it passes, so a slow one would delay it.
_CHEAP_OPCODES = frozenset(
    (
        *("abs", "add", "and", "bfe", "bfi", "brev", "clz", "cnot", "cvta", "lop3", "mad", "mad24"),
        *("max", "min", "mov", "mul", "mul24", "neg", "not", "or", "popc", "prmt", "sad", "selp"),
        *("set", "setp", "shf", "shl", "shr", "slct", "sub", "xor"),
    )
)
_SPECIAL = re.compile(rf"(?!{re.escape(PREFIX)})%[a-z_]+(?:\.[xyz])?\b(?!\d)")


def sinkable(line: str) -> bool:
    """A line an end may move below: blank, a comment (but inline asm's), ``.loc``, or cheap
    arithmetic that reads no special register."""
    text = line.strip()
    if text in (ASM_BEGIN, ASM_END):
        return False
    code = text.split("//", 1)[0].strip()
    if not code or code.startswith(".loc"):
        return True
    match = _INSTRUCTION.match(code)
    if match is None or not is_pure(code) or match.group("op").split(".")[0] not in _CHEAP_OPCODES:
        return False
    return not any(_SPECIAL.fullmatch(r) for r in _REGISTER.findall(match.group("args")))


def written(lines: list[str]) -> set[str]:
    """The registers that ``lines`` write: each instruction's first operand, or the registers of
    the vector it starts with (inline asm's, a wgmma's accumulators); none for stores, barriers
    and branches, whose first operand is an address, a number or a label."""
    found: set[str] = set()
    for line in lines:
        match = _INSTRUCTION.match(line.split("//", 1)[0].strip())
        if match is None:
            continue
        first = match.group("args").strip()
        first = first[: first.index("}") + 1] if first.startswith("{") else first.split(",", 1)[0]
        if not first.startswith("["):
            found.update(_REGISTER.findall(first))
    return found


def reads_any(line: str, registers: set[str]) -> bool:
    """Whether the instruction on ``line`` names any of ``registers``."""
    return any(register in registers for register in _REGISTER.findall(line.split("//", 1)[0]))


def _is_marker(lines: list[str], index: int) -> bool:
    """Whether an inline asm block opens at ``index`` with only comments in it: a marker."""
    if lines[index].strip() != ASM_BEGIN:
        return False
    inside = index + 1
    while inside < len(lines) and lines[inside].strip() != ASM_END:
        if not lines[inside].strip().startswith("//"):
            return False
        inside += 1
    return True


_BRANCH_TARGET = re.compile(r"\bbra(?:\.uni)?\s+(?P<label>[$\w]+);")


def in_loop(lines: list[str], site: int, start: int, end: int) -> bool:
    """Whether line ``site`` of the body between ``start`` and ``end`` lies in a loop: a branch
    after it goes back to a label before it."""
    before = {m["name"] for line in lines[start:site] if (m := ptx_text.LABEL.match(line))}
    return any(
        (m := _BRANCH_TARGET.search(line.split("//", 1)[0])) is not None and m["label"] in before
        for line in lines[site:end]
    )
