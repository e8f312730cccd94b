"""``lowering.bound`` and ``capacity=auto``: IR text in, entry bounds and segment sizes out, then
real compiles whose expected sizes follow from each kernel's structure and ``proton_ik.contract.layout``."""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import triton
import triton.language as tl

import proton_ik.language as pl
from proton_ik.contract.layout import (
    CTA_ALIGN,
    CTA_HEADER_BYTES,
    ENTRY_BYTES,
    UNIT_HEADER_BYTES,
    BufferLayout,
    next_power_of_two,
)
from proton_ik.contract.metadata import KernelMetadata
from proton_ik.dialect import make_context
from proton_ik.dialect.markers import marker_text
from proton_ik.dialect.pik import RecordOp
from proton_ik.lowering.assign_scope_ids import AssignScopeIds
from proton_ik.lowering.bound import EntryBound, entry_bound, entry_records, ttir_bound
from proton_ik.lowering.collect import collect_markers
from proton_ik.lowering.instrument import choose_capacity, instrument, kernel_metadata
from proton_ik.mode import AUTO, DEFAULT_RING_CAPACITY, MAX_CAPACITY, Mode

# --- PTX in, bound out -------------------------------------------------------------------------

HEADER = """\
.version 8.7
.target sm_90a
.address_size 64

	// .globl	k
.visible .entry k(
	.param .u32 k_param_0,
	.param .u64 .ptr .global .align 1 k_param_1
)
.reqntid 128
{
	.reg .pred 	%p<4>;
	.reg .b32 	%r<4>;
$L__func_begin0:
// %bb.0:
	ld.param.b32 	%r1, [k_param_0];
"""
FOOTER = """\
	ret;
$L__func_end0:
}
	.file	1 "/home/user/kernels/k.py"
"""


def marker(kind: str, scope: str) -> str:
    return f"\t// begin inline asm\n\t{marker_text(RecordOp(kind, scope))}\n\t// end inline asm\n"


def scopes(*names: str) -> str:
    """One straight-line scope per name, one after the other."""
    return "".join(marker("begin", n) + "\tadd.s32 \t%r2, %r2, 1;\n" + marker("end", n) for n in names)


def kernel(body: str) -> str:
    return HEADER + body + FOOTER


def bound_of(ptx: str, ttir: str | None = None, pairs: bool = True) -> EntryBound:
    module = collect_markers(ptx)
    AssignScopeIds().apply(make_context(), module)
    return entry_bound(ptx, entry_records(module, pairs), ttir)


def test_straight_line_scopes_pair_into_one_entry_each():
    ptx = kernel(scopes("load", "store"))
    assert bound_of(ptx) == EntryBound(2, "straight-line code: at most 2 slots")
    assert bound_of(ptx, pairs=False) == EntryBound(4, "straight-line code: at most 4 slots")


def test_nested_scopes_pair_each():
    # outer(inner), inner: three pairs, six records.
    ptx = kernel(marker("begin", "outer") + scopes("inner") + marker("end", "outer") + scopes("inner"))
    assert bound_of(ptx).entries == 3
    assert bound_of(ptx, pairs=False).entries == 6


def if_else(then: list[str], otherwise: list[str]) -> str:
    return kernel(
        "\tsetp.lt.s32 \t%p1, %r1, 1;\n"
        "\t@%p1 bra \t$L__BB0_2;\n"
        f"{scopes(*then)}"
        "\tbra.uni \t$L__BB0_3;\n"
        "$L__BB0_2:\n"
        f"{scopes(*otherwise)}"
        "$L__BB0_3:\n"
        f"{scopes('after')}"
    )


@pytest.mark.parametrize(("then", "otherwise"), [(["a"], ["b", "c", "d"]), (["a", "b", "c"], ["d"])])
def test_if_else_counts_the_heavier_branch(then: list[str], otherwise: list[str], ptxas, tmp_path: Path):
    ptx = if_else(then, otherwise)
    assert ptxas(ptx, tmp_path).returncode == 0
    most = max(len(then), len(otherwise)) + 1  # the heavier branch, then "after"
    assert bound_of(ptx) == EntryBound(
        most, f"no loops: at most {most} slots on the heaviest path through the branches"
    )


def test_an_early_return_splits_a_scope_into_two_single_records(kernel_ptx: str):
    """The hand-written kernel enters "load", may return, then exits "load": the begin and the
    end are in different blocks, so they do not pair, and the path that does not return
    stores both."""
    assert bound_of(kernel_ptx).entries == 2
    assert bound_of(kernel_ptx, pairs=False).entries == 2


def jump_table(targets: str) -> str:
    """Case 0 records "zero"; case 1 enters "split" and falls into case 2, which exits it."""
    return kernel(
        f"{targets}"
        "\tbrx.idx \t%r1, $L_brx_0;\n"
        "$L__BB0_2:\n"
        f"{scopes('zero')}"
        "\tbra.uni \t$L__BB0_5;\n"
        "$L__BB0_3:\n"
        f"{marker('begin', 'split')}"
        "$L__BB0_4:\n"
        f"{marker('end', 'split')}"
        "$L__BB0_5:\n"
    )


@pytest.mark.parametrize(
    "targets",
    [
        "\t$L_brx_0: .branchtargets $L__BB0_2, $L__BB0_3, $L__BB0_4;\n",
        "\t$L_brx_0: .branchtargets\n\t\t$L__BB0_2,\n\t\t$L__BB0_3,\n\t\t$L__BB0_4;\n",
    ],
)
def test_a_jump_table_counts_its_heaviest_target(targets: str, ptxas, tmp_path: Path):
    ptx = jump_table(targets)
    assert ptxas(ptx, tmp_path).returncode == 0
    # Through case 1: "split" begins and, in case 2's block, ends: two single records.
    assert bound_of(ptx).entries == 2


def test_a_scope_in_a_loop_has_no_ptx_bound(loop_ptx: str):
    assert bound_of(loop_ptx) == EntryBound(
        None,
        "scope 'step' (loop.py:14) is recorded inside the loop at loop.py:12, "
        "whose trip count the PTX does not show",
    )


def test_the_ttir_counts_a_loop_with_a_constant_trip_count(loop_ptx: str, loop_ttir: str):
    trips, entries_per_trip = 8, 1  # for i in range(8): "step", whose begin the PTX pairs with its end
    most = trips * entries_per_trip
    assert bound_of(loop_ptx, loop_ttir) == EntryBound(
        most, f"the loop at loop.py:12 runs 8 times: at most {most} slots"
    )


def test_a_loop_over_an_argument_is_bounded_at_each_launch(loop_ptx: str, loop_ttir: str):
    ttir = loop_ttir.replace("to %c8_i32", "to %n")
    bound = bound_of(loop_ptx, ttir)
    reason = "the loop at loop.py:12 runs a number of times that each launch computes from the kernel's arguments and grid"
    assert (bound.entries, bound.reason) == (None, reason)
    assert bound.launch is not None and bound.launch.arguments == ("n",)
    # One entry per iteration: the PTX pairs "step"'s begin with its end.
    assert bound.launch.count == ["loop", 0, ["const", 0], ["arg", "n"], ["const", 1], 1]
    entries = bound.launch.compile()
    assert [entries([4], {"n": n}) for n in (0, 1, 8, 1000)] == [0, 1, 8, 1000]
    assert entries([4], {"n": -3}) == 0  # a loop that does not run


def test_a_loop_over_a_value_no_launch_can_compute_has_no_bound(loop_ptx: str, loop_ttir: str):
    ttir = loop_ttir.replace("to %c8_i32", "to %v").replace(
        "    scf.for", "    %v = tt.load %x : !tt.ptr<i32> loc(#loc1)\n    scf.for"
    )
    assert bound_of(loop_ptx, ttir) == EntryBound(
        None,
        "the loop at loop.py:12 records scope 'step' and has a trip count known only at run time "
        "(%v comes from tt.load, which a launch cannot evaluate)",
    )


def test_a_scope_after_a_loop_that_records_nothing_is_bounded():
    ptx = kernel(
        "$L__BB0_1:\n"
        "\t.loc\t1 12 4\n"
        "\tadd.s32 \t%r2, %r2, 1;\n"
        "\tsetp.lt.s32 \t%p1, %r2, %r1;\n"
        "\t@%p1 bra \t$L__BB0_1;\n"
        "\t.loc\t1 14 4\n"
        f"{scopes('store')}"
    )
    assert bound_of(ptx) == EntryBound(1, "the loop at k.py:12 records no scope: at most 1 slot")


# --- TTIR in, bound out ------------------------------------------------------------------------


def ttir_marker(kind: str, scope: str, loc: str) -> str:
    """A marker as Triton prints it in TTIR: MLIR escapes '"' in the asm string as \\22."""
    asm = marker_text(RecordOp(kind, scope)).replace('"', "\\22")
    return (
        f'%m = tt.elementwise_inline_asm "{asm}" {{constraints = "=r", packed_element = 1 : i32, '
        f"pure = false}} -> i32 loc({loc})"
    )


def ttir(body: str) -> str:
    return f"""\
#loc = loc("/src/k.py":1:0)
module {{
  tt.func public @k(%n: i32 loc("n"(#loc))) attributes {{noinline = false}} {{
    %c0_i32 = arith.constant 0 : i32 loc(#loc)
    %c1_i32 = arith.constant 1 : i32 loc(#loc)
    %c2_i32 = arith.constant 2 : i32 loc(#loc)
    %c3_i32 = arith.constant 3 : i32 loc(#loc)
    %c4_i32 = arith.constant 4 : i32 loc(#loc)
    %c11_i32 = arith.constant 11 : i32 loc(#loc)
{body}
    tt.return loc(#loc)
  }} loc(#loc)
}} loc(#loc)
#loc5 = loc("/src/k.py":5:4)
#loc7 = loc("/src/k.py":7:8)
#loc9 = loc("/src/k.py":9:4)
"""


def test_nested_constant_loops_and_an_if():
    text = ttir(
        f"""\
    scf.for %i = %c0_i32 to %c4_i32 step %c1_i32  : i32 {{
      {ttir_marker("begin", "row", "#loc5")}
      scf.for %j = %c2_i32 to %c11_i32 step %c3_i32  : i32 {{
        {ttir_marker("begin", "cell", "#loc7")}
        {ttir_marker("end", "cell", "#loc7")}
      }} {{tt.loop_unroll_factor = 1 : i32}} loc(#loc7)
      {ttir_marker("end", "row", "#loc5")}
    }} loc(#loc5)
    scf.if %b {{
      {ttir_marker("begin", "even", "#loc9")}
      {ttir_marker("end", "even", "#loc9")}
    }} else {{
      {ttir_marker("begin", "odd", "#loc9")}
    }} loc(#loc9)"""
    )
    inner_trips = len(range(2, 11, 3))
    most = 4 * (2 + inner_trips * 2) + max(2, 1)
    assert ttir_bound(text) == EntryBound(
        most, f"the loops at k.py:5 (4 times), at k.py:7 ({inner_trips} times): at most {most} slots"
    )


def test_a_loop_that_records_nothing_may_run_any_number_of_times():
    text = ttir(
        f"""\
    scf.for %i = %c0_i32 to %n step %c1_i32  : i32 {{
    }} loc(#loc5)
    {ttir_marker("begin", "store", "#loc9")}
    {ttir_marker("end", "store", "#loc9")}"""
    )
    assert ttir_bound(text) == EntryBound(2, "no scope is recorded inside a loop: at most 2 slots")


def test_a_while_loop_has_no_bound():
    text = ttir(
        f"""\
    %w = scf.while (%w_0 = %c0_i32) : (i32) -> i32 {{
      scf.condition(%b) %w_0 : i32 loc(#loc5)
    }} do {{
    ^bb0(%w_0: i32 loc("w")):
      {ttir_marker("begin", "wait", "#loc7")}
      scf.yield %w_0 : i32 loc(#loc5)
    }} loc(#loc5)"""
    )
    assert ttir_bound(text) == EntryBound(
        None,
        "the while loop at k.py:5 records scope 'wait' and runs a number of times known only at run time",
    )


def test_a_scope_in_a_region_of_unknown_count_has_no_bound():
    text = ttir(
        f"""\
    %r = "tt.reduce"(%x) <{{axis = 0 : i32}}> ({{
    ^bb0(%a: f32 loc("a"), %c: f32 loc("c")):
      {ttir_marker("begin", "combine", "#loc7")}
      tt.reduce.return %a : f32 loc(#loc7)
    }}) : (tensor<128xf32>) -> f32 loc(#loc5)"""
    )
    assert ttir_bound(text) == EntryBound(
        None, "scope 'combine' is recorded inside tt.reduce at k.py:5, which proton_ik cannot count"
    )


# --- the segment size: capacity=auto, or a ring of N -------------------------------------------


@pytest.mark.parametrize(("n", "power"), [(0, 1), (1, 1), (2, 2), (3, 4), (5, 8), (512, 512), (513, 1024)])
def test_next_power_of_two(n: int, power: int):
    assert next_power_of_two(n) == power


def test_auto_rounds_the_bound_up_to_a_power_of_two():
    bound = EntryBound(5, "straight-line code: at most 5 slots")
    capacity = choose_capacity(Mode(), bound, units=4)
    assert capacity.to_dict() == {"entries": 8, "source": "bound", "bound": 5, "reason": bound.reason}


def test_auto_without_a_bound_is_the_default_ring():
    bound = EntryBound(
        None, "the loop at k.py:3 records scope 'x' and has a trip count known only at run time"
    )
    capacity = choose_capacity(Mode(), bound, units=4)
    assert capacity.to_dict() == {
        "entries": DEFAULT_RING_CAPACITY,
        "source": "ring",
        "bound": None,
        "reason": f"{bound.reason}; a ring of {DEFAULT_RING_CAPACITY} slots keeps the newest",
    }


def test_auto_with_a_bound_too_large_for_the_layout_is_the_default_ring():
    bound = EntryBound(1 << 26, "the loop at k.py:3 runs 67108864 times: at most 67108864 slots")
    with pytest.raises(ValueError):
        BufferLayout(units=32, capacity=1 << 26)
    capacity = choose_capacity(Mode(), bound, units=32)
    assert (capacity.entries, capacity.source, capacity.bound) == (DEFAULT_RING_CAPACITY, "ring", 1 << 26)
    assert capacity.reason.startswith(f"{bound.reason}, but 32 units of {1 << 26} slots need")


def test_an_explicit_capacity_is_a_ring_of_that_size_whatever_the_bound():
    bound = EntryBound(5, "straight-line code: at most 5 slots")
    capacity = choose_capacity(Mode(capacity=2), bound, units=4)
    assert capacity.to_dict() == {
        "entries": 2,
        "source": "option",
        "bound": 5,
        "reason": "capacity=2 is set in the mode",
    }


def test_instrument_puts_the_capacity_in_the_metadata(loop_ptx: str, loop_ttir: str):
    result = instrument(loop_ptx, Mode(), num_warps=4, ttir=loop_ttir)
    assert result is not None
    # layout=auto: a loop of no tensor-core instruction writes layout 3, where each of the 8
    # trips of "step" is a pair of one slot, or two
    bound = 8 * 2
    assert result.layout == BufferLayout(units=4, capacity=next_power_of_two(bound), version=3)
    metadata = kernel_metadata(result, Mode(), num_warps=4).to_dict()
    assert metadata["layout"] == result.layout.to_dict()
    assert metadata["capacity"] == {
        "entries": next_power_of_two(bound),
        "source": "bound",
        "bound": bound,
        "reason": f"the loop at loop.py:12 runs 8 times: at most {bound} slots",
    }


# --- the mode option ----------------------------------------------------------------------------


def test_auto_is_the_default_and_round_trips():
    assert Mode().capacity == AUTO
    assert str(Mode()) == "instrumentation:granularity=warp:capacity=auto:pairs=on"
    assert Mode.parse("instrumentation") == Mode.parse("instrumentation:capacity=auto") == Mode()
    for mode in (Mode(), Mode(capacity=8), Mode(granularity="cta", capacity=AUTO, pairs=False)):
        assert Mode.parse(str(mode)) == mode
        assert Mode.from_knob(mode.knob) == mode


def test_a_number_is_a_ring_of_that_many_entries():
    assert Mode.parse("instrumentation:capacity=64").capacity == 64


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "instrumentation:capacity=abc",
            "capacity='abc': use capacity=auto .* or a power of two, e.g. capacity=512",
        ),
        (
            "instrumentation:capacity=3",
            "capacity=3: ring slots per unit must be a power of two .* or capacity=auto",
        ),
        ("instrumentation:capacity=0", "capacity=0: ring slots per unit must be a power of two"),
        # layout 3's rings keep every unit header 16-byte aligned: two slots at least
        (
            "instrumentation:capacity=1:layout=3",
            "capacity=1: ring slots per unit must be a power of two between 2",
        ),
        ("instrumentation:layout=4", "layout='4': use layout=auto .*, layout=2 .* or layout=3"),
    ],
)
def test_bad_capacities_say_what_to_type(text: str, message: str):
    with pytest.raises(ValueError, match=message):
        Mode.parse(text)


def test_capacities_stop_at_max_capacity():
    """The largest ring is MAX_CAPACITY entries; the next power of two is refused, by the
    dataclass and by the parser, with the limit in the message."""
    assert Mode(capacity=MAX_CAPACITY).capacity == MAX_CAPACITY
    over = 2 * MAX_CAPACITY
    message = f"capacity={over}: ring slots per unit must be a power of two between 1 and {MAX_CAPACITY}"
    with pytest.raises(ValueError, match=message):
        Mode(capacity=over)
    with pytest.raises(ValueError, match=message):
        Mode.parse(f"instrumentation:capacity={over}")


def test_a_capacity_must_be_auto_or_an_int():
    with pytest.raises(ValueError, match="capacity=512: ring slots per unit must be a power of two"):
        Mode(capacity="512")  # type: ignore[arg-type]


# --- real compiles --------------------------------------------------------------------------------

SIGNATURE = {"x": "*fp32", "n": "i32", "BLOCK": "constexpr"}
THIS_FILE = os.path.basename(__file__)


def line_of(fn, text: str) -> int:
    """The file line of the first line of ``fn`` that contains ``text``."""
    lines, start = inspect.getsourcelines(fn.fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


@triton.jit
def four_scopes_kernel(x, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    with pl.scope("load"):
        v = tl.load(x + offs, mask=mask)
    with pl.scope("square"):
        v = v * v
    with pl.scope("shift"):
        v = v + 1
    with pl.scope("store"):
        tl.store(x + offs, v, mask=mask)


@triton.jit
def short_loop_kernel(x, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for i in range(4):
        with pl.scope("step"):
            acc += tl.load(x + offs + i * n, mask=offs < n)
    tl.store(x + offs, acc, mask=offs < n)


@triton.jit
def long_loop_kernel(x, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for i in tl.range(0, 1000, loop_unroll_factor=1):
        with pl.scope("step"):
            acc += tl.load(x + offs + i * n, mask=offs < n)
    tl.store(x + offs, acc, mask=offs < n)


@triton.jit
def runtime_loop_kernel(x, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for i in range(n):
        with pl.scope("step"):
            acc += tl.load(x + offs + i, mask=offs < n)
    tl.store(x + offs, acc, mask=offs < n)


@triton.jit
def scope_after_loop_kernel(x, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for i in range(n):
        acc += tl.load(x + offs + i, mask=offs < n)
    with pl.scope("store"):
        tl.store(x + offs, acc, mask=offs < n)


@triton.jit
def branches_kernel(x, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    if pid % 2 == 0:
        with pl.scope("even"):
            tl.store(x + offs, 1.0, mask=offs < n)
    else:
        with pl.scope("odd_load"):
            v = tl.load(x + offs, mask=offs < n)
        with pl.scope("odd_store"):
            tl.store(x + offs, v + 1, mask=offs < n)
    if pid * BLOCK >= n:
        return
    with pl.scope("tail"):
        tl.store(x + offs, 2.0, mask=offs < n)


def kernel_metadata_of(kernel) -> KernelMetadata:
    return KernelMetadata.from_dict(kernel.metadata.proton_ik, "test")


def capacity_of(compile_kernel, fn, num_warps: int = 4) -> SimpleNamespace:
    kernel = compile_kernel(fn, SIGNATURE, {"BLOCK": 128}, mode=Mode(), num_warps=num_warps)
    return SimpleNamespace(kernel=kernel, **kernel.metadata.proton_ik["capacity"])


def test_four_straight_line_scopes_at_eight_warps(compile_kernel):
    found = capacity_of(compile_kernel, four_scopes_kernel, num_warps=8)
    scopes_in_kernel, warps = 4, 8  # four pairs in straight-line code: four entries per warp
    assert (found.entries, found.source, found.bound) == (scopes_in_kernel, "bound", scopes_in_kernel)
    assert found.reason == f"straight-line code: at most {scopes_in_kernel} slots"
    raw = CTA_HEADER_BYTES + warps * (UNIT_HEADER_BYTES + scopes_in_kernel * ENTRY_BYTES)
    assert found.kernel.metadata.profile_scratch_size == -(-raw // CTA_ALIGN) * CTA_ALIGN
    assert found.kernel.metadata.proton_ik["layout"] == BufferLayout(units=warps, capacity=4).to_dict()


def test_a_short_constant_loop_that_llvm_unrolls_is_straight_line(compile_kernel):
    found = capacity_of(compile_kernel, short_loop_kernel)
    # LLVM unrolls range(4): four copies of the "step" pair, in straight-line PTX.
    assert (found.entries, found.source, found.bound) == (4, "bound", 4)
    assert found.reason == "straight-line code: at most 4 slots"


def test_a_constant_loop_that_stays_a_loop_is_counted_on_the_ttir(compile_kernel):
    found = capacity_of(compile_kernel, long_loop_kernel)
    # "step" in each iteration: a pair of one slot, or two (layout=auto gives this loop layout 3)
    trips, entries_per_trip = 1000, 2
    bound = trips * entries_per_trip
    loop = f"{THIS_FILE}:{line_of(long_loop_kernel, 'for i in tl.range')}"
    assert (found.entries, found.source, found.bound) == (next_power_of_two(bound), "bound", bound)
    assert found.reason == f"the loop at {loop} runs {trips} times: at most {bound} slots"
    # The "ttir" stage hands its text to the "ptx" stage through the metadata, and takes it out.
    assert not [key for key in found.kernel.metadata._asdict() if "ttir" in key]


def test_a_loop_over_an_argument_is_sized_at_each_launch(compile_kernel, ptxas, tmp_path: Path):
    found = capacity_of(compile_kernel, runtime_loop_kernel)
    loop = f"{THIS_FILE}:{line_of(runtime_loop_kernel, 'for i in range(n)')}"
    # The compiled layout is the ring a launch gets where its launch path passes no arguments.
    assert (found.entries, found.source, found.bound) == (DEFAULT_RING_CAPACITY, "launch", None)
    assert found.reason == (
        f"the loop at {loop} runs a number of times that each launch computes from the kernel's "
        "arguments and grid: each launch sizes its segments to hold every record (a ring of "
        f"{DEFAULT_RING_CAPACITY} slots keeps the newest where the launch path does not pass the "
        "kernel's arguments)"
    )
    metadata = kernel_metadata_of(found.kernel)
    assert metadata.sized_at_launch and metadata.launch_bound is not None
    entries = metadata.launch_bound.compile()
    assert entries([8], {"n": 100}) == 200  # "step" per iteration: a pair of one slot, or two
    # The kernel reads its capacity from its buffer pointer's low bits, and assembles.
    ptx = found.kernel.asm["ptx"]
    assert "and.b32 \t%pik_shift, %pik_shift, 31;" in ptx
    assert "and.b32 \t%pik_t, %pik_n, %pik_mask;" in ptx
    assert ptxas(ptx, tmp_path).returncode == 0


def test_a_scope_after_a_runtime_loop_is_bounded(compile_kernel):
    found = capacity_of(compile_kernel, scope_after_loop_kernel)
    loop = f"{THIS_FILE}:{line_of(scope_after_loop_kernel, 'for i in range(n)')}"
    assert (found.entries, found.source, found.bound) == (1, "bound", 1)
    assert found.reason == f"the loop at {loop} records no scope: at most 1 slot"


def test_if_else_and_an_early_return(compile_kernel):
    found = capacity_of(compile_kernel, branches_kernel)
    # The odd branch's two scopes outweigh the even branch's one; "tail" may be skipped.
    bound = max(1, 2) + 1
    assert (found.entries, found.source, found.bound) == (next_power_of_two(bound), "bound", bound)
    assert found.reason == f"no loops: at most {bound} slots on the heaviest path through the branches"


@pytest.mark.parametrize(
    "mode",
    [
        "instrumentation:ctas=4:warps=0,3",
        "instrumentation:granularity=warpgroup",
        "instrumentation:granularity=cta:pairs=off",
    ],
)
def test_a_launch_sized_kernel_assembles_sampled_and_at_every_granularity(
    mode, compile_kernel, ptxas, tmp_path
):
    parsed = Mode.parse(mode)
    kernel = compile_kernel(runtime_loop_kernel, SIGNATURE, {"BLOCK": 128}, mode=parsed, num_warps=4)
    metadata = kernel_metadata_of(kernel)
    assert metadata.capacity is not None and metadata.capacity.source == "launch"
    ptx = kernel.asm["ptx"]
    assert "%pik_cta_bytes" in ptx and "%pik_mask" in ptx
    assert ptxas(ptx, tmp_path).returncode == 0
