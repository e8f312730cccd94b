"""Aggregate mode in the IR: ``pikgpu.aggregate_begin``/``aggregate_end`` as text, their verifiers,
and ``convert-pik-to-pikgpu`` with ``aggregate_scopes``: ``pik`` text in, ``pikgpu`` text out."""

from __future__ import annotations

import io

import pytest
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from proton_ik.contract.layout import (
    AGGREGATE_STATS_BYTES,
    UNIT_HEADER_BYTES,
    VERSION,
    BufferLayout,
    Granularity,
)
from proton_ik.dialect import make_context, parse_module
from proton_ik.dialect.pikgpu import AggregateBeginOp, AggregateEndOp, FinalizeOp, SegmentSetupOp
from proton_ik.lowering.pik_to_pikgpu import ConvertPikToPikGPU, scope_count

LAYOUT = BufferLayout(units=4, capacity=0, aggregate_scopes=2)
SETUP = (
    f'pikgpu.segment_setup {{granularity = "warp", units = 4 : i64, capacity = 0 : i64, '
    f"cta_bytes = {LAYOUT.cta_bytes} : i64, layout_version = {VERSION} : i64, aggregate_scopes = 2 : i64}}"
)
AGGREGATE_TEXT = f"""\
builtin.module attributes {{pik.kernel = "k"}} {{
  {SETUP}
  pikgpu.aggregate_begin scope 0 : i64 {{site = 28 : i64}}
  pikgpu.aggregate_begin scope 1 : i64 {{site = 36 : i64}}
  pikgpu.aggregate_end scope 1 : i64 {{site = 40 : i64}}
  pikgpu.aggregate_end scope 0 : i64 {{site = 52 : i64}}
  pikgpu.finalize
}}
"""
AGGREGATE_GENERIC = f"""\
"builtin.module"() ({{
  "pikgpu.segment_setup"() <{{granularity = "warp", units = 4 : i64, capacity = 0 : i64, \
cta_bytes = {LAYOUT.cta_bytes} : i64, layout_version = {VERSION} : i64, aggregate_scopes = 2 : i64}}> : () -> ()
  "pikgpu.aggregate_begin"() <{{scope = 0 : i64, site = 28 : i64}}> : () -> ()
  "pikgpu.aggregate_begin"() <{{scope = 1 : i64, site = 36 : i64}}> : () -> ()
  "pikgpu.aggregate_end"() <{{scope = 1 : i64, site = 40 : i64}}> : () -> ()
  "pikgpu.aggregate_end"() <{{scope = 0 : i64, site = 52 : i64}}> : () -> ()
  "pikgpu.finalize"() : () -> ()
}}) {{pik.kernel = "k"}} : () -> ()
"""

# "outer" around "inner", "inner" ending in another block than it began in: aggregate mode pairs
# nothing, so blocks make no difference.
PIK = """\
builtin.module attributes {pik.kernel = "k"} {
  pik.scope 0 : i64 "outer" {line = 12 : i64}
  pik.scope 1 : i64 "inner" {line = 14 : i64}
  pik.record "begin" "outer" {line = 12 : i64, site = 28 : i64, block = 1 : i64, scope_id = 0 : i64}
  pik.record "begin" "inner" {line = 14 : i64, site = 36 : i64, block = 1 : i64, scope_id = 1 : i64}
  pik.record "end" "inner" {line = 15 : i64, site = 40 : i64, block = 2 : i64, scope_id = 1 : i64}
  pik.record "end" "outer" {line = 17 : i64, site = 52 : i64, block = 2 : i64, scope_id = 0 : i64}
}"""

PIK_CONVERTED = f"""\
builtin.module attributes {{pik.kernel = "k"}} {{
  {SETUP}
  pik.scope 0 : i64 "outer" {{line = 12 : i64}}
  pik.scope 1 : i64 "inner" {{line = 14 : i64}}
  pikgpu.aggregate_begin scope 0 : i64 {{site = 28 : i64}}
  pikgpu.aggregate_begin scope 1 : i64 {{site = 36 : i64}}
  pikgpu.aggregate_end scope 1 : i64 {{site = 40 : i64}}
  pikgpu.aggregate_end scope 0 : i64 {{site = 52 : i64}}
  pikgpu.finalize
}}"""


def generic(op) -> str:
    stream = io.StringIO()
    Printer(stream=stream, print_generic_format=True).print_op(op)
    return stream.getvalue() + "\n"


def test_custom_syntax_round_trips():
    assert str(parse_module(AGGREGATE_TEXT)) + "\n" == AGGREGATE_TEXT


def test_generic_syntax_prints_and_parses_back():
    module = parse_module(AGGREGATE_TEXT)
    assert generic(module) == AGGREGATE_GENERIC
    assert str(parse_module(AGGREGATE_GENERIC)) + "\n" == AGGREGATE_TEXT


def test_ops_read_back_as_typed_python_values():
    ops = list(parse_module(AGGREGATE_TEXT).body.block.ops)
    assert ops[0].layout == LAYOUT and ops[0].layout.aggregate
    assert [(type(op), op.scope_id, op.site.value.data) for op in ops[1:5]] == [
        (AggregateBeginOp, 0, 28),
        (AggregateBeginOp, 1, 36),
        (AggregateEndOp, 1, 40),
        (AggregateEndOp, 0, 52),
    ]


def test_python_constructors_match_the_text():
    ops = [SegmentSetupOp(Granularity.WARP, LAYOUT), AggregateBeginOp(0, 28), AggregateEndOp(0), FinalizeOp()]
    for op in ops:
        op.verify()
    assert [str(op) for op in ops] == [
        SETUP,
        "pikgpu.aggregate_begin scope 0 : i64 {site = 28 : i64}",
        "pikgpu.aggregate_end scope 0 : i64",
        "pikgpu.finalize",
    ]


def test_an_aggregate_segment_is_sized_by_its_scopes():
    assert LAYOUT.unit_bytes == UNIT_HEADER_BYTES + 2 * AGGREGATE_STATS_BYTES
    assert BufferLayout.from_dict(LAYOUT.to_dict()) == LAYOUT
    assert "aggregate_scopes" not in BufferLayout(units=4, capacity=64).to_dict()  # traces read as before


@pytest.mark.parametrize(
    "text, message",
    [
        (
            AGGREGATE_TEXT.replace("aggregate_end scope 1", "aggregate_end scope 2"),
            "scope 2 is beyond the segment's 2",
        ),
        (
            AGGREGATE_TEXT.replace(
                "pikgpu.aggregate_begin scope 0 : i64 {site = 28 : i64}",
                "%0 = pikgpu.read_clock {site = 28 : i64} : i32\n  pikgpu.store_record %0 tag 0 {site = 28 : i64}",
            ),
            "pikgpu.store_record in an aggregate segment",
        ),
        (
            AGGREGATE_TEXT.replace("capacity = 0 : i64", "capacity = 1 : i64"),
            "an aggregate layout keeps 1 to 65536 scopes' statistics and no ring",
        ),
        (
            AGGREGATE_TEXT.replace(f"cta_bytes = {LAYOUT.cta_bytes}", "cta_bytes = 1024"),
            "disagrees with the layout's",
        ),
    ],
)
def test_the_verifiers_refuse_what_cannot_be_lowered(text: str, message: str):
    with pytest.raises(VerifyException, match=message):
        parse_module(text)


def test_aggregate_ops_need_an_aggregate_segment():
    trace = BufferLayout(units=4, capacity=16)
    text = AGGREGATE_TEXT.replace(SETUP, str(SegmentSetupOp(Granularity.WARP, trace)))
    with pytest.raises(
        VerifyException, match="needs a segment_setup with aggregate_scopes; this one is a trace of 16"
    ):
        parse_module(text)


def test_a_scope_id_must_fit_the_tag_field():
    with pytest.raises(VerifyException, match=r"scope id 65536 is not in 0\.\.65535"):
        AggregateEndOp(65536, 3).verify()


def test_convert_pik_to_pikgpu_in_aggregate_mode():
    module = parse_module(PIK)
    assert scope_count(module) == 2
    ConvertPikToPikGPU("warp", capacity=0, num_warps=4, aggregate_scopes=2).apply(make_context(), module)
    module.verify()
    assert str(module) == PIK_CONVERTED


def test_convert_refuses_a_scope_beyond_the_table_size():
    module = parse_module(PIK)
    with pytest.raises(ValueError, match="scope id 1 is beyond the 1 scopes of aggregate_scopes"):
        ConvertPikToPikGPU("warp", capacity=0, num_warps=4, aggregate_scopes=1).apply(make_context(), module)
