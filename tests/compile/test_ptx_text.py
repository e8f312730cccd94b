"""``ptx_text``: facts read off PTX text. Hand-written PTX in, line numbers and blocks out."""

from __future__ import annotations

import pytest

from proton_ik.lowering.ptx_text import entry_body, straight_line_blocks

HEADER = [
    ".version 8.7",
    ".target sm_90a",
    ".address_size 64",
    "",
    ".visible .entry k(",
    "\t.param .u64 k_param_0",
    ")",
]
TRAILER = ['\t.file\t1 "/src/k.py"']


def blocks_of(body: list[tuple[str, int]]) -> tuple[list[int], list[int]]:
    """Wrap ``(line, expected block)`` rows in an entry function; return the blocks that
    ``straight_line_blocks`` gives the rows, and the expected ones."""
    lines = [*HEADER, *(line for line, _ in body), *TRAILER]
    start, end = entry_body(lines)
    assert (start, end) == (len(HEADER), len(HEADER) + len(body) - 1)
    blocks = straight_line_blocks(lines, start, end)
    assert len(blocks) == len(lines)
    return blocks[start : end + 1], [block for _, block in body]


def test_labels_and_branches_start_blocks():
    """A loop (label, back edge), an ``if`` (predicated forward branch, label), returns, exit."""
    got, expected = blocks_of(
        [
            ("{", 0),
            ("\t.reg .pred \t%p<4>;", 0),
            ("\t.reg .b32 \t%r<4>;", 0),
            ("\tmov.u32 \t%r1, 0;", 0),
            ("$L__BB0_1:                              // %loop", 1),
            ("\tadd.s32 \t%r1, %r1, 1;", 1),
            ("\tsetp.lt.s32 \t%p1, %r1, 8;", 1),
            ("\t@%p1 bra \t$L__BB0_1;", 1),
            ("// %bb.2:", 2),
            ("\tsetp.eq.s32 \t%p2, %r1, 3;", 2),
            ("\t@!%p2 bra.uni \t$L__BB0_4;", 2),
            ("\tmov.u32 \t%r2, 1;", 3),
            ("$L__BB0_4:", 4),
            ("\tmov.u32 \t%r3, %r2;", 4),
            ("\t@%p2 ret;", 4),
            ("\tmov.u32 \t%r3, 2;", 5),
            ("\t@%p3 exit;", 5),
            ("\tbra.uni \t$L__BB0_6;", 6),
            ("$L__BB0_6:", 8),
            ("\tret;", 8),
            ("}", 9),
        ]
    )
    assert got == expected


def test_a_label_right_after_a_branch_starts_one_block():
    got, expected = blocks_of(
        [
            ("{", 0),
            ("\t@%p1 bra \t$L__BB0_2;", 0),
            ("$L__BB0_2:", 2),
            ("\tret;", 2),
            ("}", 3),
        ]
    )
    assert got == expected


def test_comments_do_not_split_blocks():
    got, expected = blocks_of(
        [
            ("{", 0),
            ("\tmov.u32 \t%r1, 0; // bra $L__BB0_1; ret;", 0),
            ("\t// $L__BB0_1:", 0),
            ("\t// begin inline asm", 0),
            ("\t// ret;", 0),
            ("\t// end inline asm", 0),
            ("\tret;", 0),
            ("}", 1),
        ]
    )
    assert got == expected


def test_inline_asm_blocks_are_opaque():
    """An mbarrier wait loop in inline asm has a label and a branch of its own, inside its braces;
    LLVM prints the closing brace at column 0. Control always leaves it at the bottom."""
    got, expected = blocks_of(
        [
            ("{", 0),
            ("\tmov.u32 \t%r1, 0;", 0),
            ("\t// begin inline asm", 0),
            ("\t{", 0),
            ("\t.reg .pred complete;", 0),
            ("\twaitLoop:", 0),
            ("\tmbarrier.try_wait.parity.shared::cta.b64 complete, [%r1], 0;", 0),
            ("\t@!complete bra.uni waitLoop;", 0),
            ("\t@%p1 bra \tdone;", 0),
            ("\tdone:", 0),
            ("\tret;", 0),
            ("}", 0),
            ("\t// end inline asm", 0),
            ("\tmov.u32 \t%r2, 1;", 0),
            ("\tret;", 0),
            ("}", 1),
        ]
    )
    assert got == expected


def test_calls_in_call_sequences_fall_through():
    """LLVM wraps each call in a ``{ // callseq }`` block: the call returns, and only calls of
    the function itself, at depth 1, end a block."""
    got, expected = blocks_of(
        [
            ("{", 0),
            ("\t{ // callseq 0, 0", 0),
            ("\t.param .b64 param0;", 0),
            ("\tst.param.b64 \t[param0], %rd1;", 0),
            ("\tcall.uni \tvprintf, (param0);", 0),
            ("\t} // callseq 0", 0),
            ("\tmov.u32 \t%r1, 0;", 0),
            ("\tcall.uni \thelper, (param0);", 0),
            ("\tmov.u32 \t%r2, 0;", 1),
            ("\tbrx.idx \t%r1, $L_targets;", 1),
            ("\tret;", 2),
            ("}", 3),
        ]
    )
    assert got == expected


def test_lines_outside_the_entry_body_are_block_zero():
    lines = [*HEADER, "{", "$L__BB0_1:", "\t@%p1 bra \t$L__BB0_1;", "}", *TRAILER]
    blocks = straight_line_blocks(lines, *entry_body(lines))
    assert blocks == [0] * len(HEADER) + [0, 1, 1, 2] + [0]


@pytest.mark.parametrize("label", ["$L__tmp3", "$L__func_begin0"])
def test_a_label_no_branch_targets_does_not_split_a_block(label: str):
    """LLVM prints ``$L__tmpN`` labels for line info of inlined code (a ``tl.max``, a helper): the
    debug sections name them, no branch does. Only a branch target can be entered other than
    from the line above, so splitting there loses pairs for nothing."""
    got, expected = blocks_of(
        [
            ("{", 0),
            ("\tmov.u32 \t%r1, 0;", 0),
            (f"{label}:", 0),
            ("\tmax.f32 \t%r2, %r1, %r1;", 0),
            ("\tret;", 0),
            ("}", 1),
        ]
    )
    assert got == expected
