"""Where a record's PTX goes (``lowering.placement``): a begin above the pure arithmetic before
its marker, never past memory, control flow, inline asm or a clock, and never when it reads the
kernel's registers; in a loop, a pair's end below the cheap arithmetic after its marker, never
past what reads its scope's work. Text in, text out, then ptxas on what came out."""

from __future__ import annotations

from pathlib import Path

import pytest

from proton_ik.lowering import placement
from proton_ik.lowering.instrument import instrument
from proton_ik.mode import Mode


@pytest.mark.parametrize(
    "line, pure",
    [
        ("add.s32 \t%r1, %r2, 3;", True),
        ("@%p1 setp.lt.s32 \t%p2, %r1, %r3;", True),
        ("mov.u32 \t%r71, %ctaid.x;", True),
        ("ld.param.b64 \t%rd1, [k_param_0];", True),
        ("mov.b32 \t{%rs1, %rs2}, %r1;", True),
        ("fma.rn.f32 \t%r5, %r1, %r2, %r3;", True),
        ("mov.u32 \t%r9, %clock;", False),
        ("mov.u64 \t%rd9, %globaltimer;", False),
        ("ld.global.b32 \t%r1, [%rd1];", False),
        ("st.global.b32 \t[%rd1], %r1;", False),
        ("add.cc.u32 \t%r1, %r2, %r3;", False),
        ("addc.u32 \t%r1, %r2, %r3;", False),
        ("bar.sync \t0;", False),
        ("shfl.sync.bfly.b32 \t%r1, %r2, 1, 31, -1;", False),
        ("@%p1 bra \t$L__BB0_2;", False),
        ("$L__BB0_2:", False),
        ("// begin inline asm", False),
    ],
)
def test_only_instructions_that_compute_registers_are_pure(line, pure):
    assert placement.is_pure(line) is pure


# The module and entry of both hand-written kernels below, up to the body's opening brace.
ENTRY = """\
.version 8.7
.target sm_90a
.address_size 64

.visible .entry k(
	.param .u64 .ptr .global .align 1 k_param_0,
	.param .u32 k_param_1,
	.param .u64 .ptr .global .align 1 k_param_2
)
.reqntid 128
{
"""

KERNEL = (
    ENTRY
    + """\
	.reg .pred 	%p<3>;
	.reg .b32 	%r<8>;
	.reg .b64 	%rd<3>;

// %bb.0:
	ld.param.b64 	%rd1, [k_param_0];
	ld.global.b32 	%r1, [%rd1];
	.loc	1 12 4
	mov.u32 	%r2, %tid.x;
	add.s32 	%r3, %r2, %r1;
	setp.lt.s32 	%p1, %r3, 100;
	// begin inline asm
	// pik.marker "pik.record"() <{kind = "begin", scope = "first"}> : () -> ()
	// end inline asm
	@%p1 st.global.b32 	[%rd1], %r3;
	mul.lo.s32 	%r4, %r3, 3;
	// begin inline asm
	// pik.marker "pik.record"() <{kind = "end", scope = "first"}> : () -> ()
	// end inline asm
	add.s32 	%r5, %r4, 1;
	// begin inline asm
	// pik.marker "pik.record"() <{kind = "begin", scope = "second"}> : () -> ()
	// end inline asm
	st.global.b32 	[%rd1+4], %r5;
	// begin inline asm
	// pik.marker "pik.record"() <{kind = "end", scope = "second"}> : () -> ()
	// end inline asm
	ret;
$L__func_end0:
}
"""
)


def _lowered(mode: Mode | None = None) -> list[str]:
    result = instrument(KERNEL, mode or Mode(), num_warps=4)
    assert result is not None
    return result.ptx.splitlines()


def _first(lines: list[str], text: str) -> int:
    return next(i for i, line in enumerate(lines) if line.strip() == text)


def test_a_begin_goes_above_the_pure_arithmetic_before_its_marker_and_stops_at_memory():
    lines = _lowered()
    begin = _first(lines, "mov.u32 \t%pik_b0, %clock;")
    assert lines[begin - 1].strip() == "// pik pair begin"
    assert lines[begin - 2].strip() == "ld.global.b32 \t%r1, [%rd1];"  # what stopped it
    assert _first(lines, "setp.lt.s32 \t%p1, %r3, 100;") > begin
    assert _first(lines, "mov.u32 \t%r2, %tid.x;") > begin


def test_a_begin_never_passes_the_end_before_it_and_ends_stay_at_their_markers():
    lines = _lowered()
    first_end = _first(lines, "mov.u32 \t%pik_c, %clock;")
    second_begin = _first(lines, "mov.u32 \t%pik_b1, %clock;")
    # The add between the first end and the second begin moves into the second scope; the
    # begin stops at the first end's inline asm.
    assert first_end < second_begin < _first(lines, "add.s32 \t%r5, %r4, 1;")
    assert lines[second_begin - 2].strip() == "// end inline asm"
    ends = [i for i, line in enumerate(lines) if line.strip() == "// pik pair end"]
    assert all(lines[i - 1].strip() == "// begin inline asm" for i in ends)


def test_single_records_move_whole_and_the_kernel_still_assembles(ptxas, tmp_path: Path):
    lines = _lowered(Mode(pairs=False))
    records = [i for i, line in enumerate(lines) if line.strip() == "// pik record"]
    assert lines[records[0] - 1].strip() == "ld.global.b32 \t%r1, [%rd1];"
    assert all(lines[i - 1].strip() == "// begin inline asm" for i in records[1:2])
    result = ptxas("\n".join(lines) + "\n", tmp_path)
    assert result.returncode == 0, result.stderr


def test_a_begin_that_reads_the_kernels_registers_stays_where_they_are_defined():
    assert placement.reads_only_ours(
        ["mov.u32 \t%pik_b0, %clock;", "@%pik_w st.global.v4.b32 \t[%pik_a], {1, %pik_b0, 2, %pik_c};"]
    )
    assert not placement.reads_only_ours(
        ["setp.ne.and.u32 \t%pik_g, %r9, 0, %pik_w;", "mov.u32 \t%pik_b0, %clock;"]
    )
    assert not placement.reads_only_ours(["@%p3 bra \t$pik_skip_40;"])


def test_hoisting_stops_at_labels_and_at_the_body_start():
    lines = [
        "{",
        "\t.reg .b32 \t%r<3>;",
        "$L__BB0_1:",
        "\tadd.s32 \t%r1, %r1, 1;",
        "\t// begin inline asm",
        "\t// pik.marker",
        "\t// end inline asm",
    ]
    assert placement.hoisted(lines, 5, 1) == 3
    assert placement.hoisted(["{", "\tadd.s32 \t%r1, %r1, 1;", "\t// pik.marker"], 2, 0) == 1


def test_an_end_goes_below_the_pure_arithmetic_after_its_marker_and_stops_at_memory():
    lines = [
        "{",
        "\t// begin inline asm",
        "\t// pik.marker end",  # 2: the end's marker
        "\t// end inline asm",
        "\t.loc\t1 12 4",
        "\tadd.s32 \t%r1, %r1, 1;",
        "\tmul.wide.s32 \t%rd2, %r1, 2;",
        "\tbar.sync \t0;",  # 7: what stops it
        "\tadd.s32 \t%r2, %r1, 1;",
        "}",
    ]
    assert placement.sunk(lines, 2, len(lines) - 1, set()) == 7
    # The kernel's own inline asm (a load) stops it too; the end goes right above it.
    with_load = [
        *lines[:7],
        "\t// begin inline asm",
        "\tld.global.b32 %r3, [%rd2];",
        "\t// end inline asm",
        "}",
    ]
    assert placement.sunk(with_load, 2, len(with_load) - 1, set()) == 7


def test_an_end_stays_where_the_arithmetic_after_it_runs_into_another_marker_or_there_is_none():
    before_a_begin = [
        "{",
        "\t// begin inline asm",
        "\t// pik.marker end",
        "\t// end inline asm",
        "\tadd.s32 \t%r1, %r1, 1;",  # a begin's marker follows: the begin takes this into its scope
        "\t// begin inline asm",
        "\t// pik.marker begin",
        "\t// end inline asm",
        "}",
    ]
    assert placement.sunk(before_a_begin, 2, len(before_a_begin) - 1, set()) is None
    nothing_after = [
        "{",
        "\t// begin inline asm",
        "\t// pik.marker end",
        "\t// end inline asm",
        "\tret;",
        "}",
    ]
    assert placement.sunk(nothing_after, 2, len(nothing_after) - 1, set()) is None


def test_an_end_never_passes_what_reads_its_scopes_work():
    scope = [
        "\tmov.u64 \t%rd7, %clock64;",  # the scope's work: a spin's last clock read
        "\t// begin inline asm",
        "\tmma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1, %f2, %f3, %f4}, {%r1}, {%r2}, {%f1, %f2, %f3, %f4};",
        "\t// end inline asm",
        "\tst.global.b32 \t[%rd1], %r9;",
    ]
    assert placement.written(scope) == {"%rd7", "%f1", "%f2", "%f3", "%f4"}
    lines = [
        "{",
        "\t// begin inline asm",
        "\t// pik.marker end",
        "\t// end inline asm",
        "\tadd.s32 \t%r1, %r1, 1;",  # passes: reads nothing of the scope's
        "\tsub.s64 \t%rd8, %rd7, %rd6;",  # 5: waits for the spin's clock read; the end stops here
        "\tbar.sync \t0;",
        "}",
    ]
    assert placement.sunk(lines, 2, len(lines) - 1, placement.written(scope)) == 5
    assert placement.sunk(lines, 2, len(lines) - 1, {"%r1"}) is None  # the first line reads it


def test_an_end_stops_at_a_special_registers_read_and_at_slow_arithmetic():
    """Its clock read is issued after what it passes: an S2R or a square root would delay it."""
    head = [
        "{",
        "\t// begin inline asm",
        "\t// pik.marker end",
        "\t// end inline asm",
        "\tadd.s32 \t%r1, %r1, 1;",
    ]
    for stop in ("\tmov.u32 \t%r2, %tid.x;", "\tsqrt.rn.f32 \t%r3, %r4;", "\tcvt.rn.f32.s64 \t%r5, %rd1;"):
        lines = [*head, stop, "\tbar.sync \t0;", "}"]
        assert placement.sunk(lines, 2, len(lines) - 1, set()) == 5, stop


def test_an_end_moves_only_inside_a_loop():
    body = ["{", "$L__BB0_2:", "\tadd.s32 \t%r1, %r1, 1;", "\t// pik.marker end", "\tadd.s32 \t%r2, %r1, 1;"]
    assert placement.in_loop([*body, "\t@%p1 bra \t$L__BB0_2;", "}"], 3, 0, 6)
    assert not placement.in_loop([*body, "\t@%p1 bra \t$L__BB0_9;", "$L__BB0_9:", "}"], 3, 0, 7)
    assert not placement.in_loop(
        ["{", "\t// pik.marker end", "\tbra.uni \t$L__BB0_1;", "$L__BB0_1:", "}"], 1, 0, 4
    )


# A loop's scope in the shape of flash attention's KV loop (attention.py's JIT PTX): the scope's
# work, its end, then the next iteration's counters and addresses, a barrier and a prefetch.
LOOP_KERNEL = (
    ENTRY
    + """\
	.reg .pred 	%p<3>;
	.reg .b32 	%r<12>;
	.reg .b64 	%rd<5>;

	ld.param.b64 	%rd1, [k_param_0];
	ld.param.b32 	%r1, [k_param_1];
	mov.b32 	%r2, 0;
	mov.b32 	%r3, 0;
$L__BB0_2:
	// begin inline asm
	// pik.marker "pik.record"() <{kind = "begin", scope = "kv"}> : () -> ()
	// end inline asm
	ld.global.b32 	%r4, [%rd1];
	mul.lo.s32 	%r5, %r4, 3;
	// begin inline asm
	// pik.marker "pik.record"() <{kind = "end", scope = "kv"}> : () -> ()
	// end inline asm
	add.s32 	%r6, %r3, 1;
	setp.gt.s32 	%p1, %r6, 2;
	selp.b32 	%r3, 0, %r6, %p1;
	mul.wide.s32 	%rd2, %r3, 4;
	add.s64 	%rd3, %rd1, %rd2;
	add.s32 	%r7, %r5, %r2;
	bar.sync 	0;
	st.global.b32 	[%rd3], %r7;
	add.s32 	%r2, %r2, 1;
	setp.lt.s32 	%p2, %r2, %r1;
	@%p2 bra 	$L__BB0_2;
	ret;
$L__func_end0:
}
"""
)


def test_a_loops_end_goes_below_the_next_iterations_arithmetic_and_stops_at_the_scopes_work(
    ptxas, tmp_path: Path
):
    result = instrument(LOOP_KERNEL, Mode(), num_warps=4)
    assert result is not None
    lines = [line.strip() for line in result.ptx.splitlines()]
    end = lines.index("// pik pair end")
    # The counters and the address computed for the next iteration come before the end; the
    # add that reads the scope's work (%r5) stops it.
    assert lines.index("selp.b32 \t%r3, 0, %r6, %p1;") < end
    assert lines.index("add.s64 \t%rd3, %rd1, %rd2;") < end
    assert lines.index("add.s32 \t%r7, %r5, %r2;") > end
    assert lines.index("mul.lo.s32 \t%r5, %r4, 3;") < end
    compiled = ptxas(result.ptx, tmp_path)
    assert compiled.returncode == 0, compiled.stderr
