"""Real compiles of annotated Triton and Gluon kernels to sm_90 cubins, through Triton's ptxas.

Each kernel compiles once per module; the tests read its PTX, cubin and metadata.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import proton_ik
import proton_ik.language as pl
from proton_ik.contract.layout import (
    CTA_HEADER_DTYPE,
    ENTRY_BYTES,
    MAGIC,
    UNIT_HEADER_DTYPE,
    BufferLayout,
    Granularity,
    field_offset,
    next_power_of_two,
    vector_fields,
)
from proton_ik.contract.tags import TAG_END_BIT, TAG_SCOPE_MASK, make_tag
from proton_ik.lowering import placement
from proton_ik.lowering.pikgpu_to_ptx import EXIT_LABEL
from proton_ik.mode import DEFAULT_RING_CAPACITY, Mode

TARGET = GPUTarget("cuda", 90, 32)
# A single record: slot (and, mad), clock, store, count the entry, count the single.
INSTRUCTIONS_PER_SINGLE = 6
# A pair: the begin only reads the clock; the end reads it, finds the slot, stores, counts.
INSTRUCTIONS_PER_PAIR_BEGIN = 1
INSTRUCTIONS_PER_PAIR_END = 5
# Staged (a short kernel's pairs, lowering.staging): the end reads the clock, finds its stage
# slot from the count (the bound keeps it below the stage's size), stores to shared memory, counts.
INSTRUCTIONS_PER_STAGED_PAIR_END = 4
ENTRIES_OFFSET = field_offset(UNIT_HEADER_DTYPE, "entries")


@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    with pl.scope("load"):
        a = tl.load(x + offs, mask=mask)
        b = tl.load(y + offs, mask=mask)
    pl.enter_scope("store")
    tl.store(out + offs, a + b, mask=mask)
    pl.exit_scope("store")


@triton.jit
def softmax_kernel(out, inp, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    with pl.scope("load"):
        x = tl.load(inp + row * in_stride + cols, mask=mask, other=-float("inf"))
    with pl.scope("reduce"):
        x = x - tl.max(x, axis=0)
        num = tl.exp(x)
        y = num / tl.sum(num, axis=0)
    with pl.scope("store"):
        tl.store(out + row * out_stride + cols, y, mask=mask)


@triton.jit
def matmul_kernel(
    a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PROFILE: tl.constexpr
):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a + rm[:, None] * K + rk[None, :]
    b_ptrs = b + rk[:, None] * N + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, K, BK):
        if PROFILE:
            pl.enter_scope("k_step")
        acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
        if PROFILE:
            pl.exit_scope("k_step")
        a_ptrs += BK
        b_ptrs += BK * N
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16))


@triton.jit
def control_flow_kernel(x, out, n, iters, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.zeros((BLOCK,), tl.float32)
    with pl.scope("outer"):
        for i in range(iters):
            with pl.scope("iteration"):
                acc += tl.load(x + offs + i * n, mask=mask)
        if pid % 2 == 0:
            pl.enter_scope("branch")
            acc = acc * 2
        pl.exit_scope("branch")
    tl.store(out + offs, acc, mask=mask)


@triton.jit
def fp8_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    with pl.scope("convert"):
        v = tl.load(x + offs, mask=offs < n).to(tl.bfloat16)
    tl.store(out + offs, v, mask=offs < n)


@triton.jit
def early_return_kernel(x, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    pl.enter_scope("all")
    if pid * BLOCK >= n:
        pl.exit_scope("all")
        return
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + offs, 1.0, mask=offs < n)
    pl.exit_scope("all")


@triton.jit(noinline=True)
def plain_helper(x, pid, n):
    offs = pid * 128 + tl.arange(0, 128)
    tl.store(x + offs, 2.0, mask=offs < n)


@triton.jit
def calls_helper_kernel(x, n, BLOCK: tl.constexpr):
    with pl.scope("call"):
        plain_helper(x, tl.program_id(0), n)


@triton.jit
def print_kernel(x, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    with pl.scope("print"):
        tl.device_print("offs", offs)
    tl.store(x + offs, 1.0, mask=offs < n)


@triton.jit
def nested_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    with pl.scope("outer"):
        with pl.scope("inner"):
            v = tl.load(x + offs, mask=mask)
        v = v * 2 + 1
    with pl.scope("outer"):
        tl.store(out + offs, v, mask=mask)


@gluon.jit
def gluon_add_kernel(x, y, out, n, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([4], [32], [4], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    mask = offs < n
    with pl.scope("load"):
        a = gl.load(x + offs, mask=mask)
        b = gl.load(y + offs, mask=mask)
    pl.enter_scope("store")
    gl.store(out + offs, a + b, mask=mask)
    pl.exit_scope("store")


ADD_SIGNATURE = {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32", "BLOCK": "constexpr"}
MATMUL_SIGNATURE = {
    "a": "*fp16",
    "b": "*fp16",
    "c": "*fp16",
    "M": "i32",
    "N": "i32",
    "K": "i32",
    "BM": "constexpr",
    "BN": "constexpr",
    "BK": "constexpr",
    "PROFILE": "constexpr",
}
# Pointers and sizes divisible by 16, as Triton's launcher specializes them: this is what lets the
# loads become cp.async.
MATMUL_ATTRS = {(i,): [["tt.divisibility", 16]] for i in range(6)}


@dataclass
class Case:
    kernel: object
    mode: Mode
    num_warps: int
    scopes: list[str]
    capacity: int  # entries per unit the kernel should get
    source: str  # what decided them: "bound", "launch", "ring" or "option"

    @property
    def ptx(self) -> str:
        return self.kernel.asm["ptx"]

    @property
    def mask(self) -> str:
        """The slot mask's operand: the capacity less one, or a launch-sized kernel's register."""
        return "%pik_mask" if self.source == "launch" else str(self.capacity - 1)

    @property
    def staged(self) -> bool:
        """Whether the pairs go through shared memory (``lowering.staging``)."""
        return "cp.async.bulk.global.shared::cta" in self.ptx

    @property
    def layout(self) -> BufferLayout:
        units = self.num_warps // self.mode.granularity.warps_per_unit(self.num_warps)
        return BufferLayout(units=units, capacity=self.capacity)


def explicit(mode: Mode) -> tuple[int, str]:
    """The capacity and source of a mode with capacity=N: a ring of N entries."""
    return mode.capacity, "option"


def one_pair_per_scope(scopes: list[str]) -> tuple[int, str]:
    """capacity=auto for a kernel whose scopes each pair once in straight-line code."""
    return next_power_of_two(len(scopes)), "bound"


def first_line(fn, name: str) -> int:
    """The file line where ``fn`` first mentions scope ``name``."""
    lines, start = inspect.getsourcelines(fn.fn)
    return start + next(i for i, line in enumerate(lines) if f'"{name}"' in line)


def source_file(fn) -> str:
    """The base name of the file that defines ``fn``: the scope table's file for its scopes."""
    return Path(inspect.getsourcefile(fn.fn)).name


@dataclass(frozen=True)
class Site:
    """What the splice put at one marker: ``kind`` is "record", "pair begin" or "pair end"."""

    line: int  # index of the "// pik ..." line
    kind: str
    instructions: list[str]


def sites(ptx: str) -> list[Site]:
    lines = ptx.splitlines()
    found = []
    for index, line in enumerate(lines):
        match = re.fullmatch(r"\s*// pik (record|pair begin|pair end)", line)
        if match is None:
            continue
        body = []
        for following in lines[index + 1 :]:
            if "%pik_" not in following:
                break
            body.append(following.strip())
        found.append(Site(index, match.group(1), body))
    return found


@dataclass(frozen=True)
class Record:
    """A single record."""

    line: int  # index of the "// pik record" line
    scope: int
    is_end: bool
    instructions: list[str]


def records(ptx: str) -> list[Record]:
    found = []
    for site in sites(ptx):
        if site.kind != "record":
            continue
        store = next(b for b in site.instructions if " st.global" in b)
        tag = int(re.search(r"\{(\d+), %pik_c\}", store).group(1))
        found.append(Record(site.line, tag & TAG_SCOPE_MASK, bool(tag >> TAG_END_BIT & 1), site.instructions))
    return found


@dataclass(frozen=True)
class Pair:
    """A begin and its end, stored together as one entry at the end."""

    begin: Site
    end: Site
    scope: int
    register: str


def pairs(ptx: str) -> list[Pair]:
    """The pairs in the order of their ends, each matched to its begin by its clock register."""
    found = sites(ptx)
    begins = {}
    for site in found:
        if site.kind == "pair begin":
            register = re.fullmatch(r"mov\.u32 \t(%pik_b\d+), %clock;", site.instructions[0]).group(1)
            assert register not in begins, f"{register} is set by two pair begins"
            begins[register] = site
    result = []
    for site in found:
        if site.kind != "pair end":
            continue
        store = next(b for b in site.instructions if " st.global" in b or " st.shared" in b)
        begin_tag, register, end_tag = re.search(r"\{(\d+), (%pik_b\d+), (\d+), %pik_c\}", store).groups()
        scope = int(end_tag) & TAG_SCOPE_MASK
        assert (int(begin_tag), int(end_tag)) == (make_tag(scope, False, paired=True), make_tag(scope, True))
        result.append(Pair(begins.pop(register), site, scope, register))
    assert not begins, f"pair begins without an end: {sorted(begins)}"
    return result


def single_instructions(scope: int, is_end: bool, mask: str) -> list[str]:
    slot = [
        f"and.b32 \t%pik_t, %pik_n, {mask};",
        f"mad.wide.u32 \t%pik_a, %pik_t, {ENTRY_BYTES}, %pik_rec;",
    ]
    clock = ["mov.u32 \t%pik_c, %clock;"]
    # An end reads the clock first, so that its own arithmetic is outside the scope.
    return [
        *(clock + slot if is_end else slot + clock),
        f"@%pik_w st.global.L2::cache_hint.v2.b32 \t[%pik_a], {{{make_tag(scope, is_end)}, %pik_c}}, %pik_pol;",
        "add.s32 \t%pik_n, %pik_n, 1;",
        "add.s32 \t%pik_tally, %pik_tally, 1;",
    ]


def pair_end_instructions(pair: Pair, mask: str, staged: bool = False) -> list[str]:
    tags = make_tag(pair.scope, False, paired=True), make_tag(pair.scope, True)
    if staged:
        return [
            "mov.u32 \t%pik_c, %clock;",
            f"mad.lo.u32 \t%pik_ss, %pik_n, {ENTRY_BYTES}, %pik_sh;",
            f"@%pik_w st.shared.v4.b32 \t[%pik_ss], {{{tags[0]}, {pair.register}, {tags[1]}, %pik_c}};",
            "add.s32 \t%pik_n, %pik_n, 1;",
        ]
    return [
        "mov.u32 \t%pik_c, %clock;",
        f"and.b32 \t%pik_t, %pik_n, {mask};",
        f"mad.wide.u32 \t%pik_a, %pik_t, {ENTRY_BYTES}, %pik_rec;",
        f"@%pik_w st.global.L2::cache_hint.v4.b32 \t[%pik_a], {{{tags[0]}, {pair.register}, {tags[1]}, %pik_c}}, %pik_pol;",
        "add.s32 \t%pik_n, %pik_n, 1;",
    ]


_BRANCH = re.compile(r"^\s*(?:@!?%\w+\s+)?(?:bra|brx\.idx|ret|exit)\b")


def straight_line(lines: list[str], first: int, last: int) -> bool:
    """Every path from line ``first`` reaches line ``last``: no branch, return or exit between
    them, and no label between them that a branch jumps to."""
    targets = {m.group(1) for line in lines if (m := re.search(r"\bbra(?:\.uni)?\s+([$\w]+);", line))}
    for line in lines[first:last]:
        code = line.split("//", 1)[0]
        label = re.match(r"^\s*([$\w]+):", code)
        if _BRANCH.match(code) or (label and label.group(1) in targets):
            return False
    return True


def cp_async_count(ptx: str) -> int:
    return sum(1 for line in ptx.splitlines() if "cp.async" in line and not line.strip().startswith("//"))


def in_loop(lines: list[str], index: int) -> bool:
    """Some label before ``index`` is the target of a branch after it: ``index`` is in a loop."""
    labels = {m.group(1) for line in lines[:index] if (m := re.match(r"^(\$L__BB\d+_\d+):", line))}
    return any(
        re.search(rf"\bbra(\.uni)?\s+{re.escape(label)};", line) for line in lines[index:] for label in labels
    )


def conditionally_skipped(lines: list[str], index: int) -> bool:
    """A predicated branch before ``index`` jumps to a label after it."""
    after = {m.group(1) for line in lines[index:] if (m := re.match(r"^(\$L__BB\d+_\d+):", line))}
    return any(
        (m := re.search(r"@!?%p\d+ bra(?:\.uni)?\s+(\$L__BB\d+_\d+);", line)) and m.group(1) in after
        for line in lines[:index]
    )


@pytest.fixture(scope="module")
def add(compile_kernel) -> Case:
    mode, scopes = Mode(), ["load", "store"]
    kernel = compile_kernel(add_kernel, ADD_SIGNATURE, {"BLOCK": 1024}, mode=mode, num_warps=4)
    return Case(kernel, mode, 4, scopes, *one_pair_per_scope(scopes))


@pytest.fixture(scope="module")
def add_warpgroups(compile_kernel) -> Case:
    mode = Mode(granularity=Granularity.WARPGROUP, capacity=64)
    kernel = compile_kernel(add_kernel, ADD_SIGNATURE, {"BLOCK": 2048}, mode=mode, num_warps=8)
    return Case(kernel, mode, 8, ["load", "store"], *explicit(mode))


@pytest.fixture(scope="module")
def softmax(compile_kernel) -> Case:
    mode = Mode()
    signature = {
        "out": "*fp32",
        "inp": "*fp32",
        "in_stride": "i32",
        "out_stride": "i32",
        "n_cols": "i32",
        "BLOCK": "constexpr",
    }
    kernel = compile_kernel(softmax_kernel, signature, {"BLOCK": 1024}, mode=mode, num_warps=4)
    scopes = ["load", "reduce", "store"]
    return Case(kernel, mode, 4, scopes, *one_pair_per_scope(scopes))


MATMUL_CONSTANTS = {"BM": 128, "BN": 128, "BK": 64}


@pytest.fixture(scope="module")
def matmul(compile_kernel) -> Case:
    mode = Mode()
    kernel = compile_kernel(
        matmul_kernel,
        MATMUL_SIGNATURE,
        {**MATMUL_CONSTANTS, "PROFILE": True},
        mode=mode,
        attrs=MATMUL_ATTRS,
        num_warps=8,
        num_stages=3,
    )
    # The K loop's trip count, cdiv(K, BLOCK_K), is computed at each launch; the compiled layout
    # is the ring of a launch that passes no arguments.
    return Case(kernel, mode, 8, ["k_step"], DEFAULT_RING_CAPACITY, "launch")


@pytest.fixture(scope="module")
def matmul_plain(compile_kernel):
    return compile_kernel(
        matmul_kernel,
        MATMUL_SIGNATURE,
        {**MATMUL_CONSTANTS, "PROFILE": False},
        attrs=MATMUL_ATTRS,
        num_warps=8,
        num_stages=3,
    )


@pytest.fixture(scope="module")
def nested(compile_kernel) -> Case:
    mode = Mode()
    signature = {"x": "*fp32", "out": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    kernel = compile_kernel(nested_kernel, signature, {"BLOCK": 1024}, mode=mode, num_warps=4)
    # outer(inner), then outer again: three pairs in straight-line code.
    return Case(kernel, mode, 4, ["outer", "inner"], next_power_of_two(3), "bound")


@pytest.fixture(scope="module")
def gluon_add(compile_kernel) -> Case:
    mode, scopes = Mode(), ["load", "store"]
    kernel = compile_kernel(gluon_add_kernel, ADD_SIGNATURE, {"BLOCK": 1024}, mode=mode, num_warps=4)
    return Case(kernel, mode, 4, scopes, *one_pair_per_scope(scopes))


@pytest.fixture(scope="module")
def control_flow(compile_kernel) -> Case:
    # layout 2: these tests read its lines (layout=auto would give this loop layout 3)
    mode = Mode(granularity=Granularity.CTA, capacity=256, layout=2)
    signature = {"x": "*fp32", "out": "*fp32", "n": "i32", "iters": "i32", "BLOCK": "constexpr"}
    kernel = compile_kernel(control_flow_kernel, signature, {"BLOCK": 256}, mode=mode, num_warps=4)
    return Case(kernel, mode, 4, ["outer", "iteration", "branch"], *explicit(mode))


CASES = ["add", "add_warpgroups", "softmax", "matmul", "nested", "gluon_add", "control_flow"]


@pytest.fixture(params=CASES)
def case(request) -> Case:
    return request.getfixturevalue(request.param)


def test_the_cubin_is_built(case: Case):
    assert isinstance(case.kernel.asm["cubin"], bytes)
    assert len(case.kernel.asm["cubin"]) > 0
    assert case.kernel.metadata.target == TARGET


def test_profile_scratch_is_the_layouts_cta_bytes(case: Case):
    assert case.kernel.metadata.profile_scratch_size == case.layout.cta_bytes
    assert case.kernel.metadata.profile_scratch_align == 128


def test_metadata_carries_the_scope_table(case: Case):
    fn = case.kernel.src.fn
    metadata = dict(case.kernel.metadata.proton_ik)
    capacity = metadata.pop("capacity")
    launch_bound = metadata.pop("launch_bound", None)
    assert (launch_bound is not None) == (case.source == "launch")
    kept = metadata.pop("occupancy", None)  # occupancy=keep, the default: what the cap found
    assert (kept is not None) == (case.mode.occupancy == "keep")
    assert kept is None or kept["cap"] is not None or "setmaxnreg" in kept["reason"], kept
    assert metadata == {
        "mode": str(case.mode),
        "num_warps": case.num_warps,
        "warps_per_unit": case.mode.granularity.warps_per_unit(case.num_warps),
        "layout": case.layout.to_dict(),
        "scopes": [
            {"id": i, "name": name, "line": first_line(fn, name), "file": source_file(fn)}
            for i, name in enumerate(case.scopes)
        ],
    }
    assert (capacity["entries"], capacity["source"]) == (case.capacity, case.source)


def test_no_marker_remains(case: Case):
    assert "pik.marker" not in case.ptx
    assert sites(case.ptx)


def test_every_single_record_costs_six_instructions(case: Case):
    for record in records(case.ptx):
        assert len(record.instructions) == INSTRUCTIONS_PER_SINGLE, record.instructions
        assert record.instructions == single_instructions(record.scope, record.is_end, case.mask)


def test_every_pair_costs_one_instruction_at_its_begin_and_five_at_its_end(case: Case):
    """Four at its end where staged: no ring slot to find."""
    end_cost = INSTRUCTIONS_PER_STAGED_PAIR_END if case.staged else INSTRUCTIONS_PER_PAIR_END
    for pair in pairs(case.ptx):
        assert len(pair.begin.instructions) == INSTRUCTIONS_PER_PAIR_BEGIN, pair.begin.instructions
        assert len(pair.end.instructions) == end_cost, pair.end.instructions
        assert pair.begin.instructions == [f"mov.u32 \t{pair.register}, %clock;"]
        assert pair.end.instructions == pair_end_instructions(pair, case.mask, case.staged)


def test_every_site_is_a_single_or_half_of_a_pair(case: Case):
    found = sites(case.ptx)
    assert found
    assert len(found) == len(records(case.ptx)) + 2 * len(pairs(case.ptx))
    assert case.ptx.count("add.s32 \t%pik_tally, %pik_tally, 1;") == len(records(case.ptx))
    assert case.ptx.count("add.s32 \t%pik_n, %pik_n, 1;") == len(records(case.ptx)) + len(pairs(case.ptx))


def test_pairs_lie_in_straight_line_code(case: Case):
    lines = case.ptx.splitlines()
    for pair in pairs(case.ptx):
        assert pair.begin.line < pair.end.line
        assert straight_line(lines, pair.begin.line, pair.end.line)


def test_each_pair_has_a_begin_clock_register_of_its_own(case: Case):
    found = pairs(case.ptx)
    declared = re.findall(r"^\t\.reg \.b32 \t%pik_b<(\d+)>;$", case.ptx, flags=re.MULTILINE)
    assert declared == ([str(len(found))] if found else [])
    assert sorted(p.register for p in found) == sorted(f"%pik_b{k}" for k in range(len(found)))


def test_every_scope_is_begun_and_ended(case: Case):
    events = {(r.scope, r.is_end) for r in records(case.ptx)}
    events |= {(p.scope, is_end) for p in pairs(case.ptx) for is_end in (False, True)}
    assert events == {(scope, is_end) for scope in range(len(case.scopes)) for is_end in (False, True)}


def test_records_replace_the_markers_inline_asm(case: Case):
    """Or move (``lowering.placement``): a begin above the pure arithmetic before its marker, to
    right below what stopped it; a pair's end below the cheap arithmetic after its marker, to
    right above what stopped it. A begin never stops at a pure instruction; an end stops at cheap
    arithmetic only where it reads a register its scope wrote."""
    lines = case.ptx.splitlines()
    begin_of_end = {pair.end.line: pair.begin.line for pair in pairs(case.ptx)}
    for site in sites(case.ptx):
        above = lines[site.line - 1].strip()
        below = lines[site.line + 1 + len(site.instructions)].strip()
        if above == "// begin inline asm":
            assert below == "// end inline asm"
            continue
        begin = site.kind == "pair begin" or (site.kind == "record" and "%clock" not in site.instructions[0])
        if begin:
            assert not placement.is_pure(above.split("//")[0]), (site, above)
        elif below != "// begin inline asm":  # the kernel's own inline asm: a load or a store
            code = below.split("//")[0].strip()
            assert code and not code.startswith(".loc"), (site, below)
            if placement.sinkable(below):  # cheap arithmetic: it stopped the end by reading the scope's work
                scope = placement.written(lines[begin_of_end[site.line] : site.line])
                assert placement.reads_any(code, scope), (site, below)


def test_one_epilogue_and_one_ret(case: Case):
    lines = [line.strip() for line in case.ptx.splitlines()]
    assert lines.count(f"{EXIT_LABEL}:") == 1
    assert lines.count("ret;") == 1
    assert lines.index(f"{EXIT_LABEL}:") < lines.index("ret;")
    assert sum(line.startswith("@") and line.endswith("ret;") for line in lines) == 0


def test_every_header_is_written_at_the_exit_and_no_store_of_ours_before_the_first_record(case: Case):
    """The kernel's first loads wait on no store of ours (docs/PERFORMANCE.md, issue 10): the
    prologue stores nothing; the epilogue writes the unit header's three 16-byte parts (start
    times, end times, counts) and thread 0 the CTA header's three."""
    lines = [line.strip() for line in case.ptx.splitlines()]
    exit_at = lines.index(f"{EXIT_LABEL}:")
    first_site = min(site.line for site in sites(case.ptx))
    ours = [i for i, line in enumerate(lines) if line.startswith("@%pik_") and " st.global." in line]
    assert not [i for i in ours if i < first_site]
    headers = [lines[i] for i in ours if "[%pik_unit_base+" in lines[i] or "[%pik_base+" in lines[i]]
    assert [line.split("[", 1)[1].split("]")[0] for line in headers] == [
        "%pik_unit_base+0", "%pik_unit_base+16", f"%pik_unit_base+{ENTRIES_OFFSET}",
        "%pik_base+0", "%pik_base+16", "%pik_base+32",
    ]  # fmt: skip
    assert all(lines.index(line) > exit_at for line in headers)
    assert headers[2].endswith(f"{{%pik_n, {MAGIC}, %pik_tally, 0}};")
    assert lines[lines.index(headers[-1]) + 1] == "ret;"


def test_the_prologue_reads_profile_scratch(case: Case):
    params = re.findall(r"\.param .*?(\w+_param_\d+)\s*,?$", case.ptx, flags=re.MULTILINE)
    assert params[-1].endswith(f"_param_{len(params) - 1}")
    assert f"ld.param.u64 \t%pik_scratch, [{params[-1]}];" in case.ptx


def test_matmul_keeps_its_pipelining(matmul: Case, matmul_plain):
    plain = matmul_plain.asm["ptx"]
    assert matmul_plain.metadata.profile_scratch_size == 0
    assert cp_async_count(plain) > 0
    assert cp_async_count(matmul.ptx) == cp_async_count(plain)
    assert "wgmma.mma_async" in plain
    assert matmul.ptx.count("wgmma.mma_async") == plain.count("wgmma.mma_async")


def test_the_matmul_k_loop_scope_pairs_in_the_loop(matmul: Case):
    """The K-loop body is one straight-line block: its scope costs one clock read at the begin
    and one 16-byte store at the end, and nothing else in the pipelined loop."""
    lines = matmul.ptx.splitlines()
    assert records(matmul.ptx) == []
    (pair,) = pairs(matmul.ptx)
    assert pair.scope == 0
    assert in_loop(lines, pair.begin.line) and in_loop(lines, pair.end.line)
    cost = sum(len(site.instructions) for site in sites(matmul.ptx))
    assert cost == INSTRUCTIONS_PER_PAIR_BEGIN + INSTRUCTIONS_PER_PAIR_END


def test_scopes_in_loops_branches_and_nested(control_flow: Case):
    outer, iteration, branch = range(3)
    lines = control_flow.ptx.splitlines()
    found = {(r.scope, r.is_end): r.line for r in records(control_flow.ptx)}
    assert len(found) == 4 == len(records(control_flow.ptx))
    # Around the loop and around the if: entered and exited in different blocks, so singles.
    assert set(found) == {(outer, False), (outer, True), (branch, False), (branch, True)}
    assert not in_loop(lines, found[outer, False])
    # Entered in one branch of the if, exited after it on both paths.
    assert conditionally_skipped(lines, found[branch, False])
    assert not conditionally_skipped(lines, found[branch, True])
    # The loop body is one block: its scope pairs.
    (pair,) = pairs(control_flow.ptx)
    assert pair.scope == iteration
    assert in_loop(lines, pair.begin.line) and in_loop(lines, pair.end.line)
    found[iteration, False], found[iteration, True] = pair.begin.line, pair.end.line
    order = [
        (outer, False),
        (iteration, False),
        (iteration, True),
        (branch, False),
        (branch, True),
        (outer, True),
    ]
    assert [found[key] for key in order] == sorted(found.values())


def test_nested_scopes_in_one_block_both_pair(nested: Case):
    outer, inner = range(2)
    found = pairs(nested.ptx)
    assert records(nested.ptx) == []
    assert [p.scope for p in found] == [inner, outer, outer]
    first_inner, first_outer, second_outer = found
    # The inner pair sits inside the first outer one; the second outer one follows.
    assert first_outer.begin.line < first_inner.begin.line < first_inner.end.line < first_outer.end.line
    assert first_outer.end.line < second_outer.begin.line
    assert len({p.register for p in found}) == 3


@pytest.mark.parametrize("fixture", ["add", "gluon_add"])
def test_straight_line_scopes_pair(fixture: str, request):
    case: Case = request.getfixturevalue(fixture)
    assert sorted(p.scope for p in pairs(case.ptx)) == list(range(len(case.scopes)))
    assert records(case.ptx) == []


def test_a_scope_over_inlined_code_pairs(softmax: Case):
    """``tl.max`` and ``tl.sum`` are inlined, and LLVM marks their line info with ``$L__tmpN``
    labels that only the debug sections name. The reduce scope has no branch and no branch
    target between its begin and its end, so it must pair like "load" and "store" do."""
    load, reduce, store = range(3)
    lines = softmax.ptx.splitlines()
    begin, end = sorted(
        [r.line for r in records(softmax.ptx) if r.scope == reduce]
        + [line for p in pairs(softmax.ptx) if p.scope == reduce for line in (p.begin.line, p.end.line)]
    )
    assert straight_line(lines, begin, end)
    assert any(re.match(r"^\$L__tmp\d+:", line) for line in lines[begin:end])
    assert sorted(p.scope for p in pairs(softmax.ptx)) == [load, reduce, store]
    assert records(softmax.ptx) == []


def test_pairs_off_gives_only_single_records(compile_kernel, add: Case):
    mode = Mode(pairs=False)
    kernel = compile_kernel(add_kernel, ADD_SIGNATURE, {"BLOCK": 1024}, mode=mode, num_warps=4)
    ptx = kernel.asm["ptx"]
    assert pairs(ptx) == [] and not re.search(r"%pik_b[<\d]", ptx)
    found = records(ptx)
    assert [(r.scope, r.is_end) for r in found] == [(0, False), (0, True), (1, False), (1, True)]
    # Four single records in straight-line code: four entries per warp.
    capacity = len(found)
    assert all(r.instructions == single_instructions(r.scope, r.is_end, str(capacity - 1)) for r in found)
    assert kernel.metadata.profile_scratch_size == BufferLayout(units=4, capacity=capacity).cta_bytes
    # The same scopes, paired (and stored straight to the buffer): half the entries, half the
    # instrumentation.
    paired = compile_kernel(add_kernel, ADD_SIGNATURE, {"BLOCK": 1024}, mode=Mode(stage=False), num_warps=4)
    paired_ptx = paired.asm["ptx"]
    assert len(pairs(paired_ptx)) == len(pairs(add.ptx)) == len(found) // 2
    assert sum(len(site.instructions) for site in sites(paired_ptx)) * 2 == sum(
        len(r.instructions) for r in found
    )


def test_granularity_reaches_the_ptx(add_warpgroups: Case, control_flow: Case):
    assert "shr.u32 \t%pik_unit, %pik_warp, 2;" in add_warpgroups.ptx
    assert "setp.eq.u32 \t%pik_w, %pik_tid, 0;" in control_flow.ptx
    for case, mask in ((add_warpgroups, 63), (control_flow, 255)):
        slots = [site.instructions for site in sites(case.ptx) if site.kind != "pair begin"]
        assert slots
        # a staged unit's slot is its count, in shared memory (lowering.staging)
        slot = f"mad.lo.u32 \t%pik_ss, %pik_n, {ENTRY_BYTES}, %pik_sh;" if case.staged else None
        assert all((slot or f"and.b32 \t%pik_t, %pik_n, {mask};") in body for body in slots)


def test_a_direct_compile_uses_the_switched_mode():
    """Without ``instrumentation_mode`` in the options, the hook falls back on the switch's mode."""
    source = ASTSource(add_kernel, signature=ADD_SIGNATURE, constexprs={"BLOCK": 256})
    with proton_ik.instrumented(Mode(capacity=32)):
        kernel = triton.compile(source, target=TARGET)
    assert kernel.metadata.proton_ik["layout"] == BufferLayout(units=4, capacity=32).to_dict()
    assert kernel.metadata.profile_scratch_size == BufferLayout(units=4, capacity=32).cta_bytes


def test_inline_asm_with_its_own_braces_and_registers(compile_kernel):
    """fp8 -> bf16 conversion is inline asm with a `{ .reg ... }` block closed at column 0."""
    mode = Mode()
    signature = {"x": "*fp8e4nv", "out": "*bf16", "n": "i32", "BLOCK": "constexpr"}
    kernel = compile_kernel(fp8_kernel, signature, {"BLOCK": 1024}, mode=mode, num_warps=4)
    ptx = kernel.asm["ptx"]
    # The conversion's braces are opaque: the scope around them is one straight-line block, whose
    # one pair is the only entry.
    assert kernel.metadata.profile_scratch_size == BufferLayout(units=4, capacity=1).cta_bytes
    (pair,) = pairs(ptx)
    inside = [line.strip() for line in ptx.splitlines()[pair.begin.line : pair.end.line]]
    assert "{" in inside and "}" in inside and ".reg .f16 a<2>;" in inside
    assert pair.scope == 0 and records(ptx) == []


SMALL_SIGNATURE = {"x": "*fp32", "n": "i32", "BLOCK": "constexpr"}


def test_an_early_return_reaches_the_epilogue(compile_kernel):
    kernel = compile_kernel(early_return_kernel, SMALL_SIGNATURE, {"BLOCK": 128}, mode=Mode(), num_warps=4)
    ptx = kernel.asm["ptx"]
    found = records(ptx)
    assert [r.is_end for r in found].count(True) == 2 and len(found) == 3
    assert pairs(ptx) == []
    lines = [line.strip() for line in ptx.splitlines()]
    assert lines.count("ret;") == 1
    assert lines.count(f"bra \t{EXIT_LABEL};") >= 1


def test_a_noinline_helper_keeps_its_own_ret(compile_kernel):
    """Only the kernel's returns go to the epilogue; a ``.func`` returns to its caller."""
    kernel = compile_kernel(calls_helper_kernel, SMALL_SIGNATURE, {"BLOCK": 128}, mode=Mode(), num_warps=4)
    ptx = kernel.asm["ptx"]
    assert len(kernel.asm["cubin"]) > 0
    func_start = ptx.index("\n.func ", ptx.index(".visible .entry"))
    entry_part, func_part = ptx[:func_start], ptx[func_start:]
    assert func_part.count("ret;") == 1 and "pik" not in func_part
    assert entry_part.count("\tret;") == 1
    # The call returns to the line after it: the scope around it pairs.
    assert [p.scope for p in pairs(entry_part)] == [0] and records(entry_part) == []


def test_call_sequences_keep_their_braces(compile_kernel):
    """``tl.device_print`` calls ``vprintf`` inside a ``{ // callseq }`` block."""
    kernel = compile_kernel(print_kernel, SMALL_SIGNATURE, {"BLOCK": 128}, mode=Mode(), num_warps=4)
    ptx = kernel.asm["ptx"]
    assert "callseq" in ptx
    assert [p.scope for p in pairs(ptx)] == [0] and records(ptx) == []
    # The one pair is the only entry.
    assert kernel.metadata.profile_scratch_size == BufferLayout(units=4, capacity=1).cta_bytes


@pytest.mark.parametrize("sm", [75, 80, 90])
def test_records_keep_their_lines_in_l2_from_sm_80_and_assemble_before_it(sm):
    """``createpolicy`` and cache hints exist from sm_80 on (``stores_ptx``): before it the
    records' stores go without their L2 policy, and the kernel still assembles."""
    mode = Mode(stage=False)
    with proton_ik.instrumented(mode):
        source = ASTSource(add_kernel, signature=ADD_SIGNATURE, constexprs={"BLOCK": 1024})
        options = {"instrumentation_mode": mode.knob, "num_warps": 4}
        compiled = triton.compile(source, target=GPUTarget("cuda", sm, 32), options=options)
    ptx = compiled.asm["ptx"]
    hinted = ptx.count("st.global.L2::cache_hint.v4.b32 \t[%pik_a]")
    plain = ptx.count("st.global.v4.b32 \t[%pik_a]")
    assert (hinted, plain, "createpolicy" in ptx) == ((2, 0, True) if sm >= 80 else (0, 2, False))
    assert compiled.asm["cubin"]


CLUSTER_REGISTERS = ("%clusterid.", "%nclusterid.", "%cluster_ctarank", "%cluster_nctarank")


@pytest.mark.parametrize("sm", [80, 90])
def test_the_cta_header_holds_the_cluster_from_sm_90_and_zeros_before_it(sm):
    """The cluster's registers exist from sm_90 on (``frame_ptx.CLUSTER_MIN_SM``): there thread 0
    reads them into the CTA header's cluster fields; before it, it stores 0 there ("not
    recorded") and reads none of them, and the kernel still assembles."""
    mode = Mode(stage=False)
    with proton_ik.instrumented(mode):
        source = ASTSource(add_kernel, signature=ADD_SIGNATURE, constexprs={"BLOCK": 1024})
        options = {"instrumentation_mode": mode.knob, "num_warps": 4}
        compiled = triton.compile(source, target=GPUTarget("cuda", sm, 32), options=options)
    ptx = compiled.asm["ptx"]
    reads = [line.strip() for line in ptx.splitlines() if any(r in line for r in CLUSTER_REGISTERS)]
    offset = vector_fields(CTA_HEADER_DTYPE, ["capacity", "cluster", "cluster_rank", "cluster_ctas"])
    store = next(line.strip() for line in ptx.splitlines() if f"[%pik_base+{offset}]" in line)
    if sm >= 90:
        assert len(reads) == 7 and "mov.u32 \t%pik_cluster_rank, %cluster_ctarank;" in reads
        assert store.endswith("%pik_cluster, %pik_cluster_rank, %pik_cluster_ctas};")
    else:
        assert reads == [] and store.endswith(", 0, 0, 0};")
    assert store.startswith("@%pik_h st.global.v4.b32")
    assert compiled.asm["cubin"]


@triton.jit
def arithmetic_loop_kernel(out, n, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    """Scopes in a loop that moves no memory: only arithmetic between its records."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = offs.to(tl.float32)
    for _ in tl.range(ITERS, loop_unroll_factor=1):
        with pl.scope("step"):
            acc = acc * 1.0001 + 0.5
    tl.store(out + offs, acc, mask=offs < n)


def test_layout_auto_gives_a_memory_loop_of_no_tensor_core_instruction_layout_3(
    compile_kernel, matmul: Case, add: Case
):
    """Version 3's half bytes pay where records are written in a loop that moves global memory
    and is not bound by tensor cores; its longer pair end costs more elsewhere
    (docs/PERFORMANCE.md, issue 28)."""
    signature = {"x": "*fp32", "out": "*fp32", "n": "i32", "iters": "i32", "BLOCK": "constexpr"}
    looping = compile_kernel(control_flow_kernel, signature, {"BLOCK": 256}, mode=Mode(), num_warps=4)
    assert looping.metadata.proton_ik["layout"]["version"] == 3
    assert "$pik_long_" in looping.asm["ptx"]  # a pair's long form, out of line
    assert matmul.kernel.metadata.proton_ik["layout"]["version"] == 2  # a K loop of wgmma
    assert add.kernel.metadata.proton_ik["layout"]["version"] == 2  # no loop
    explicit = compile_kernel(
        control_flow_kernel, signature, {"BLOCK": 256}, mode=Mode(layout=2), num_warps=4
    )
    assert explicit.metadata.proton_ik["layout"]["version"] == 2
    # a ring of one slot exists in layout 2 only
    one = compile_kernel(control_flow_kernel, signature, {"BLOCK": 256}, mode=Mode(capacity=1), num_warps=4)
    assert (one.metadata.proton_ik["layout"]["version"], one.metadata.proton_ik["layout"]["capacity"]) == (
        2,
        1,
    )
    # a loop of arithmetic only: nothing for the half bytes to save
    arithmetic = compile_kernel(
        arithmetic_loop_kernel,
        {"out": "*fp32", "n": "i32", "ITERS": "constexpr", "BLOCK": "constexpr"},
        {"ITERS": 100, "BLOCK": 256},
        mode=Mode(),
        num_warps=4,
    )
    assert "// pik pair end" in arithmetic.asm["ptx"] and "%pik_pw" not in arithmetic.asm["ptx"]
    assert arithmetic.metadata.proton_ik["layout"]["version"] == 2
