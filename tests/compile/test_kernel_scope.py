"""unscoped=kernel: a kernel with no scope of its own records one, named after it, per unit."""

from __future__ import annotations

import pytest
import triton
import triton.language as tl

import proton_ik.language as pl
from proton_ik.contract.names import MAX_NAME_LENGTH, scope_name_problem
from proton_ik.dialect.markers import parse_marker
from proton_ik.lowering.kernel_scope import around_kernel, kernel_scope_name
from proton_ik.mode import Mode

UNSCOPED = Mode.parse("instrumentation:unscoped=kernel")
SIGNATURE = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}


@triton.jit
def plain_add(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) + 1.0, mask=offsets < n)


@triton.jit
def plain_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offsets, mask=offsets < n)
    tl.store(out_ptr + tl.arange(0, BLOCK), acc)


@triton.jit
def scoped_add(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    with pl.scope("load"):
        x = tl.load(x_ptr + offsets, mask=offsets < n)
    tl.store(out_ptr + offsets, x + 1.0, mask=offsets < n)


def _unmarked(ptx: str) -> str:
    return "\n".join(line for line in ptx.splitlines() if "pik.marker" not in line) + "\n"


def test_the_markers_go_before_the_first_instruction_and_before_each_return(loop_ptx):
    ptx = _unmarked(loop_ptx)
    lines = around_kernel(ptx).splitlines()
    markers = [(i, parse_marker(line)) for i, line in enumerate(lines) if parse_marker(line) is not None]
    assert [(op.kind.data, op.scope.data) for _, op in markers] == [("begin", "loop"), ("end", "loop")]
    (begin, _), (end, _) = markers
    body = lines.index("{")
    before = [line.strip() for line in lines[body + 1 : begin]]  # declarations and line info only
    assert before and all(line.startswith((".reg", ".loc")) or not line for line in before)
    # Before the first label (a loop may branch back to it) and the first instruction.
    assert lines[begin + 1].strip() == "$L__func_begin0:"
    assert lines[end + 1].strip() == "ret;"


def test_a_return_under_a_predicate_leaves_the_kernel_plain_with_a_warning(kernel_ptx):
    with pytest.warns(UserWarning, match="returns under a predicate"):
        assert around_kernel(_unmarked(kernel_ptx)) is None


def test_a_kernels_name_becomes_a_valid_scope_name():
    assert kernel_scope_name("triton_poi_fused_add_0") == "triton_poi_fused_add_0"
    long = kernel_scope_name("k" * 300)
    assert len(long) == MAX_NAME_LENGTH and scope_name_problem(long) is None
    assert kernel_scope_name("a$b") == "a_b"


def test_straight_line_and_looping_kernels_record_one_scope_per_warp(compile_kernel):
    for fn, entries in ((plain_add, 1), (plain_sum, 2)):
        binary = compile_kernel(fn, SIGNATURE, {"BLOCK": 128}, mode=UNSCOPED)
        profile = binary.metadata.proton_ik
        assert [s["name"] for s in profile["scopes"]] == [fn.__name__]
        # Straight-line code pairs begin and end in one entry; a loop between them does not.
        assert profile["capacity"]["bound"] == entries and profile["capacity"]["source"] == "bound"


def test_without_the_option_a_kernel_with_no_scope_compiles_plain(compile_kernel):
    binary = compile_kernel(plain_add, SIGNATURE, {"BLOCK": 128}, mode=Mode())
    assert binary.metadata.profile_scratch_size == 0


def test_a_kernel_with_scopes_of_its_own_gets_no_kernel_scope(compile_kernel):
    binary = compile_kernel(scoped_add, SIGNATURE, {"BLOCK": 128}, mode=UNSCOPED)
    assert [s["name"] for s in binary.metadata.proton_ik["scopes"]] == ["load"]


def test_the_option_round_trips_and_a_bad_value_says_what_to_use():
    assert Mode.parse(str(UNSCOPED)) == UNSCOPED and UNSCOPED.unscoped == "kernel"
    assert str(Mode()).count("unscoped") == 0  # the default keeps earlier modes' strings and keys
    with pytest.raises(ValueError, match="use unscoped=kernel"):
        Mode.parse("instrumentation:unscoped=all")
