"""Real compiles of annotated Triton and Gluon kernels to sm_90 cubins, through Triton's ptxas.

Each kernel compiles once per module; the tests read its PTX, cubin and metadata.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass

import pytest
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import proton_ik.language as pl
from proton_ik.layout import TAG_END_BIT, TAG_SCOPE_MASK, BufferLayout, Granularity
from proton_ik.lowering import triton_hook
from proton_ik.lowering.pikgpu_to_ptx import EXIT_LABEL
from proton_ik.mode import Mode

TARGET = GPUTarget("cuda", 90, 32)
INSTRUCTIONS_PER_RECORD = 5


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

    @property
    def ptx(self) -> str:
        return self.kernel.asm["ptx"]

    @property
    def layout(self) -> BufferLayout:
        units = self.num_warps // self.mode.granularity.warps_per_unit(self.num_warps)
        return BufferLayout(units=units, capacity=self.mode.capacity)


def first_line(fn, name: str) -> int:
    """The file line where ``fn`` first mentions scope ``name``."""
    lines, start = inspect.getsourcelines(fn.fn)
    return start + next(i for i, line in enumerate(lines) if f'"{name}"' in line)


@dataclass(frozen=True)
class Record:
    line: int  # index of the "// pik record" line
    scope: int
    is_end: bool
    instructions: list[str]


def records(ptx: str) -> list[Record]:
    lines = ptx.splitlines()
    found = []
    for index, line in enumerate(lines):
        if line.strip() != "// pik record":
            continue
        body = []
        for following in lines[index + 1 :]:
            if "%pik_" not in following:
                break
            body.append(following.strip())
        tag = int(next(re.search(r"\{(\d+), %pik_c\}", b).group(1) for b in body if "st.global" in b))
        found.append(Record(index, tag & TAG_SCOPE_MASK, bool(tag >> TAG_END_BIT & 1), body))
    return found


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
    mode = Mode()
    kernel = compile_kernel(add_kernel, ADD_SIGNATURE, {"BLOCK": 1024}, mode=mode, num_warps=4)
    return Case(kernel, mode, 4, ["load", "store"])


@pytest.fixture(scope="module")
def add_warpgroups(compile_kernel) -> Case:
    mode = Mode(granularity=Granularity.WARPGROUP, capacity=64)
    kernel = compile_kernel(add_kernel, ADD_SIGNATURE, {"BLOCK": 2048}, mode=mode, num_warps=8)
    return Case(kernel, mode, 8, ["load", "store"])


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
    return Case(kernel, mode, 4, ["load", "reduce", "store"])


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
    return Case(kernel, mode, 8, ["k_step"])


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
def gluon_add(compile_kernel) -> Case:
    mode = Mode()
    kernel = compile_kernel(gluon_add_kernel, ADD_SIGNATURE, {"BLOCK": 1024}, mode=mode, num_warps=4)
    return Case(kernel, mode, 4, ["load", "store"])


@pytest.fixture(scope="module")
def control_flow(compile_kernel) -> Case:
    mode = Mode(granularity=Granularity.CTA, capacity=256)
    signature = {"x": "*fp32", "out": "*fp32", "n": "i32", "iters": "i32", "BLOCK": "constexpr"}
    kernel = compile_kernel(control_flow_kernel, signature, {"BLOCK": 256}, mode=mode, num_warps=4)
    return Case(kernel, mode, 4, ["outer", "iteration", "branch"])


CASES = ["add", "add_warpgroups", "softmax", "matmul", "gluon_add", "control_flow"]


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
    assert case.kernel.metadata.proton_ik == {
        "mode": str(case.mode),
        "num_warps": case.num_warps,
        "warps_per_unit": case.mode.granularity.warps_per_unit(case.num_warps),
        "layout": case.layout.to_dict(),
        "scopes": [
            {"id": i, "name": name, "line": first_line(fn, name)} for i, name in enumerate(case.scopes)
        ],
    }


def test_no_marker_remains(case: Case):
    assert "pik.marker" not in case.ptx
    assert "// pik record" in case.ptx


def test_every_record_costs_five_instructions(case: Case):
    found = records(case.ptx)
    assert found
    for record in found:
        assert len(record.instructions) == INSTRUCTIONS_PER_RECORD, record.instructions
        assert sum("%clock;" in line for line in record.instructions) == 1
        assert sum(line.startswith("@%pik_w st.global") for line in record.instructions) == 1


def test_every_scope_is_begun_and_ended(case: Case):
    found = records(case.ptx)
    for scope_id in range(len(case.scopes)):
        assert {r.is_end for r in found if r.scope == scope_id} == {False, True}
    assert {r.scope for r in found} == set(range(len(case.scopes)))


def test_records_replace_the_markers_inline_asm(case: Case):
    lines = case.ptx.splitlines()
    for record in records(case.ptx):
        assert lines[record.line - 1].strip() == "// begin inline asm"
        assert lines[record.line + 1 + INSTRUCTIONS_PER_RECORD].strip() == "// end inline asm"


def test_one_epilogue_and_one_ret(case: Case):
    lines = [line.strip() for line in case.ptx.splitlines()]
    assert lines.count(f"{EXIT_LABEL}:") == 1
    assert lines.count("ret;") == 1
    assert lines.index(f"{EXIT_LABEL}:") < lines.index("ret;")
    assert sum(line.startswith("@") and line.endswith("ret;") for line in lines) == 0


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


def test_matmul_records_sit_in_the_k_loop(matmul: Case):
    lines = matmul.ptx.splitlines()
    assert all(in_loop(lines, r.line) for r in records(matmul.ptx))


def test_scopes_in_loops_branches_and_nested(control_flow: Case):
    outer, iteration, branch = range(3)
    lines = control_flow.ptx.splitlines()
    found = {(r.scope, r.is_end): r.line for r in records(control_flow.ptx)}
    assert len(found) == 6 == len(records(control_flow.ptx))
    assert not in_loop(lines, found[outer, False])
    assert in_loop(lines, found[iteration, False]) and in_loop(lines, found[iteration, True])
    # Entered in one branch of the if, exited after it on both paths.
    assert conditionally_skipped(lines, found[branch, False])
    assert not conditionally_skipped(lines, found[branch, True])
    order = [
        (outer, False),
        (iteration, False),
        (iteration, True),
        (branch, False),
        (branch, True),
        (outer, True),
    ]
    assert [found[key] for key in order] == sorted(found.values())


def test_granularity_reaches_the_ptx(add_warpgroups: Case, control_flow: Case):
    assert "shr.u32 \t%pik_unit, %pik_warp, 2;" in add_warpgroups.ptx
    assert all("and.b32 \t%pik_t, %pik_n, 63;" in r.instructions for r in records(add_warpgroups.ptx))
    assert "setp.eq.u32 \t%pik_w, %pik_tid, 0;" in control_flow.ptx
    assert all("and.b32 \t%pik_t, %pik_n, 255;" in r.instructions for r in records(control_flow.ptx))


def test_a_direct_compile_uses_the_installed_mode():
    """Without ``instrumentation_mode`` in the options, the hook falls back on the installed mode."""
    source = ASTSource(add_kernel, signature=ADD_SIGNATURE, constexprs={"BLOCK": 256})
    triton_hook.install(Mode(capacity=32))
    try:
        kernel = triton.compile(source, target=TARGET)
    finally:
        triton_hook.uninstall()
    assert kernel.metadata.proton_ik["layout"] == BufferLayout(units=4, capacity=32).to_dict()
    assert kernel.metadata.profile_scratch_size == BufferLayout(units=4, capacity=32).cta_bytes


def test_inline_asm_with_its_own_braces_and_registers(compile_kernel):
    """fp8 -> bf16 conversion is inline asm with a `{ .reg ... }` block closed at column 0."""
    mode = Mode()
    signature = {"x": "*fp8e4nv", "out": "*bf16", "n": "i32", "BLOCK": "constexpr"}
    kernel = compile_kernel(fp8_kernel, signature, {"BLOCK": 1024}, mode=mode, num_warps=4)
    assert kernel.metadata.profile_scratch_size == BufferLayout(units=4, capacity=1024).cta_bytes
    assert len(records(kernel.asm["ptx"])) == 2


SMALL_SIGNATURE = {"x": "*fp32", "n": "i32", "BLOCK": "constexpr"}


def test_an_early_return_reaches_the_epilogue(compile_kernel):
    kernel = compile_kernel(early_return_kernel, SMALL_SIGNATURE, {"BLOCK": 128}, mode=Mode(), num_warps=4)
    ptx = kernel.asm["ptx"]
    found = records(ptx)
    assert [r.is_end for r in found].count(True) == 2 and len(found) == 3
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
    assert len(records(entry_part)) == 2


def test_call_sequences_keep_their_braces(compile_kernel):
    """``tl.device_print`` calls ``vprintf`` inside a ``{ // callseq }`` block."""
    kernel = compile_kernel(print_kernel, SMALL_SIGNATURE, {"BLOCK": 128}, mode=Mode(), num_warps=4)
    ptx = kernel.asm["ptx"]
    assert "callseq" in ptx
    assert len(records(ptx)) == 2
    assert kernel.metadata.profile_scratch_size == BufferLayout(units=4, capacity=1024).cta_bytes
