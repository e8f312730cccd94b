"""``ptx_text``: facts read off PTX text. Hand-written PTX in, line numbers and blocks out."""

from __future__ import annotations

import pytest

from proton_ik.lowering.ptx_text import (
    branch_target_lists,
    control_flow,
    entry_body,
    line_locations,
    straight_line_blocks,
)

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


def test_a_branch_target_list_on_one_line_names_its_targets():
    """``brx.idx`` jumps to any label of its ``.branchtargets`` list. A target that the code
    above also falls into still starts a block, so no pair spans it."""
    got, expected = blocks_of(
        [
            ("{", 0),
            ("\t$L_brx_0: .branchtargets $L__BB0_2, $L__BB0_3;", 1),
            ("\tbrx.idx \t%r1, $L_brx_0;", 1),
            ("$L__BB0_2:", 3),
            ("\tmov.u32 \t%r2, 1;", 3),
            ("$L__BB0_3:", 4),
            ("\tret;", 4),
            ("}", 5),
        ]
    )
    assert got == expected


@pytest.mark.parametrize(
    "declaration",
    [
        ["\t$L_brx_0: .branchtargets $L__BB0_2, $L__BB0_3, $L__BB0_2;"],
        ["\t$L_brx_0: .branchtargets", "\t\t$L__BB0_2,", "\t\t$L__BB0_3,", "\t\t$L__BB0_2;"],
    ],
)
def test_branch_target_lists_on_one_line_or_several(declaration: list[str]):
    lines = [*HEADER, "{", *declaration, "\tbrx.idx \t%r1, $L_brx_0;", "}", *TRAILER]
    assert branch_target_lists(lines, *entry_body(lines)) == {
        "$L_brx_0": ["$L__BB0_2", "$L__BB0_3", "$L__BB0_2"]
    }


def test_control_flow_follows_branches_returns_calls_and_jump_tables():
    body = [
        "{",  # block 0
        "\tmov.u32 \t%r1, 0;",
        "$L__BB0_1:",  # block 1: a loop
        "\tadd.s32 \t%r1, %r1, 1;",
        "\t@%p1 bra \t$L__BB0_1;",
        "\t@%p2 ret;",  # block 2: an early return
        "\tcall.uni \thelper, (param0);",  # block 3
        "\t$L_brx_0: .branchtargets $L__BB0_5, $L__BB0_6;",  # block 5 (4 is empty)
        "\tbrx.idx \t%r1, $L_brx_0;",
        "$L__BB0_5:",  # block 7 (6 is empty)
        "\tbra.uni \t$L__BB0_6;",
        "$L__BB0_6:",  # block 9 (8 is empty)
        "\tret;",
        "}",  # block 10
    ]
    lines = [*HEADER, *body, *TRAILER]
    start, end = entry_body(lines)
    flow = control_flow(lines, start, end)
    assert flow.entry == 0
    assert [flow.blocks[start + i] for i in (0, 2, 5, 6, 7, 9, 11, 13)] == [0, 1, 2, 3, 5, 7, 9, 10]
    assert flow.successors == {
        0: [1],
        1: [1, 2],
        2: [3],
        3: [4],
        4: [5],
        5: [7, 9],
        6: [7],
        7: [9],
        8: [9],
        9: [],
        10: [],
    }
    assert flow.returns == {2, 9}
    assert flow.transfers == {
        1: start + 4,
        2: start + 5,
        3: start + 6,
        5: start + 8,
        7: start + 10,
        9: start + 12,
    }


def test_a_branch_to_an_unknown_label_is_refused():
    lines = [*HEADER, "{", "\tbra.uni \t$L__BB0_9;", "}", *TRAILER]
    with pytest.raises(ValueError, match=r"branches to unknown labels \['\$L__BB0_9'\]"):
        control_flow(lines, *entry_body(lines))


def test_line_locations_follow_the_last_loc():
    lines = [
        '.file 1 "/src/k.py"',
        "\tmov.u32 \t%r1, 0;",
        "\t.loc\t1 12 4",
        "\tadd.s32 \t%r1, %r1, 1;",
        "\t.loc\t1 0 0",
        "\tret;",
    ]
    assert line_locations(lines) == [None, None, "k.py:12", "k.py:12", "k.py:12", "k.py:12"]
