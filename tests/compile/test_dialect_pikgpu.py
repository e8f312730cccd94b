"""The ``pikgpu`` dialect as text: parse, verify, print, in custom and generic syntax."""

from __future__ import annotations

import io
import re

import pytest
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from proton_ik.contract.layout import VERSION, BufferLayout, Granularity
from proton_ik.contract.tags import TAG_PAIR_BIT, RecordKind, make_tag
from proton_ik.dialect import parse_module
from proton_ik.dialect.pikgpu import FinalizeOp, ReadClockOp, SegmentSetupOp, StorePairOp, StoreRecordOp

LAYOUT = BufferLayout(units=4, capacity=1024)
SETUP = (
    f'pikgpu.segment_setup {{granularity = "warp", units = 4 : i64, capacity = 1024 : i64, '
    f"cta_bytes = {LAYOUT.cta_bytes} : i64, layout_version = {VERSION} : i64}}"
)
END_TAG = make_tag(0, is_end=True)
PAIR_TAGS = make_tag(1, False, paired=True), make_tag(1, True)

PIKGPU_TEXT = f"""\
builtin.module attributes {{pik.kernel = "add"}} {{
  {SETUP}
  %0 = pikgpu.read_clock {{site = 80 : i64}} : i32
  pikgpu.store_record %0 tag 0 : i64 {{site = 80 : i64}}
  %1 = pikgpu.read_clock {{site = 97 : i64}} : i32
  pikgpu.store_record %1 tag {END_TAG} : i64 {{site = 97 : i64}}
  %2 = pikgpu.read_clock {{site = 101 : i64}} : i32
  %3 = pikgpu.read_clock {{site = 108 : i64}} : i32
  pikgpu.store_pair %2, %3 tags {PAIR_TAGS[0]} : i64, {PAIR_TAGS[1]} : i64 {{site = 108 : i64}}
  pikgpu.finalize
}}
"""

PIKGPU_GENERIC = f"""\
"builtin.module"() ({{
  "pikgpu.segment_setup"() <{{granularity = "warp", units = 4 : i64, capacity = 1024 : i64, \
cta_bytes = {LAYOUT.cta_bytes} : i64, layout_version = {VERSION} : i64}}> : () -> ()
  %0 = "pikgpu.read_clock"() <{{site = 80 : i64}}> : () -> i32
  "pikgpu.store_record"(%0) <{{tag = 0 : i64, site = 80 : i64}}> : (i32) -> ()
  %1 = "pikgpu.read_clock"() <{{site = 97 : i64}}> : () -> i32
  "pikgpu.store_record"(%1) <{{tag = {END_TAG} : i64, site = 97 : i64}}> : (i32) -> ()
  %2 = "pikgpu.read_clock"() <{{site = 101 : i64}}> : () -> i32
  %3 = "pikgpu.read_clock"() <{{site = 108 : i64}}> : () -> i32
  "pikgpu.store_pair"(%2, %3) <{{begin_tag = {PAIR_TAGS[0]} : i64, end_tag = {PAIR_TAGS[1]} : i64, \
site = 108 : i64}}> : (i32, i32) -> ()
  "pikgpu.finalize"() : () -> ()
}}) {{pik.kernel = "add"}} : () -> ()
"""


def generic(op) -> str:
    stream = io.StringIO()
    Printer(stream=stream, print_generic_format=True).print_op(op)
    return stream.getvalue() + "\n"


def test_custom_syntax_round_trips():
    assert str(parse_module(PIKGPU_TEXT)) + "\n" == PIKGPU_TEXT


def test_generic_syntax_prints_and_parses_back():
    module = parse_module(PIKGPU_TEXT)
    assert generic(module) == PIKGPU_GENERIC
    again = parse_module(PIKGPU_GENERIC)
    assert str(again) + "\n" == PIKGPU_TEXT
    assert generic(again) == PIKGPU_GENERIC


def test_ops_read_back_as_typed_python_values():
    ops = list(parse_module(PIKGPU_TEXT).body.block.ops)
    setup = ops[0]
    assert isinstance(setup, SegmentSetupOp)
    assert setup.layout == LAYOUT
    assert setup.granularity_enum is Granularity.WARP
    stores = [op for op in ops if isinstance(op, StoreRecordOp)]
    assert [s.is_end for s in stores] == [False, True]
    assert all(isinstance(s.clock.owner, ReadClockOp) for s in stores)
    (pair,) = [op for op in ops if isinstance(op, StorePairOp)]
    assert (pair.begin_tag.value.data, pair.end_tag.value.data) == PAIR_TAGS
    assert [pair.begin_clock.owner.site.value.data, pair.end_clock.owner.site.value.data] == [101, 108]
    assert pair.site.value.data == 108
    assert isinstance(ops[-1], FinalizeOp)


def test_python_constructors_match_the_text():
    clock = ReadClockOp(80)
    begin, end = ReadClockOp(101), ReadClockOp(108)
    ops = [
        SegmentSetupOp(Granularity.WARP, LAYOUT),
        clock,
        StoreRecordOp(clock.clock, 0, 80),
        begin,
        end,
        StorePairOp(begin.clock, end.clock, *PAIR_TAGS, 108),
        FinalizeOp(),
    ]
    for op in ops:
        op.verify()
    assert [str(op) for op in ops] == [
        SETUP,
        "%0 = pikgpu.read_clock {site = 80 : i64} : i32",
        "pikgpu.store_record %0 tag 0 : i64 {site = 80 : i64}",
        "%0 = pikgpu.read_clock {site = 101 : i64} : i32",
        "%0 = pikgpu.read_clock {site = 108 : i64} : i32",
        f"pikgpu.store_pair %0, %1 tags {PAIR_TAGS[0]} : i64, {PAIR_TAGS[1]} : i64 {{site = 108 : i64}}",
        "pikgpu.finalize",
    ]


def test_a_pair_without_a_site_prints_without_one():
    begin, end = ReadClockOp(), ReadClockOp()
    pair = StorePairOp(begin.clock, end.clock, *PAIR_TAGS, None)
    pair.verify()
    assert pair.site is None
    assert str(pair) == f"pikgpu.store_pair %0, %1 tags {PAIR_TAGS[0]} : i64, {PAIR_TAGS[1]} : i64"


def _setup(
    *,
    units: int = 4,
    capacity: int = 1024,
    cta_bytes: int | None = None,
    granularity: str = "warp",
    version: int = VERSION,
) -> str:
    if cta_bytes is None:
        cta_bytes = BufferLayout(units, capacity).cta_bytes
    return (
        f'pikgpu.segment_setup {{granularity = "{granularity}", units = {units} : i64, '
        f"capacity = {capacity} : i64, cta_bytes = {cta_bytes} : i64, layout_version = {version} : i64}}"
    )


TWO_CLOCKS = "%0 = pikgpu.read_clock : i32\n  %1 = pikgpu.read_clock : i32\n  "


def _pair(begin_tag: int, end_tag: int, operands: str = "%0, %1") -> str:
    return f"{TWO_CLOCKS}pikgpu.store_pair {operands} tags {begin_tag}, {end_tag}"


NOT_A_CLOCK = '%2 = "builtin.unrealized_conversion_cast"() : () -> i32\n  '
PAIR_BIT = 1 << TAG_PAIR_BIT


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            _setup(cta_bytes=LAYOUT.cta_bytes + 128),
            f"cta_bytes = {LAYOUT.cta_bytes + 128} disagrees with the layout's {LAYOUT.cta_bytes} "
            "for 4 units of 1024 entries",
        ),
        (_setup(units=8, cta_bytes=LAYOUT.cta_bytes), "disagrees with the layout's"),
        (
            _setup(capacity=1000, cta_bytes=0),
            "ring slots per unit must be a power of two of at least 1 in layout version 2, got 1000",
        ),
        (_setup(units=0, cta_bytes=0), "a kernel has at least one recording unit"),
        (_setup(granularity="thread"), "'thread' is not a valid Granularity"),
        (
            _setup(version=VERSION + 2),
            f"built for layout version {VERSION + 2}, this lowering writes versions",
        ),
        (
            '%0 = "builtin.unrealized_conversion_cast"() : () -> i32\n  pikgpu.store_record %0 tag 0',
            "pikgpu.store_record must store the result of a pikgpu.read_clock",
        ),
        ("%0 = pikgpu.read_clock : i32\n  pikgpu.store_record %0 tag 4294967296", "does not fit 32 bits"),
        ("%0 = pikgpu.read_clock : i32\n  pikgpu.store_record %0 tag -1", "does not fit 32 bits"),
        ("%0 = pikgpu.read_clock : i32\n  pikgpu.store_record %0 tag 1879048192", "unknown record kind 7"),
        (
            f"%0 = pikgpu.read_clock : i32\n  pikgpu.store_record %0 tag {make_tag(3, False, RecordKind.VALUE)}",
            "is a value record's, which pikgpu.store_value stores",
        ),
        (
            f"%0 = pikgpu.read_clock : i32\n  pikgpu.store_record %0 tag {make_tag(3, False, paired=True)}",
            f"tag {make_tag(3, False, paired=True):#x} has the pair bit, which only pikgpu.store_pair sets",
        ),
        (
            f"%0 = pikgpu.read_clock : i32\n  pikgpu.store_record %0 tag {make_tag(3, True) | PAIR_BIT}",
            "has the pair bit, which only pikgpu.store_pair sets",
        ),
        (
            _pair(make_tag(1, False), PAIR_TAGS[1]),
            f"begin tag {make_tag(1, False):#x} must be a begin with the pair bit set",
        ),
        (
            _pair(make_tag(1, True) | PAIR_BIT, PAIR_TAGS[1]),
            f"begin tag {make_tag(1, True) | PAIR_BIT:#x} must be a begin with the pair bit set",
        ),
        (
            _pair(PAIR_TAGS[0], make_tag(2, True)),
            f"end tag {make_tag(2, True):#x} must end the scope that begin tag {PAIR_TAGS[0]:#x} begins",
        ),
        (
            _pair(PAIR_TAGS[0], make_tag(1, False)),
            f"end tag {make_tag(1, False):#x} must end the scope that begin tag {PAIR_TAGS[0]:#x} begins",
        ),
        (
            NOT_A_CLOCK + _pair(*PAIR_TAGS, operands="%2, %1"),
            "pikgpu.store_pair must store the results of pikgpu.read_clock",
        ),
        (
            NOT_A_CLOCK + _pair(*PAIR_TAGS, operands="%0, %2"),
            "pikgpu.store_pair must store the results of pikgpu.read_clock",
        ),
    ],
)
def test_verifier_refuses(body: str, message: str):
    with pytest.raises(VerifyException, match=re.escape(message)):
        parse_module(f"builtin.module {{\n  {body}\n}}")


@pytest.mark.parametrize(
    ("begin_tag", "end_tag"),
    [
        pytest.param(PAIR_TAGS[0] | 1 << 32, PAIR_TAGS[1], id="begin-tag-over-32-bits"),
        pytest.param(PAIR_TAGS[0], PAIR_TAGS[1] | 1 << 40, id="end-tag-over-32-bits"),
        pytest.param(PAIR_TAGS[0] | 7 << 28, PAIR_TAGS[1] | 7 << 28, id="unknown-record-kind"),
        pytest.param(PAIR_TAGS[0], PAIR_TAGS[1] | PAIR_BIT, id="end-tag-with-the-pair-bit"),
        pytest.param(
            make_tag(1, False, RecordKind.EVENT, paired=True),
            make_tag(1, True, RecordKind.EVENT),
            id="an-event-is-never-a-pair",
        ),
    ],
)
def test_store_pair_checks_its_tags_as_store_record_does(begin_tag: int, end_tag: int):
    """Each tag becomes a 32-bit PTX immediate read back by the decoder: store_record refuses
    a tag over 32 bits or of an unknown kind, and the pair bit belongs on the begin alone."""
    with pytest.raises(VerifyException):
        parse_module(f"builtin.module {{\n  {_pair(begin_tag, end_tag)}\n}}")


def test_read_clock_is_32_bits():
    with pytest.raises(VerifyException):
        parse_module("builtin.module {\n  %0 = pikgpu.read_clock : i64\n}")


def test_store_pair_operands_are_32_bits():
    with pytest.raises(VerifyException, match="i32"):
        parse_module(
            'builtin.module {\n  %0 = "builtin.unrealized_conversion_cast"() : () -> i64\n'
            "  %1 = pikgpu.read_clock : i32\n"
            f'  "pikgpu.store_pair"(%0, %1) <{{begin_tag = {PAIR_TAGS[0]} : i64, end_tag = {PAIR_TAGS[1]} : i64}}>'
            " : (i64, i32) -> ()\n}"
        )


@pytest.mark.parametrize("granularity", list(Granularity))
def test_every_granularity_verifies(granularity: Granularity):
    setup = parse_module(
        f"builtin.module {{\n  {_setup(granularity=granularity.value)}\n}}"
    ).body.block.first_op
    assert setup.granularity_enum is granularity
