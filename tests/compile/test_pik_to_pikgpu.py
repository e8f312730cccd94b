"""``convert-pik-to-pikgpu``: ``pik`` text in, ``pikgpu`` text out."""

from __future__ import annotations

import pytest

from proton_ik.dialect import parse_module
from proton_ik.dialect.pikgpu import SegmentSetupOp, StoreRecordOp
from proton_ik.layout import VERSION, BufferLayout, make_tag
from proton_ik.lowering.pik_to_pikgpu import ConvertPikToPikGPU

PIK = """\
builtin.module attributes {pik.kernel = "k"} {
  pik.scope 0 : i64 "load" {line = 12 : i64}
  pik.scope 1 : i64 "store" {line = 17 : i64}
  pik.record "begin" "load" {line = 12 : i64, site = 28 : i64, scope_id = 0 : i64}
  pik.record "end" "load" {line = 14 : i64, site = 36 : i64, scope_id = 0 : i64}
  pik.record "begin" "store" {line = 17 : i64, site = 40 : i64, scope_id = 1 : i64}
  pik.record "end" "store" {line = 19 : i64, site = 52 : i64, scope_id = 1 : i64}
}"""


def setup_text(granularity: str, layout: BufferLayout) -> str:
    return (
        f'pikgpu.segment_setup {{granularity = "{granularity}", units = {layout.units} : i64, '
        f"capacity = {layout.capacity} : i64, cta_bytes = {layout.cta_bytes} : i64, "
        f"layout_version = {VERSION} : i64}}"
    )


def expected(granularity: str, layout: BufferLayout) -> str:
    return f"""\
builtin.module attributes {{pik.kernel = "k"}} {{
  {setup_text(granularity, layout)}
  pik.scope 0 : i64 "load" {{line = 12 : i64}}
  pik.scope 1 : i64 "store" {{line = 17 : i64}}
  %0 = pikgpu.read_clock {{site = 28 : i64}} : i32
  pikgpu.store_record %0 tag {make_tag(0, False)} : i64 {{site = 28 : i64}}
  %1 = pikgpu.read_clock {{site = 36 : i64}} : i32
  pikgpu.store_record %1 tag {make_tag(0, True)} : i64 {{site = 36 : i64}}
  %2 = pikgpu.read_clock {{site = 40 : i64}} : i32
  pikgpu.store_record %2 tag {make_tag(1, False)} : i64 {{site = 40 : i64}}
  %3 = pikgpu.read_clock {{site = 52 : i64}} : i32
  pikgpu.store_record %3 tag {make_tag(1, True)} : i64 {{site = 52 : i64}}
  pikgpu.finalize
}}"""


def test_pass_name_and_defaults():
    convert = ConvertPikToPikGPU()
    assert convert.name == "convert-pik-to-pikgpu"
    assert (convert.granularity, convert.capacity, convert.num_warps) == ("warp", 1024, 4)


def test_records_become_clock_reads_and_tagged_stores(context):
    module = parse_module(PIK)
    ConvertPikToPikGPU().apply(context, module)
    module.verify()
    assert str(module) == expected("warp", BufferLayout(units=4, capacity=1024))
    assert str(parse_module(str(module))) == str(module)


def test_tags_are_the_layouts():
    assert [make_tag(0, False), make_tag(0, True), make_tag(1, False), make_tag(1, True)] == [
        0,
        2147483648,
        1,
        2147483649,
    ]


@pytest.mark.parametrize(
    ("granularity", "num_warps", "capacity", "units"),
    [("warp", 8, 256, 8), ("warpgroup", 8, 64, 2), ("warpgroup", 4, 1024, 1), ("cta", 4, 16, 1)],
)
def test_segment_setup_carries_the_layout(context, granularity, num_warps, capacity, units):
    module = parse_module(PIK)
    ConvertPikToPikGPU(granularity, capacity, num_warps).apply(context, module)
    module.verify()
    layout = BufferLayout(units=units, capacity=capacity)
    assert str(module) == expected(granularity, layout)
    setup = module.body.block.first_op
    assert isinstance(setup, SegmentSetupOp)
    assert setup.layout == layout
    assert setup.cta_bytes.value.data == layout.cta_bytes
    assert setup.cta_bytes.value.data % 128 == 0


def test_an_empty_module_still_gets_a_frame(context):
    module = parse_module('builtin.module attributes {pik.kernel = "k"} {\n}')
    ConvertPikToPikGPU().apply(context, module)
    assert str(module) == (
        'builtin.module attributes {pik.kernel = "k"} {\n'
        f"  {setup_text('warp', BufferLayout(4, 1024))}\n"
        "  pikgpu.finalize\n}"
    )


def test_records_need_scope_ids(context):
    module = parse_module('builtin.module {\n  pik.record "begin" "a" {site = 1 : i64}\n}')
    with pytest.raises(ValueError, match="run pik-assign-scope-ids first"):
        ConvertPikToPikGPU().apply(context, module)


def test_warpgroups_need_a_multiple_of_four_warps(context):
    with pytest.raises(
        ValueError, match="granularity=warpgroup needs a multiple of 4 warps, the kernel has 2"
    ):
        ConvertPikToPikGPU("warpgroup", 1024, 2).apply(context, parse_module(PIK))


def test_every_store_reads_its_own_clock(context):
    module = parse_module(PIK)
    ConvertPikToPikGPU().apply(context, module)
    stores = [op for op in module.walk() if isinstance(op, StoreRecordOp)]
    assert len({id(s.clock.owner) for s in stores}) == len(stores) == 4
