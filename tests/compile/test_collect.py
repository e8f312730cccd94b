"""``collect-pik-markers``: PTX text in, ``pik`` module text out."""

from __future__ import annotations

import re

import pytest

from proton_ik.dialect import parse_module
from proton_ik.dialect.markers import marker_text
from proton_ik.dialect.pik import RecordOp
from proton_ik.lowering import ptx_text
from proton_ik.lowering.collect import PASS_NAME, collect_markers, kernel_of


def blocks_of(ptx: str) -> list[int]:
    lines = ptx.splitlines()
    return ptx_text.straight_line_blocks(lines, *ptx_text.entry_body(lines))


def expected(kernel_ptx: str) -> str:
    blocks = blocks_of(kernel_ptx)
    return f"""\
builtin.module attributes {{pik.kernel = "k"}} {{
  pik.record "begin" "load" {{line = 12 : i64, site = 28 : i64, block = {blocks[28]} : i64, file = "k.py"}}
  pik.record "end" "load" {{line = 14 : i64, site = 36 : i64, block = {blocks[36]} : i64, file = "k.py"}}
}}"""


def test_pass_name():
    assert PASS_NAME == "collect-pik-markers"


def test_markers_become_records_with_site_and_source_line(kernel_ptx: str):
    module = collect_markers(kernel_ptx)
    assert str(module) == expected(kernel_ptx)
    module.verify()
    assert str(parse_module(expected(kernel_ptx))) == expected(kernel_ptx)
    assert kernel_of(module) == "k"


def test_site_is_the_zero_based_ptx_line_of_the_marker(kernel_ptx: str):
    lines = kernel_ptx.splitlines()
    records = [op for op in collect_markers(kernel_ptx).walk() if isinstance(op, RecordOp)]
    for record in records:
        marker = lines[record.site.value.data]
        assert marker.strip() == marker_text(RecordOp(record.kind.data, record.scope.data))


def _entry(body: str, files: str = "") -> str:
    return f".visible .entry kern(\n\t.param .u64 kern_param_0\n)\n{{\n{body}\n\tret;\n}}\n{files}"


def test_a_marker_before_any_loc_has_no_source_line():
    ptx = _entry("\t" + marker_text(RecordOp("begin", "early")))
    assert str(collect_markers(ptx)) == (
        'builtin.module attributes {pik.kernel = "kern"} {\n'
        '  pik.record "begin" "early" {site = 4 : i64, block = 0 : i64}\n}'
    )


def test_the_nearest_preceding_loc_names_file_and_line():
    body = "\n".join(
        [
            "\t.loc\t1 5 0",
            "\t" + marker_text(RecordOp("begin", "outer")),
            "\t.loc\t2 30 7",
            "\tmov.u32 \t%r1, 0;",
            "\t" + marker_text(RecordOp("begin", "helper")),
            "\t.loc\t1 9 2",
            "\t" + marker_text(RecordOp("end", "helper")),
            "\t" + marker_text(RecordOp("end", "outer")),
        ]
    )
    files = '\t.file\t1 "/src/kernels/main.py"\n\t.file\t2 "/src/lib/helpers.py", 1700000000, 1234\n'
    records = [op for op in collect_markers(_entry(body, files)).walk() if isinstance(op, RecordOp)]
    assert [(r.scope.data, r.kind.data, r.source_location) for r in records] == [
        ("outer", "begin", "main.py:5"),
        ("helper", "begin", "helpers.py:30"),
        ("helper", "end", "main.py:9"),
        ("outer", "end", "main.py:9"),
    ]


def test_block_is_the_straight_line_stretch_of_the_marker(kernel_ptx: str):
    """The fixture's ``@%p1 ret`` lies between its two markers: they sit in different blocks."""
    blocks = blocks_of(kernel_ptx)
    records = [op for op in collect_markers(kernel_ptx).walk() if isinstance(op, RecordOp)]
    assert [r.block.value.data for r in records] == [blocks[28], blocks[36]]
    assert blocks[28] < blocks[36]


def test_markers_share_a_block_until_a_label_or_a_branch():
    def marker(kind: str, name: str) -> str:
        return "\t" + marker_text(RecordOp(kind, name))

    body = "\n".join(
        [
            marker("begin", "a"),
            marker("begin", "b"),
            "\tmov.u32 \t%r1, 0;",
            marker("end", "b"),
            "$L__BB0_1:",
            marker("end", "a"),
            "\t@%p1 bra \t$L__BB0_1;",
            marker("begin", "c"),
            marker("end", "c"),
        ]
    )
    records = [op for op in collect_markers(_entry(body)).walk() if isinstance(op, RecordOp)]
    assert [(r.kind.data, r.scope.data, r.block.value.data) for r in records] == [
        ("begin", "a", 0),
        ("begin", "b", 0),
        ("end", "b", 0),
        ("end", "a", 1),
        ("begin", "c", 2),
        ("end", "c", 2),
    ]


def test_ptx_without_markers_gives_an_empty_module():
    module = collect_markers(_entry("\tmov.u32 \t%r1, 0;"))
    assert str(module) == 'builtin.module attributes {pik.kernel = "kern"} {\n}'


def test_ptx_without_an_entry_is_refused():
    with pytest.raises(ValueError, match=re.escape("expected one .entry in the PTX, found 0")):
        collect_markers(".version 8.7\n.target sm_90a\n")


def test_a_marker_that_carries_its_place_keeps_it_over_the_ptx_loc(kernel_ptx: str):
    """The annotation call's line and file, carried in the marker, win over the nearest .loc,
    which LLVM may leave from code it moved before the marker."""
    old = marker_text(RecordOp("begin", "load"))
    assert old in kernel_ptx
    ptx = kernel_ptx.replace(old, marker_text(RecordOp("begin", "load", line=7, file="user.py")), 1)
    begin, end = collect_markers(ptx).body.block.ops
    assert (begin.line.value.data, begin.file.data) == (7, "user.py")
    assert (end.line.value.data, end.file.data) == (14, "k.py")  # no place carried: the .loc's
