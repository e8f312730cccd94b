"""The ``pikgpu`` dialect as text: parse, verify, print, in custom and generic syntax."""

from __future__ import annotations

import io
import re

import pytest
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from proton_ik.dialect import parse_module
from proton_ik.dialect.pikgpu import FinalizeOp, ReadClockOp, SegmentSetupOp, StoreRecordOp
from proton_ik.layout import VERSION, BufferLayout, Granularity, make_tag

LAYOUT = BufferLayout(units=4, capacity=1024)
SETUP = (
    f'pikgpu.segment_setup {{granularity = "warp", units = 4 : i64, capacity = 1024 : i64, '
    f"cta_bytes = {LAYOUT.cta_bytes} : i64, layout_version = {VERSION} : i64}}"
)
END_TAG = make_tag(0, is_end=True)

PIKGPU_TEXT = f"""\
builtin.module attributes {{pik.kernel = "add"}} {{
  {SETUP}
  %0 = pikgpu.read_clock {{site = 80 : i64}} : i32
  pikgpu.store_record %0 tag 0 : i64 {{site = 80 : i64}}
  %1 = pikgpu.read_clock {{site = 97 : i64}} : i32
  pikgpu.store_record %1 tag {END_TAG} : i64 {{site = 97 : i64}}
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
    assert isinstance(ops[-1], FinalizeOp)


def test_python_constructors_match_the_text():
    clock = ReadClockOp(80)
    ops = [SegmentSetupOp(Granularity.WARP, LAYOUT), clock, StoreRecordOp(clock.clock, 0, 80), FinalizeOp()]
    for op in ops:
        op.verify()
    assert [str(op) for op in ops] == [
        SETUP,
        "%0 = pikgpu.read_clock {site = 80 : i64} : i32",
        "pikgpu.store_record %0 tag 0 : i64 {site = 80 : i64}",
        "pikgpu.finalize",
    ]


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


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            _setup(cta_bytes=LAYOUT.cta_bytes + 128),
            f"cta_bytes = {LAYOUT.cta_bytes + 128} disagrees with the layout's {LAYOUT.cta_bytes} "
            "for 4 units of 1024 records",
        ),
        (_setup(units=8, cta_bytes=LAYOUT.cta_bytes), "disagrees with the layout's"),
        (_setup(capacity=1000, cta_bytes=0), "records per unit must be a power of two, got 1000"),
        (_setup(units=0, cta_bytes=0), "a kernel has at least one recording unit"),
        (_setup(granularity="thread"), "'thread' is not a valid Granularity"),
        (
            _setup(version=VERSION + 1),
            f"built for layout version {VERSION + 1}, this lowering writes version",
        ),
        (
            '%0 = "builtin.unrealized_conversion_cast"() : () -> i32\n  pikgpu.store_record %0 tag 0',
            "pikgpu.store_record must store the result of a pikgpu.read_clock",
        ),
        ("%0 = pikgpu.read_clock : i32\n  pikgpu.store_record %0 tag 4294967296", "does not fit 32 bits"),
        ("%0 = pikgpu.read_clock : i32\n  pikgpu.store_record %0 tag -1", "does not fit 32 bits"),
        ("%0 = pikgpu.read_clock : i32\n  pikgpu.store_record %0 tag 268435456", "unknown record kind 1"),
    ],
)
def test_verifier_refuses(body: str, message: str):
    with pytest.raises(VerifyException, match=re.escape(message)):
        parse_module(f"builtin.module {{\n  {body}\n}}")


def test_read_clock_is_32_bits():
    with pytest.raises(VerifyException):
        parse_module("builtin.module {\n  %0 = pikgpu.read_clock : i64\n}")


@pytest.mark.parametrize("granularity", list(Granularity))
def test_every_granularity_verifies(granularity: Granularity):
    setup = parse_module(
        f"builtin.module {{\n  {_setup(granularity=granularity.value)}\n}}"
    ).body.block.first_op
    assert setup.granularity_enum is granularity
