"""What the emitted PTX means, on the CPU: a small interpreter runs the instrumentation of real
sm_90 compiles for every thread of a grid, and the test reads the bytes back with layout.py's
dtypes.

The other compile tests check the PTX's text; these check what its stores put where. Each
thread is given its %tid, %ctaid, %nctaid and %smid, its thread-block cluster's registers (one
CTA a cluster unless the launch says otherwise), and distinct %clock64, %clock and
%globaltimer readings; the buffer starts poisoned. Then every CTA's header must name the CTA's
own linear id (x + y * nx + z * nx * ny) and sit at that id's region, every unit header must
hold the clock64 and globaltimer its writer read, in that order, every entry the tags and
clocks of its records, and no byte may be written by two threads, or outside the buffer.

The interpreter knows only the instructions the lowering emits (``mov`` from special registers,
``shr``/``shl``/``and``/``or``/``add``/``sub``/``min``/``div``/``rem``/``not``/``bfind``/``cvt``/``mul``/
``mad``, ``and.pred``, ``setp``
with ``eq``/``ne``/``lt`` and an optional ``and``, predicated vector ``st.global`` (with an L2
cache hint from ``createpolicy``),
``red.global`` add and max, branches to its own labels, ``bar.warp.sync``). It runs the
``%pik_`` instructions of a straight-line kernel in text order and skips the kernel's own, which
never touch a ``%pik_`` register; where ours read one of the kernel's registers (a predicate, an
event's index, a value), the test gives its value. A kernel sized at launch is handed the
address with its capacity's log2 in the low bits, as the allocator hands it over. Every thread of a CTA runs up to a
``bar.warp.sync`` before any goes on past it. Anything else on a ``%pik_`` register stops it with the line, so that a
change in the lowering fails here rather than going unchecked. A reduction must find its bytes
written before (the buffer is not cleared by anyone else).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

import numpy as np
import pytest
import triton
import triton.language as tl

import proton_ik.language as pl
from proton_ik.contract.layout import (
    CTA_HEADER_BYTES,
    CTA_HEADER_DTYPE,
    MAGIC,
    RECORD_BYTES,
    UNIT_HEADER_BYTES,
    UNIT_HEADER_DTYPE,
    VERSION,
    BufferLayout,
    Granularity,
    field_offset,
)
from proton_ik.contract.tags import COMPACT_DURATION_LIMIT, compact_tag, make_tag
from proton_ik.lowering.staging import STAGE_SYMBOL
from proton_ik.mode import Mode

POISON = 0xA5
SCRATCH = 0x7F00_0000_0000  # the profile_scratch address the launch hands over
SHARED = 0x1000  # where the CTA's shared memory array of ours (``staging.STAGE_SYMBOL``) begins
CLOCK0 = (3 << 32) + 0xFFFF_F000  # clock64 near a 32-bit wrap, so %clock and %clock64 differ
TIME0 = 1_700_000_000_000_000_000  # %globaltimer, ns: far from any clock64 value
SM_COUNT = 132
CLOCK_STEP = 37  # cycles between a thread's clock reads, by default
POLICY = 0xC0FFEE  # what createpolicy gives the interpreter: a value to hand on, nothing more


@triton.jit
def _add_scopes(x, y, out, offs, mask):
    with pl.scope("load"):
        a = tl.load(x + offs, mask=mask)
        b = tl.load(y + offs, mask=mask)
    pl.enter_scope("store")
    tl.store(out + offs, a + b, mask=mask)
    pl.exit_scope("store")


@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    _add_scopes(x, y, out, offs, offs < n)


@triton.jit
def repeated_add_kernel(x, y, out, n, repeats, BLOCK: tl.constexpr):
    """add_kernel's scopes in a loop that runs ``repeats`` times: segments sized at each launch
    (``contract.launch_bound``). The interpreter runs the body's records once, in text order."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    for _ in range(repeats):
        _add_scopes(x, y, out, offs, offs < n)


ADD_SIGNATURE = {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32", "BLOCK": "constexpr"}
# add_kernel's records in program order: (scope id, is_end), scopes numbered as first entered.
ADD_RECORDS = [(0, False), (0, True), (1, False), (1, True)]


# --- the interpreter -------------------------------------------------------------------------

_INSTRUCTION = re.compile(r"^(?:@(?P<negate>!?)(?P<guard>%\w+)\s+)?(?P<op>[\w.:]+)\s*(?P<args>.*);$")
_OPERAND = re.compile(r"\{[^}]*\}|\[[^\]]*\]|[^,\s][^,]*")
_ADDRESS = re.compile(r"^\[(?P<reg>%\w+)(?:\+(?P<offset>\d+))?\]$")
_LABEL = re.compile(r"^(?P<label>\$pik_\w+):$")
_COMPARE = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "ge": lambda a, b: a >= b,
}
_REDUCE = {"add": lambda a, b: a + b, "max": max}
_ARITHMETIC = {
    "shr": lambda a, b: a >> b,
    "shl": lambda a, b: a << b,
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
    "add": lambda a, b: a + b,  # an immediate may be negative (-1): the result is masked to width
    "sub": lambda a, b: a - b,
    "min": min,
    "max": max,
    "div": lambda a, b: a // b if b else 0,  # sampling's CTA stride
    "rem": lambda a, b: a % b if b else 0,
}
_BITS = {"u32": 32, "b32": 32, "s32": 32, "u64": 64, "b64": 64, "s64": 64, "pred": 1}


class PtxError(Exception):
    """An instruction the interpreter does not know, or one that misbehaves (e.g. an
    out-of-bounds store)."""


@dataclass(frozen=True)
class Instruction:
    line: int
    text: str
    op: list[str]  # "st.global.v4.b32" -> ["st", "global", "v4", "b32"]
    args: list[str]
    guard: str | None
    negate: bool


def parse_program(ptx: str) -> tuple[list[Instruction], dict[str, int], str]:
    """The instrumentation's instructions in text order, the index of each label among them, and
    the name of the entry's last parameter (Triton's profile_scratch)."""
    lines = ptx.splitlines()
    params = [m.group(1) for line in lines if (m := re.match(r"^\s*\.param\s+.*?(\w+),?$", line))]
    program: list[Instruction] = []
    labels: dict[str, int] = {}
    for number, raw in enumerate(lines, 1):
        text = raw.split("//")[0].strip()
        label = _LABEL.match(text)
        if label is not None:
            labels[label.group("label")] = len(program)
            continue
        mentions_ours = "%pik_" in text or "$pik_" in text or text.startswith("bar.warp.sync")
        if not text or text.startswith(".reg") or not (mentions_ours or text == "ret;"):
            continue
        match = _INSTRUCTION.match(text)
        if match is None:
            raise PtxError(f"PTX line {number}: cannot parse {text!r}")
        program.append(
            Instruction(
                number,
                text,
                match.group("op").split("."),
                [a.strip() for a in _OPERAND.findall(match.group("args"))],
                match.group("guard"),
                match.group("negate") == "!",
            )
        )
    return program, labels, params[-1]


@dataclass
class Thread:
    """One thread's special registers and what it read from the clocks, in order."""

    tid: int
    ctaid: tuple[int, int, int]
    nctaid: tuple[int, int, int]
    smid: int
    clock: int  # the next %clock64 value
    time: int  # the next %globaltimer value
    step: int = CLOCK_STEP  # how far the clock moves before each read
    reads: dict[str, list[int]] = field(
        default_factory=lambda: {"clock64": [], "clock": [], "globaltimer": [], "globaltimer_lo": []}
    )
    counters: dict[str, list[int]] = field(  # the full 64-bit counter behind each read, by name
        default_factory=lambda: {"clock64": [], "clock": [], "globaltimer": [], "globaltimer_lo": []}
    )
    inputs: dict[str, int] = field(default_factory=dict)  # the kernel's own registers that ours read
    stage: bytearray = field(default_factory=bytearray)  # the CTA's shared memory array of ours
    cluster: tuple[int, int, int] = (1, 1, 1)  # the launch's cluster shape, in CTAs

    def special(self, name: str) -> int:
        axis = "xyz".index(name[-1]) if name[-2] == "." else -1
        if name == "%tid.x":
            return self.tid
        if name.startswith("%ctaid."):
            return self.ctaid[axis]
        if name.startswith("%nctaid."):
            return self.nctaid[axis]
        if name.startswith("%clusterid."):
            return self.ctaid[axis] // self.cluster[axis]
        if name.startswith("%nclusterid."):
            return self.nctaid[axis] // self.cluster[axis]
        if name == "%cluster_ctarank":
            x, y, z = (c % d for c, d in zip(self.ctaid, self.cluster, strict=True))
            return x + y * self.cluster[0] + z * self.cluster[0] * self.cluster[1]
        if name == "%cluster_nctarank":
            return int(np.prod(self.cluster))
        if name == "%smid":
            return self.smid
        if name in self.inputs:
            return self.inputs[name]
        if name in ("%clock64", "%clock"):
            self.clock += self.step
            counter = self.clock
        elif name in ("%globaltimer", "%globaltimer_lo"):
            self.time += 32
            counter = self.time
        else:
            raise PtxError(f"unknown special register {name}")
        value = counter if name in ("%clock64", "%globaltimer") else counter & 0xFFFFFFFF
        self.reads[name[1:]].append(value)
        self.counters[name[1:]].append(counter)
        return value

    @property
    def record_clocks(self) -> list[int]:
        """The ``%clock`` reads of the records: every one but the first, the unit's start."""
        return self.reads["clock"][1:]


class Memory:
    """The launch's buffer, poisoned, with the thread that wrote each byte."""

    def __init__(self, size: int) -> None:
        self.data = np.full(size, POISON, dtype=np.uint8)
        self.writer = np.full(size, -1, dtype=np.int64)  # a thread's global index
        self.conflicts: list[str] = []
        self.reductions: list[tuple[int, int, int]] = []  # (byte, size, thread) of each red

    def store(self, address: int, data: bytes, writer: int, instruction: Instruction) -> None:
        start = address - SCRATCH
        if start < 0 or start + len(data) > len(self.data):
            raise PtxError(f"PTX line {instruction.line}: a store to byte {start}, outside the buffer")
        span = slice(start, start + len(data))
        others = set(self.writer[span].tolist()) - {-1, writer}
        if others:
            self.conflicts.append(f"bytes {start}..{start + len(data)}: thread {writer} and {sorted(others)}")
        self.data[span] = np.frombuffer(data, dtype=np.uint8)
        self.writer[span] = writer

    def reduce(
        self, address: int, size: int, combine, value: int, writer: int, instruction: Instruction
    ) -> None:
        """An atomic read-modify-write of a little-endian integer; its bytes must have been stored."""
        start = address - SCRATCH
        if start < 0 or start + size > len(self.data):
            raise PtxError(f"PTX line {instruction.line}: a reduction at byte {start}, outside the buffer")
        span = slice(start, start + size)
        if (self.writer[span] < 0).any():
            raise PtxError(
                f"PTX line {instruction.line}: a reduction at byte {start} finds bytes never written"
            )
        old = int.from_bytes(self.data[span].tobytes(), "little")
        new = combine(old, value) & ((1 << 8 * size) - 1)
        self.data[span] = np.frombuffer(new.to_bytes(size, "little"), dtype=np.uint8)
        self.reductions.append((start, size, writer))


def run_thread(
    program,
    labels,
    scratch_param: str,
    thread: Thread,
    memory: Memory,
    writer: int,
    regs=None,
    pc: int = 0,
    tag: int = 0,
) -> int | None:
    """Run one thread from ``pc`` with registers ``regs``: None once it returns, or where to go
    on after a ``bar.warp.sync``, which the other threads must reach first."""
    regs = {} if regs is None else regs

    def value(operand: str) -> int:
        if operand == STAGE_SYMBOL:
            return SHARED
        if operand.startswith("%pik_"):
            if operand not in regs:
                raise PtxError(f"{operand} is read before it is written")
            return regs[operand]
        if operand.startswith("%"):
            return thread.special(operand)
        return int(operand, 0)

    while pc < len(program):
        ins = program[pc]
        pc += 1
        base, args = ins.op[0], ins.args
        if ins.guard is not None:
            if not ins.guard.startswith("%pik_"):
                raise PtxError(f"PTX line {ins.line}: {ins.text!r} is guarded by the kernel's own predicate")
            if bool(regs[ins.guard]) == ins.negate:
                continue
        bits = _BITS.get(ins.op[-1], 0)
        mask = (1 << bits) - 1
        if base == "ret":
            return None
        if base == "bar" and ins.op[1:] == ["warp", "sync"]:
            return pc
        if base == "bra" and args[0] in labels:
            pc = labels[args[0]]
        elif base == "ld" and ins.op[1] == "param":
            if args[1] != f"[{scratch_param}]":
                raise PtxError(f"PTX line {ins.line}: reads {args[1]}, not profile_scratch")
            regs[args[0]] = SCRATCH + tag
        elif base == "mov":
            regs[args[0]] = value(args[1]) & mask
        elif base in _ARITHMETIC:
            a, b = value(args[1]), value(args[2])
            regs[args[0]] = _ARITHMETIC[base](a, b) & mask
        elif base == "not":
            regs[args[0]] = ~value(args[1]) & mask
        elif base == "bfind":
            regs[args[0]] = (value(args[1]).bit_length() - 1) & mask  # 0xFFFFFFFF for 0
        elif base == "cvt":  # cvt.u64.u32 zero-extends the u32; cvt.u32.u64 keeps the low half
            regs[args[0]] = value(args[1]) & mask & ((1 << _BITS[ins.op[1]]) - 1)
        elif base == "mul" and ins.op[1] == "wide":
            regs[args[0]] = value(args[1]) * value(args[2])
        elif base == "mad":
            product = value(args[1]) * value(args[2]) + value(args[3])
            regs[args[0]] = product & (mask if ins.op[1] == "lo" else (1 << 2 * bits) - 1)
        elif base == "setp" and ins.op[1] in _COMPARE:
            result = _COMPARE[ins.op[1]](value(args[1]), value(args[2]))
            # setp.lt.and.u32 p|q, a, b, c: p = (a < b) and c, q = !(a < b) and c
            first, _, second = args[0].partition("|")
            if ins.op[2] == "and":
                regs[first] = int(result and bool(value(args[3])))
                if second:
                    regs[second] = int(not result and bool(value(args[3])))
            else:
                regs[first] = int(result)
                if second:
                    regs[second] = int(not result)
        elif base == "createpolicy":  # an L2 eviction policy: opaque, only handed to stores
            regs[args[0]] = POLICY
        elif base == "st" and ins.op[1] == "global":
            if ins.op[2] == "L2::cache_hint":  # the policy is the last operand, and no data
                if value(args[-1]) != POLICY:
                    raise PtxError(f"PTX line {ins.line}: a cache hint without createpolicy's policy")
                ins = Instruction(
                    ins.line, ins.text, ins.op[:2] + ins.op[3:], args[:-1], ins.guard, ins.negate
                )
                args = ins.args
                bits = _BITS.get(ins.op[-1], 0)
                mask = (1 << bits) - 1
            address = _ADDRESS.match(args[0])
            if address is None:
                raise PtxError(f"PTX line {ins.line}: cannot read the address {args[0]}")
            where = regs[address.group("reg")] + int(address.group("offset") or 0)
            elements = [value(e.strip()) for e in args[1].strip("{}").split(",")]
            if len(elements) != int(ins.op[2][1:]):
                raise PtxError(f"PTX line {ins.line}: {ins.op[2]} with {len(elements)} values")
            data = b"".join((e & mask).to_bytes(bits // 8, "little") for e in elements)
            memory.store(where, data, writer, ins)
        elif base == "st" and ins.op[1] == "shared":
            address = _ADDRESS.match(args[0])
            if address is None:
                raise PtxError(f"PTX line {ins.line}: cannot read the address {args[0]}")
            where = regs[address.group("reg")] + int(address.group("offset") or 0) - SHARED
            elements = [value(e.strip()) for e in args[1].strip("{}").split(",")]
            data = b"".join((e & mask).to_bytes(bits // 8, "little") for e in elements)
            if where < 0 or where + len(data) > len(thread.stage):
                raise PtxError(f"PTX line {ins.line}: a shared store at byte {where}, outside the stage")
            thread.stage[where : where + len(data)] = data
        elif base == "cp" and ins.op[-1] == "bulk_group":  # cp.async.bulk.global.shared::cta
            destination, source = _ADDRESS.match(args[0]), _ADDRESS.match(args[1])
            if destination is None or source is None or ins.op[3:5] != ["global", "shared::cta"]:
                raise PtxError(f"PTX line {ins.line}: not a bulk copy it knows: {ins.text!r}")
            size, start = value(args[2]), regs[source.group("reg")] - SHARED
            if size <= 0 or size % 16 or start < 0 or start + size > len(thread.stage):
                raise PtxError(f"PTX line {ins.line}: a bulk copy of {size} bytes from byte {start}")
            memory.store(
                regs[destination.group("reg")], bytes(thread.stage[start : start + size]), writer, ins
            )
        elif base in ("fence", "cp"):  # the proxy fence, commit and wait: the copy above is done
            pass
        elif base == "red" and ins.op[1] == "global" and ins.op[2] in _REDUCE:
            address = _ADDRESS.match(args[0])
            if address is None:
                raise PtxError(f"PTX line {ins.line}: cannot read the address {args[0]}")
            where = regs[address.group("reg")] + int(address.group("offset") or 0)
            memory.reduce(where, bits // 8, _REDUCE[ins.op[2]], value(args[1]) & mask, writer, ins)
        else:
            raise PtxError(f"PTX line {ins.line}: the interpreter does not know {ins.text!r}")
    raise PtxError("the program ran off its end without a ret")


# --- launches --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A compiled kernel and what its launch must write."""

    ptx: str
    layout: BufferLayout
    granularity: Granularity
    num_warps: int
    paired: bool
    tag: int = 0  # a launch-sized kernel's log2(capacity), in the buffer address's low bits
    clock_step: int = CLOCK_STEP  # cycles between a thread's clock reads

    @property
    def threads(self) -> int:
        return self.num_warps * 32

    @property
    def staged(self) -> bool:
        return "cp.async.bulk" in self.ptx

    @property
    def threads_per_unit(self) -> int:
        return self.granularity.warps_per_unit(self.num_warps) * 32


def linear_cta(ctaid: tuple[int, int, int], grid: tuple[int, int, int]) -> int:
    x, y, z = ctaid
    return x + y * grid[0] + z * grid[0] * grid[1]


def smid_of(linear: int) -> int:
    return (7 * linear + 3) % SM_COUNT


@dataclass
class Launch:
    memory: Memory
    threads: dict[tuple[int, int], Thread]  # (linear CTA id, tid) -> the thread


def launch(
    case: Case,
    grid: tuple[int, int, int],
    clock_step: int | None = None,
    inputs=None,
    cluster: tuple[int, int, int] = (1, 1, 1),
) -> Launch:
    """Run every thread of the grid. Each thread's clock moves ``clock_step`` before each read;
    the default keeps every thread's readings apart from every other's. ``inputs(linear CTA id,
    tid)`` gives the values of the kernel's own registers that the instrumentation reads (a
    predicate, an event's index, a value). ``cluster``: the thread-block cluster's shape, which
    divides the grid."""
    program, labels, scratch = parse_program(case.ptx)
    clock_step = case.clock_step if clock_step is None else clock_step
    declared = re.search(rf"\.shared \.align \d+ \.b8 {STAGE_SYMBOL}\[(\d+)\];", case.ptx)
    stage_bytes = int(declared.group(1)) if declared else 0
    ctas = int(np.prod(grid))
    memory = Memory(ctas * case.layout.cta_bytes)
    threads = {}
    for z in range(grid[2]):
        for y in range(grid[1]):
            for x in range(grid[0]):
                linear = linear_cta((x, y, z), grid)
                running: dict[int, tuple[dict, int]] = {}
                stage = bytearray(stage_bytes)  # one per CTA, shared by its threads
                for tid in range(case.threads):
                    # Far apart for each thread, so that no thread's readings match another's.
                    writer = linear * case.threads + tid
                    clock, time = CLOCK0 + 10**6 * writer, TIME0 + 10**6 * writer
                    threads[linear, tid] = Thread(
                        tid, (x, y, z), grid, smid_of(linear), clock, time, clock_step,
                        inputs={} if inputs is None else inputs(linear, tid), stage=stage,
                        cluster=cluster,
                    )  # fmt: skip
                    running[tid] = ({}, 0)
                while running:  # every thread up to the next bar.warp.sync, then on from there
                    for tid, (regs, pc) in list(running.items()):
                        writer = linear * case.threads + tid
                        resume = run_thread(
                            program, labels, scratch, threads[linear, tid], memory, writer, regs, pc, case.tag
                        )
                        if resume is None:
                            del running[tid]
                        else:
                            running[tid] = (regs, resume)
    return Launch(memory, threads)


def compile_case(
    compile_kernel, mode: Mode, num_warps: int, capacity: int | None = None, clock_step: int = CLOCK_STEP
) -> Case:
    """add_kernel under ``mode``; with ``capacity``, the repeated add kernel, sized at launch to
    ``capacity`` slots per unit as the allocator would hand it over (its layout that launch's).
    ``clock_step``: the cycles between a thread's clock reads, so the pairs' durations."""
    if capacity is None:
        kernel = compile_kernel(add_kernel, ADD_SIGNATURE, {"BLOCK": 1024}, mode=mode, num_warps=num_warps)
        layout = BufferLayout.from_dict(kernel.metadata.proton_ik["layout"])
        return Case(kernel.asm["ptx"], layout, mode.granularity, num_warps, mode.pairs, clock_step=clock_step)
    signature = {**ADD_SIGNATURE, "repeats": "i32"}
    kernel = compile_kernel(repeated_add_kernel, signature, {"BLOCK": 1024}, mode=mode, num_warps=num_warps)
    assert kernel.metadata.proton_ik["capacity"]["source"] == "launch"
    compiled = BufferLayout.from_dict(kernel.metadata.proton_ik["layout"])
    layout = dataclasses.replace(compiled, capacity=capacity)
    tag = capacity.bit_length() - 1
    return Case(kernel.asm["ptx"], layout, mode.granularity, num_warps, mode.pairs, tag, clock_step)


LONG = COMPACT_DURATION_LIMIT + 11  # a clock step that makes every pair too long for one slot
MODES = {
    "warp-pairs": (Mode(), 4),  # staged: two pairs per unit, copied at the exit (lowering.staging)
    "warp-pairs-unstaged": (Mode(stage=False), 4),
    "warp-singles-ring": (Mode(pairs=False, capacity=2), 4),  # four single entries in a ring of 2
    # layout 3: 8-byte slots
    "layout-3-pairs": (Mode(layout=3), 4),  # staged, each pair in one slot
    "layout-3-pairs-unstaged": (Mode(layout=3, stage=False), 4),
    "layout-3-long-pairs": (Mode(layout=3), 4, None, LONG),  # staged, each pair in two slots
    "layout-3-long-pairs-unstaged": (Mode(layout=3, stage=False), 4, None, LONG),
    # pairs of exactly the limit (two slots) and one cycle under it (one slot)
    "layout-3-pairs-at-the-limit": (Mode(layout=3, stage=False), 4, None, COMPACT_DURATION_LIMIT),
    "layout-3-pairs-under-the-limit": (Mode(layout=3, stage=False), 4, None, COMPACT_DURATION_LIMIT - 1),
    "layout-3-singles-ring": (Mode(layout=3, pairs=False, capacity=2), 4),
    "warpgroup": (Mode(granularity=Granularity.WARPGROUP, capacity=4), 8),
    "warp_2": (Mode(granularity=Granularity.WARP_2, capacity=4), 8),  # Proton's warp_2: 2 warps a unit
    "warpgroup_2": (Mode(granularity=Granularity.WARPGROUP_2, capacity=4), 16),  # 8 warps a unit
    "warp_8": (Mode(granularity=Granularity.WARP_8, capacity=4), 8),  # one unit: the CTA's 8 warps
    "cta": (Mode(granularity=Granularity.CTA, capacity=8), 4),
    # Sized at launch: the capacity comes in the address, a ring of 1 wraps, 4 holds both pairs
    "launch-sized-1": (Mode(layout=2), 4, 1),
    "launch-sized-4": (Mode(layout=2), 4, 4),
    "launch-sized-auto": (Mode(), 4, 4),  # layout=auto: a loop with no tensor core, layout 3
    # in layout 3, a ring of 2 wraps with long pairs
    "layout-3-launch-sized-2": (Mode(layout=3), 4, 2, LONG),
    "launch-sized-singles-warpgroup": (Mode(pairs=False, granularity=Granularity.WARPGROUP), 8, 8),
}


@pytest.fixture(scope="module", params=list(MODES))
def case(request, compile_kernel) -> Case:
    return compile_case(compile_kernel, *MODES[request.param])


@pytest.fixture(scope="module")
def warp_pairs(compile_kernel) -> Case:
    return compile_case(compile_kernel, *MODES["warp-pairs"])


@pytest.mark.parametrize(("staged_name", "unstaged_name", "shape", "stores"), [
    ("layout-3-pairs", "layout-3-pairs-unstaged", "v2.b32", 6),  # a pair: one slot, or two where long
    ("warp-pairs", "warp-pairs-unstaged", "v4.b32", 2),
])  # fmt: skip
def test_a_short_kernels_pairs_are_staged_and_copied_once_at_the_exit(
    compile_kernel, staged_name, unstaged_name, shape, stores
):
    staged = compile_case(compile_kernel, *MODES[staged_name]).ptx
    unstaged = compile_case(compile_kernel, *MODES[unstaged_name]).ptx
    assert (
        staged.count(f"st.shared.{shape} \t[%pik_ss") == stores and "st.global.L2::cache_hint" not in staged
    )
    assert staged.count("cp.async.bulk.global.shared::cta.bulk_group") == 1
    assert (
        "st.shared" not in unstaged
        and unstaged.count(f"st.global.L2::cache_hint.{shape} \t[%pik_a]") == stores
    )
    # the singles of pairs=off never stage: a single's store is inside its scope
    singles = compile_case(compile_kernel, *MODES["warp-singles-ring"]).ptx
    assert "cp.async.bulk" not in singles


# --- what the bytes must hold ----------------------------------------------------------------


def expected_entries(case: Case, clocks: list[int]) -> tuple[list[tuple[int, ...]], int]:
    """The slots (or v2 entries) a unit writes, in order, and its header's tally. In layout
    version 3 each slot is two words: (tag, clock) for a single record, (compact tag +
    duration, begin clock) for a pair that fits, and the begin's and the end's records in two
    slots for one that does not. In version 2: (tag, clock) for a single record, (begin tag,
    begin clock, end tag, end clock) for a pair. ``clocks``: the writer's %clock reads, in order."""
    records = [
        (make_tag(scope, is_end), clock) for (scope, is_end), clock in zip(ADD_RECORDS, clocks, strict=True)
    ]
    if not case.paired:
        return records, len(records)
    entries: list[tuple[int, ...]] = []
    tally = 0  # twice the slots less the records: two for each pair in two slots
    for (begin_tag, begin), (end_tag, end) in zip(records[::2], records[1::2], strict=True):
        paired_begin = begin_tag | make_tag(0, False, paired=True)
        duration = (end - begin) & 0xFFFFFFFF
        if case.layout.version < 3:
            entries.append((paired_begin, begin, end_tag, end))
        elif duration < COMPACT_DURATION_LIMIT:
            entries.append((compact_tag(begin_tag & 0xFFFF) | duration, begin))
        else:
            entries += [(paired_begin, begin), (end_tag, end)]
            tally += 2
    return entries, tally


def regions(case: Case, memory: Memory):
    """CTA headers, unit headers and ring slots, read with layout.py's dtypes."""
    layout = case.layout
    raw = memory.data.reshape(-1, layout.cta_bytes)
    segments = raw[:, layout.unit_offset(0) : layout.unit_offset(layout.units)]
    segments = segments.reshape(len(raw), layout.units, layout.unit_bytes)
    cta = raw[:, :CTA_HEADER_BYTES].copy().view(CTA_HEADER_DTYPE)[:, 0]
    unit = segments[..., :UNIT_HEADER_BYTES].copy().view(UNIT_HEADER_DTYPE)[..., 0]
    slots = segments[..., UNIT_HEADER_BYTES:].copy().view(layout.slot_dtype)
    return cta, unit, slots


GRID_3D = (2, 3, 2)  # x, y and z all above 1
GRIDS = [(1, 1, 1), (5, 1, 1), GRID_3D, (3, 2, 4)]


def test_every_cta_header_names_its_own_linear_id_at_its_own_region(warp_pairs: Case):
    for grid in GRIDS:
        memory = launch(warp_pairs, grid).memory
        cta, _, _ = regions(warp_pairs, memory)
        ids = np.arange(int(np.prod(grid)))
        assert (cta["magic"] == MAGIC).all() and (cta["version"] == VERSION).all()
        assert cta["cta"].tolist() == ids.tolist(), grid
        assert cta["smid"].tolist() == [smid_of(i) for i in ids], grid
        assert (np.stack([cta["nctaid_x"], cta["nctaid_y"], cta["nctaid_z"]], axis=1) == grid).all()
        assert (cta["units"] == warp_pairs.layout.units).all()
        assert (cta["capacity"] == warp_pairs.layout.capacity).all()
        assert memory.conflicts == [], grid


@pytest.mark.parametrize(
    ("grid", "cluster"),
    [((4, 3, 1), (1, 1, 1)), ((4, 3, 2), (2, 1, 1)), ((4, 2, 2), (2, 2, 1)), ((2, 2, 4), (1, 1, 4))],
)
def test_every_cta_header_names_its_cluster_its_rank_and_the_clusters_ctas(warp_pairs: Case, grid, cluster):
    """Thread 0 stores the linear cluster id (x + y * nx + z * nx * ny over the cluster grid),
    the CTA's rank in its cluster (x-major within the cluster shape) and the cluster's CTAs."""
    memory = launch(warp_pairs, grid, cluster=cluster).memory
    cta, _, _ = regions(warp_pairs, memory)
    ids = np.arange(int(np.prod(grid)))
    x, y, z = ids % grid[0], ids // grid[0] % grid[1], ids // (grid[0] * grid[1])
    (cx, cy, cz), (nx, ny) = cluster, (grid[0] // cluster[0], grid[1] // cluster[1])
    assert cta["cluster"].tolist() == (x // cx + y // cy * nx + z // cz * nx * ny).tolist()
    assert cta["cluster_rank"].tolist() == (x % cx + y % cy * cx + z % cz * cx * cy).tolist()
    assert (cta["cluster_ctas"] == cx * cy * cz).all()
    # Each cluster holds every rank once.
    ranks = sorted(zip(cta["cluster"].tolist(), cta["cluster_rank"].tolist(), strict=True))
    assert ranks == [(c, r) for c in range(len(ids) // (cx * cy * cz)) for r in range(cx * cy * cz)]
    assert memory.conflicts == []


def test_headers_and_entries_hold_what_each_writer_read(case: Case):
    """Each unit's writer (lane 0 of its first warp) stores its own clock64 and globaltimer
    readings, start then end, the counts, and each record's or pair's slots in ring position
    ``i & (capacity - 1)``. Untouched slots keep the poison, but for the one a staged copy
    rounds up to 16 bytes."""
    result = launch(case, GRID_3D)
    _, unit, slots = regions(case, result.memory)
    layout = case.layout
    for linear in range(int(np.prod(GRID_3D))):
        for u in range(layout.units):
            writer = result.threads[linear, u * case.threads_per_unit]
            header = unit[linear, u]
            # The start's low halves, read at the start, and its full values rebuilt at the end.
            assert int(header["start_clock"]) == writer.counters["clock"][0]
            assert int(header["start_time"]) == writer.counters["globaltimer_lo"][0]
            assert writer.reads["clock64"] == [int(header["end_clock"])]
            assert writer.reads["globaltimer"] == [int(header["end_time"])]
            entries, tally = expected_entries(case, writer.record_clocks)
            assert (int(header["entries"]), int(header["end_magic"]), int(header["tally"])) == (
                len(entries),
                MAGIC,
                tally,
            )
            assert int(header["reserved"]) == 0
            newest = range(max(0, len(entries) - layout.capacity), len(entries))
            for i in newest:
                slot = slots[linear, u, i & (layout.capacity - 1)]
                if layout.version >= 3:
                    stored: tuple[int, ...] = (int(slot["tag"]), int(slot["clock"]))
                elif case.paired:
                    first, second = slot["first"], slot["second"]
                    stored = (
                        int(first["tag"]),
                        int(first["clock"]),
                        int(second["tag"]),
                        int(second["clock"]),
                    )
                else:  # a v2 single entry leaves its second 8 bytes as they were
                    stored = (int(slot["first"]["tag"]), int(slot["first"]["clock"]))
                    assert slot["second"].tobytes() == bytes([POISON]) * RECORD_BYTES
                assert stored == entries[i], (linear, u, i)
            used = {i & (layout.capacity - 1) for i in newest}
            for empty in sorted(set(range(layout.capacity)) - used):
                if not (case.staged and empty == len(entries)):  # a staged copy's rounding
                    assert slots[linear, u, empty].tobytes() == bytes([POISON]) * layout.slot_bytes
    assert result.memory.conflicts == []


def test_only_each_units_writer_stores_and_only_inside_its_own_region(case: Case):
    result = launch(case, GRID_3D)
    layout, memory = case.layout, result.memory
    written = memory.writer >= 0
    writers = np.unique(memory.writer[written] % case.threads)
    assert writers.tolist() == list(range(0, case.threads, case.threads_per_unit))
    offsets = np.arange(len(memory.data))
    cta_of_byte = offsets // layout.cta_bytes
    assert (memory.writer[written] // case.threads == cta_of_byte[written]).all()
    within = offsets % layout.cta_bytes
    unit_of_byte = (within - CTA_HEADER_BYTES) // layout.unit_bytes
    in_segment = (within >= CTA_HEADER_BYTES) & (unit_of_byte < layout.units)
    owner = memory.writer % case.threads // case.threads_per_unit
    assert (owner[written & in_segment] == unit_of_byte[written & in_segment]).all()
    header_end = field_offset(CTA_HEADER_DTYPE, "reserved")
    in_header = within < CTA_HEADER_BYTES
    assert (memory.writer[written & in_header] % case.threads == 0).all()  # thread 0 of the CTA
    assert (written | ~(within < header_end)).all()  # every named header field is written
    assert not (written & ~in_header & ~in_segment).any()  # the alignment padding is untouched
    assert memory.conflicts == []


def test_the_interpreter_refuses_what_it_does_not_know():
    """A new instruction in the lowering must fail these tests, not be skipped."""
    ptx = "\t.param .u64 k_param_0\n\tld.param.u64 \t%pik_scratch, [k_param_0];\n\txor.b32 \t%pik_t, %pik_n, 1;\n\tret;\n"
    program, labels, scratch = parse_program(ptx)
    thread = Thread(0, (0, 0, 0), (1, 1, 1), 0, CLOCK0, TIME0)
    with pytest.raises(PtxError, match=r"line 3: the interpreter does not know 'xor.b32"):
        run_thread(program, labels, scratch, thread, Memory(64), 0)


def test_every_record_store_keeps_its_line_in_l2_and_no_header_store_does(case: Case):
    """Records' stores carry the L2 eviction policy made once in the prologue
    (``stores_ptx.RECORD_POLICY``); the headers' stores, at the exit, keep the default."""
    lines = [line.strip() for line in case.ptx.splitlines()]
    records = [line for line in lines if " st.global" in line and "[%pik_a" in line]
    assert records or case.staged  # staged: no record store to the buffer
    assert all(re.match(r"@%pik_\w+ st\.global\.L2::cache_hint\.", line) for line in records)
    assert all(line.endswith(", %pik_pol;") for line in records)
    assert sum(line.startswith("createpolicy.fractional.L2::evict_last.b64") for line in lines) == 1
    headers = [line for line in lines if "st.global" in line and "[%pik_a" not in line]
    assert headers and not any("cache_hint" in line for line in headers)


def test_every_cta_header_holds_the_capacity_its_segments_have(case: Case):
    """The compiled ring's, or a launch-sized kernel's: the one its address carried."""
    result = launch(case, GRID_3D)
    cta, _, _ = regions(case, result.memory)
    assert (cta["capacity"] == case.layout.capacity).all()
    assert (cta["units"] == case.layout.units).all()


def test_a_launch_sized_kernel_handed_an_address_with_no_capacity_writes_the_smallest_ring(compile_kernel):
    """A launch the allocator was not told of hands the kernel an address whose low bits are 0:
    in layout 3 the kernel reads the two-slot ring (``layout.min_capacity``) that keeps each
    unit header 16-byte aligned, as the runtime reads it (``launch_sizing.untagged``)."""
    case = dataclasses.replace(compile_case(compile_kernel, Mode(layout=3), 4, 2, LONG), tag=0)
    result = launch(case, (3, 1, 1))
    cta, unit, _ = regions(case, result.memory)
    assert (cta["capacity"] == 2).all() and (unit["end_magic"] == MAGIC).all()
    assert result.memory.conflicts == []
