"""The carrier: a ``pik.record`` in MLIR generic syntax inside a PTX comment, and back."""

from __future__ import annotations

import re

import pytest
from xdsl.utils.exceptions import VerifyException

from proton_ik.dialect.markers import MARKER_PREFIX, is_marker, marker_text, parse_marker
from proton_ik.dialect.pik import RecordOp


def test_marker_text_is_the_generic_op_in_a_ptx_comment():
    assert marker_text(RecordOp("begin", "load")) == (
        '// pik.marker "pik.record"() <{kind = "begin", scope = "load"}> : () -> ()'
    )


@pytest.mark.parametrize("kind", ["begin", "end"])
@pytest.mark.parametrize("name", ["load", "k step #2", "a/b:c{d}|e%f'g", "x" * 128])
def test_marker_round_trips(kind: str, name: str):
    text = marker_text(RecordOp(kind, name))
    assert text.startswith(MARKER_PREFIX)
    assert "\n" not in text
    back = parse_marker(text)
    assert isinstance(back, RecordOp)
    assert (back.kind.data, back.scope.data) == (kind, name)
    assert marker_text(back) == text


def test_marker_is_found_with_the_indentation_and_trailing_space_of_ptx():
    line = "\t" + marker_text(RecordOp("end", "store")) + "   "
    assert is_marker(line)
    op = parse_marker(line)
    assert op is not None
    assert (op.kind.data, op.scope.data) == ("end", "store")


@pytest.mark.parametrize(
    "line",
    [
        "",
        "\tret;",
        "\t// begin inline asm",
        "\t// pik record",
        "\t// pik.markers are not this",
        "\tmov.u32 \t%r1, %clock; // pik.marker in a trailing comment",
        '\t.loc\t1 12 4 // pik.marker "pik.record"() <{kind = "begin", scope = "x"}> : () -> ()',
        '"pik.record"() <{kind = "begin", scope = "x"}> : () -> ()',
    ],
)
def test_non_marker_lines_give_none(line: str):
    assert parse_marker(line) is None
    assert not is_marker(line)


def test_a_marker_must_carry_a_record():
    line = MARKER_PREFIX + '"pik.scope"() <{scope_id = 0 : i64, scope = "x"}> : () -> ()'
    with pytest.raises(ValueError, match=re.escape("a pik marker must carry a pik.record, got pik.scope")):
        parse_marker(line)


def test_a_marker_is_verified_when_read():
    line = MARKER_PREFIX + '"pik.record"() <{kind = "begin", scope = ""}> : () -> ()'
    with pytest.raises(VerifyException, match="must not be empty"):
        parse_marker(line)


def test_a_bad_op_is_refused_when_written():
    with pytest.raises(VerifyException, match=r"has characters \['\$'\]"):
        marker_text(RecordOp("begin", "cost$"))
