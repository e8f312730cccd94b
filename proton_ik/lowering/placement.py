"""Where a begin's PTX goes: above the pure arithmetic that precedes its marker.

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

A begin moves only if its lines read no register of the kernel's (the ``%pik_`` registers are
written nowhere else, so no kernel instruction can depend on them): a record with a predicate
or a value stays where its register is defined. Ends stay where they are, so that a begin never
passes the end of the scope before it.
"""

from __future__ import annotations

import re

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
_OURS = re.compile(r"^%(?:pik_[\w$]+|clock|clock64|globaltimer)$")
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
    """Whether the registers ``lines`` name are all ``%pik_`` registers or clocks."""
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
